"""Crowd studies through the HTTP API and the study's pages, on SQLite and Postgres: a study link in,
consent, an account bound to the platform id, labelling, and a completion code out per outcome; coming
back resumes; the same id is one annotator through two studies and never reaches another account; the
account labels only in its study's competition."""

import hashlib
import random
from datetime import timedelta

from fastapi.testclient import TestClient
from sqlalchemy import select

from app.competitions.schemas import CompetitionCreate
from app.competitions.service import create_competition
from app.studies.models import Study, StudyParticipant
from app.users.models import User
from tests.labelling.factories import add_classifiers, add_images, labelling_competition, store_pair
from tests.studies.helpers import CODES, CONSENT, arrival, join, joined, link_path, make_study, prolific_id

PROLIFIC_COMPLETE = "https://app.prolific.com/submissions/complete?cc="


def test_an_admin_opens_a_study_whose_link_is_shown_once_and_kept_only_as_a_hash(
    client, db_session, competition, admin_headers
):
    study = make_study(client, admin_headers, competition.id)
    token = study["url"].rsplit("/", 1)[1]
    assert study["url"] == f"http://testserver/join/{token}"
    assert study["url_with_parameters"] == (
        f"{study['url']}?PROLIFIC_PID={{{{%PROLIFIC_PID%}}}}&STUDY_ID={{{{%STUDY_ID%}}}}"
        "&SESSION_ID={{%SESSION_ID%}}"
    )
    stored = db_session.get(Study, study["id"])
    assert stored.token_hash == hashlib.sha256(token.encode()).hexdigest() and token not in repr(vars(stored))
    read = client.get(f"/api/v1/studies/{study['id']}", headers=admin_headers).json()
    assert "url" not in read and read["participants"] == 0 and read["outcomes"] == {}
    assert read["completion_url"] == PROLIFIC_COMPLETE + "{code}" and read["codes"] == CODES
    assert (read["participant_parameter"], read["max_images"]) == ("PROLIFIC_PID", 2)
    assert [s["id"] for s in client.get("/api/v1/studies", headers=admin_headers).json()] == [study["id"]]
    renewed = client.post(f"/api/v1/studies/{study['id']}/link", headers=admin_headers).json()
    assert renewed["url"] != study["url"]
    assert client.get(link_path(study) + arrival(prolific_id())).status_code == 404  # the old link is dead
    assert client.get(link_path(renewed) + arrival(prolific_id())).status_code == 200


def test_a_participant_consents_labels_the_required_images_and_leaves_with_the_completed_code(
    client, db_session, competition, admin_headers
):
    labelling_competition(db_session, competition, classifiers=3, images_per_pair=4)
    study = make_study(client, admin_headers, competition.id, required_images=3)
    pid = prolific_id()
    consent = client.get(link_path(study) + arrival(pid))
    assert consent.status_code == 200 and consent.headers["referrer-policy"] == "no-referrer"
    assert CONSENT.split("\n\n")[1] in consent.text
    participant = joined(client, study, pid)
    account = participant.account()
    assert account["role"] == "annotator" and account["username"].startswith("prolific-")
    assert pid not in account["username"]
    page = client.get(f"/studies/{study['id']}/label")
    assert page.status_code == 200 and f'data-study="/api/v1/studies/{study["id"]}"' in page.text
    participant.label()
    assert participant.me()["images"] == 1 and participant.me()["outcome_due"] is None
    early = participant.finish()
    assert early.status_code == 409 and early.json()["detail"] == "answer 2 more images before you finish"
    participant.label()
    participant.label()
    assert participant.me() | {"deadline": None} == {
        "study_id": study["id"],
        "required_images": 3,
        "max_images": 3,
        "images": 3,
        "deadline": None,
        "outcome": None,
        "outcome_due": "completed",
        "may_finish": False,
    }
    left = participant.finish()
    assert left.status_code == 200, left.text
    assert left.json() == {
        "outcome": "completed",
        "code": "C0MPLETE",
        "completion_url": PROLIFIC_COMPLETE + "C0MPLETE",
    }
    assert participant.finish().json()["outcome"] == "completed"  # leaving again changes nothing
    refused = client.post(f"{participant.labelling}/next", headers=participant.headers)
    assert refused.status_code == 403  # their labelling there has ended
    done = client.get(f"/studies/{study['id']}/done")
    assert done.status_code == 200 and "C0MPLETE" in done.text and PROLIFIC_COMPLETE + "C0MPLETE" in done.text
    assert client.get(f"/studies/{study['id']}/label", follow_redirects=False).headers["location"] == (
        f"/studies/{study['id']}/done"
    )
    again = client.get(link_path(study) + arrival(pid))  # the link again: their code, no second start
    assert again.status_code == 200 and "C0MPLETE" in again.text
    read = client.get(f"/api/v1/studies/{study['id']}", headers=admin_headers).json()
    assert read["participants"] == 1 and read["outcomes"] == {"completed": 1}


def test_coming_back_with_the_same_id_resumes_the_same_account_from_another_browser(
    app, client, db_session, competition, admin_headers
):
    labelling_competition(db_session, competition, classifiers=3, images_per_pair=4)
    study = make_study(client, admin_headers, competition.id, required_images=3)
    pid = prolific_id()
    first = joined(client, study, pid)
    first.label()
    with TestClient(app) as other_browser:
        url = link_path(study) + arrival(pid, session_id="b" * 24)
        welcome = other_browser.get(url)
        assert welcome.status_code == 200 and "Welcome back" in welcome.text
        assert "You have answered 1 image of the 3" in welcome.text
        second = joined(other_browser, study, pid, session_id="b" * 24)
        assert second.account()["id"] == first.account()["id"]
        assert second.me()["images"] == 1
        second.label()
        assert second.me()["images"] == 2
    rows = client.get(f"/api/v1/studies/{study['id']}/participants", headers=admin_headers).json()
    assert [(row["participant_id"], row["images"], row["session_id"]) for row in rows] == [(pid, 2, "b" * 24)]


def test_an_id_reaches_only_its_own_account_and_one_person_is_one_annotator_across_studies(
    client, app, db_session, competition, admin_headers
):
    labelling_competition(db_session, competition, classifiers=3, images_per_pair=4)
    first_study = make_study(client, admin_headers, competition.id, required_images=2)
    second_study = make_study(client, admin_headers, competition.id, required_images=1, name="second")
    pid, other_pid = prolific_id(), prolific_id()
    person = joined(client, first_study, pid)
    person.label()
    with TestClient(app) as other_browser:
        other = joined(other_browser, first_study, other_pid)
        assert other.account()["id"] != person.account()["id"]
    with TestClient(app) as second_browser:  # the second study while the first is unfinished: refused
        page, agreed = join(second_browser, second_study, pid)
        assert agreed.status_code == 409 and "another study of this competition" in agreed.text
    person.label()
    assert person.finish().json()["outcome"] == "completed"
    with TestClient(app) as second_browser:
        again = joined(second_browser, second_study, pid)
        assert again.account()["id"] == person.account()["id"]  # one annotator: a panel seat once
        assert again.label() is not None and again.me()["images"] == 1  # counted from this study's consent
    accounts = db_session.scalars(select(User).where(User.username.like("prolific-%"))).all()
    assert len(accounts) == 2 and all(account.member_competitions_only for account in accounts)


def test_a_participant_labels_only_in_their_study_s_competition(
    client, db_session, competition, admin_headers
):
    labelling_competition(db_session, competition, classifiers=3, images_per_pair=4)
    elsewhere = create_competition(db_session=db_session, spec=CompetitionCreate(name="open-to-all"))
    pair = add_classifiers(db_session, elsewhere, 2)
    store_pair(db_session, elsewhere, (pair[0], pair[1]), add_images(db_session, elsewhere, 2, seed=5000), 0)
    db_session.commit()
    study = make_study(client, admin_headers, competition.id)
    participant = joined(client, study, prolific_id())
    refused = client.post(f"/api/v1/competitions/{elsewhere.id}/labelling/next", headers=participant.headers)
    assert refused.status_code == 403 and "members only" in refused.json()["detail"]
    assert client.get(f"/competitions/{elsewhere.id}/label").status_code == 403
    home = client.get("/").text
    assert competition.name in home and "open-to-all" not in home
    assert participant.label() is not None  # their own competition, where the link admitted them
    assert client.get("/admin").status_code == 403
    assert client.get(f"/api/v1/studies/{study['id']}/participants").status_code == 403


def test_a_participant_paused_by_gold_leaves_with_the_screened_out_code(
    client, db_session, competition, admin_headers
):
    from tests.labelling.test_quality_control import add_gold

    random.seed(36)
    competition.gold_rate = 0.95
    labelling_competition(db_session, competition, classifiers=3, images_per_pair=4)
    add_gold(client, db_session, competition, admin_headers, 6)  # each: class 3 yes, class 4 no
    changed = client.patch(
        f"/api/v1/competitions/{competition.id}",
        json={"gold_threshold": 0.75, "gold_min_answers": 2},
        headers=admin_headers,
    )
    assert changed.status_code == 200
    study = make_study(client, admin_headers, competition.id, required_images=6)
    participant = joined(client, study, prolific_id())
    for _ in range(5):
        if participant.label(answer=True).get("paused"):  # "yes" to both: one gold answer in two is wrong
            break
    assert participant.me()["outcome_due"] == "screened_out"
    left = participant.finish().json()
    assert (left["outcome"], left["code"]) == ("screened_out", "SCREEN3D")
    rows = client.get(f"/api/v1/studies/{study['id']}/participants", headers=admin_headers).json()
    assert rows[0]["outcome"] == "screened_out" and rows[0]["gold_accuracy"] == 0.5


def test_running_out_of_work_or_time_leaves_with_their_codes(
    client, app, db_session, competition, admin_headers
):
    labelling_competition(db_session, competition, classifiers=2, images_per_pair=2)  # two images in all
    study = make_study(client, admin_headers, competition.id, required_images=5, time_limit_minutes=5)
    thorough = joined(client, study, prolific_id())
    assert thorough.label() and thorough.label() and thorough.label() is None
    assert thorough.me()["outcome_due"] == "no_work_left"
    assert thorough.finish().json()["code"] == "N0W0RK"
    with TestClient(app) as other_browser:
        slow = joined(other_browser, study, prolific_id())
        slow.label()
        assert slow.me()["outcome_due"] is None
        participant = db_session.scalars(
            select(StudyParticipant).order_by(StudyParticipant.id.desc())
        ).first()
        participant.arrived_at -= timedelta(minutes=6)  # their five minutes are up
        db_session.commit()
        assert slow.me()["outcome_due"] == "timed_out"
        assert slow.finish().json()["code"] == "T1MEOUT"
