"""Bad input to crowd studies, on SQLite and Postgres: a wrong link, missing or malformed ids, a closed or
full study and too many arrivals at once are each refused with a clear 4xx page in the participant's
language that echoes no id, and nothing is written; an admin's study that does not fit together is 422."""

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import func, select

from app.studies.models import CrowdIdentity, StudyParticipant
from app.users.models import User
from tests.studies.helpers import CODES, arrival, csrf_of, join, link_path, make_study, prolific_id

BROWSER = {"Accept": "text/html,application/xhtml+xml,*/*;q=0.8"}


def written(db_session) -> tuple[int, int, int]:
    """Accounts, platform ids and participants in the database."""
    return tuple(
        db_session.scalar(select(func.count()).select_from(table))
        for table in (User, CrowdIdentity, StudyParticipant)
    )


def refusal(page) -> str:
    """The refusal page's message."""
    return page.text.split('id="refusal">', 1)[1].split("</p>", 1)[0]


@pytest.mark.parametrize(
    ("query", "why"),
    [
        (arrival(None), "lacks your PROLIFIC_PID"),
        (arrival("5f" * 11), "lacks your PROLIFIC_PID"),  # 22 digits
        (arrival("A" * 24), "lacks your PROLIFIC_PID"),  # not lower-case hexadecimal
        (arrival("{{%PROLIFIC_PID%}}"), "lacks your PROLIFIC_PID"),  # a placeholder the platform did not fill
        (arrival("../../etc/passwd"), "lacks your PROLIFIC_PID"),
        (arrival(prolific_id(), session_id="x" * 70), "lacks your SESSION_ID"),
        ("?PROLIFIC_PID=" + prolific_id() + "&SESSION_ID=" + prolific_id(), "lacks your STUDY_ID"),
    ],
    # Named, not derived from the random ids: every xdist worker must collect the same test names.
    ids=["no-pid", "22-digits", "upper-case", "placeholder", "path", "long-session", "no-study"],
)
def test_missing_or_malformed_ids_are_refused_without_echo_and_nothing_is_written(
    client, db_session, competition, admin_headers, query, why
):
    study = make_study(client, admin_headers, competition.id)
    before = written(db_session)
    page = client.get(link_path(study) + query, headers=BROWSER)
    assert (
        page.status_code == 422 and why in refusal(page) and "open the study again from Prolific" in page.text
    )
    csrf = csrf_of(client.get(link_path(study) + arrival(prolific_id())).text)
    posted = client.post(link_path(study) + query, data={"csrf_token": csrf}, headers=BROWSER)
    assert posted.status_code == 422 and why in refusal(posted)
    for value in query.lstrip("?").split("&"):
        assert value.split("=", 1)[1] not in refusal(posted)
    assert written(db_session) == before and client.get("/api/v1/me").status_code == 401


def test_a_wrong_link_is_404_and_the_consent_form_needs_its_csrf_token(
    client, db_session, competition, admin_headers
):
    study = make_study(client, admin_headers, competition.id)
    wrong = client.get("/join/not-a-study-link" + arrival(prolific_id()), headers=BROWSER)
    assert wrong.status_code == 404 and "This study link does not work" in refusal(wrong)
    path = link_path(study)
    tampered = client.get(path[:-1] + ("y" if path.endswith("x") else "x") + arrival(prolific_id()))
    assert tampered.status_code == 404
    before = written(db_session)
    forged = client.post(link_path(study) + arrival(prolific_id()), data={"csrf_token": "forged"})
    assert forged.status_code == 403 and "CSRF" in forged.json()["detail"]
    assert written(db_session) == before


def test_a_closed_study_and_a_full_one_say_so_politely_and_those_in_them_go_on(
    app, client, db_session, competition, admin_headers
):
    study = make_study(client, admin_headers, competition.id, max_participants=1)
    inside = prolific_id()
    _, agreed = join(client, study, inside)
    assert agreed.status_code == 303
    before = written(db_session)
    with TestClient(app) as latecomer:
        full = latecomer.get(
            link_path(study) + arrival(prolific_id()), headers={**BROWSER, "Accept-Language": "de"}
        )
        assert full.status_code == 409 and "Diese Studie hat alle Teilnehmenden" in refusal(full)
    closed = client.patch(f"/api/v1/studies/{study['id']}", json={"is_open": False}, headers=admin_headers)
    assert closed.status_code == 200 and closed.json()["is_open"] is False
    with TestClient(app) as latecomer:
        page, _ = join(latecomer, study, prolific_id())
        assert page.status_code == 409 and "This study is closed" in refusal(page)
        csrf = csrf_of(latecomer.get("/login").text)
        posted = latecomer.post(link_path(study) + arrival(prolific_id()), data={"csrf_token": csrf})
        assert posted.status_code == 409
    assert written(db_session) == before
    with TestClient(app) as returning:  # one who joined before it closed comes back
        page, agreed = join(returning, study, inside)
        assert page.status_code == 200 and agreed.status_code == 303


def test_arrivals_are_rate_limited_per_study(app, client, db_session, competition, admin_headers):
    app.state.settings = app.state.settings.model_copy(update={"study_arrivals_per_minute": 2})
    study = make_study(client, admin_headers, competition.id)
    other_study = make_study(client, admin_headers, competition.id, name="other")
    for _ in range(2):
        with TestClient(app) as browser:
            assert join(browser, study, prolific_id())[1].status_code == 303
    before = written(db_session)
    with TestClient(app) as browser:
        page = browser.get(link_path(study) + arrival(prolific_id()), headers=BROWSER)
        assert page.status_code == 429 and 1 <= int(page.headers["retry-after"]) <= 60
        assert "Many people are joining this study right now" in refusal(page)
    assert written(db_session) == before
    with TestClient(app) as browser:  # another study has its own limit
        assert join(browser, other_study, prolific_id())[1].status_code == 303


@pytest.mark.parametrize(
    ("change", "why"),
    [
        ({"codes": {**CODES, "timed_out": CODES["completed"]}}, "the four codes must differ"),
        ({"codes": {**CODES, "completed": "has space"}}, "should match pattern"),
        ({"required_images": 5, "max_images": 4}, "max_images (4) is below required_images (5)"),
        ({"completion_url": "http://example.org/done?cc={code}"}, "must be an https:// address"),
        ({"completion_url": "https://example.org/done"}, "must hold {code} once"),
        ({"completion_url": "https://[::1/done?cc={code}"}, "must be an https:// address"),
        ({"platform": "mturk"}, "names its query parameters"),
        ({"participant_parameter": "STUDY_ID"}, "the three query parameters must differ"),
        ({"bonus_rate": "0.05"}, "a bonus_rate needs a bonus_rule"),
        ({"bonus_rule": "per_image", "bonus_rate": "0.00001"}, "no more than 4 decimal places"),
        ({"bonus_rule": "per_image", "bonus_rate": "-1"}, "greater than or equal to 0"),
        ({"required_images": 0}, "greater than or equal to 1"),
        ({"consent_text": ""}, "at least 1 character"),
    ],
)
def test_a_study_that_does_not_fit_together_is_refused_and_nothing_is_made(
    client, db_session, competition, admin_headers, change, why
):
    body = {
        "competition_id": competition.id,
        "name": "pilot",
        "codes": CODES,
        "required_images": 2,
        "max_participants": 10,
        "consent_text": "ok",
        **change,
    }
    refused = client.post("/api/v1/studies", json=body, headers=admin_headers)
    assert refused.status_code == 422 and why in refused.text, refused.text
    assert client.get("/api/v1/studies", headers=admin_headers).json() == []


def test_changes_unknown_studies_and_callers_who_take_no_part_are_refused(
    client, competition, admin_headers, annotator_headers
):
    study = make_study(client, admin_headers, competition.id, required_images=3, max_images=5)
    path = f"/api/v1/studies/{study['id']}"
    shrunk = client.patch(path, json={"max_images": 2}, headers=admin_headers)
    assert shrunk.status_code == 422 and "below required_images (3)" in shrunk.json()["detail"]
    assert client.patch(path, json={"name": None}, headers=admin_headers).status_code == 422
    assert client.get(path, headers=admin_headers).json()["max_images"] == 5  # unchanged
    unknown = {**study, "competition_id": 999_999}
    assert (
        client.post("/api/v1/studies", json=unknown | {"codes": CODES}, headers=admin_headers).status_code
        == 404
    )
    assert client.get("/api/v1/studies/999999", headers=admin_headers).status_code == 404
    assert client.get(path, headers=annotator_headers).status_code == 403
    assert client.get(f"{path}/me", headers=annotator_headers).status_code == 404  # takes no part in it
    assert client.post(f"{path}/me/finish", headers=annotator_headers).status_code == 404
    assert client.get(f"{path}/me").status_code == 401
    assert client.get(f"/studies/{study['id']}/label", headers=BROWSER).status_code == 401
