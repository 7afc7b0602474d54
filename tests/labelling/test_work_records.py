"""Work records for paying annotators: per annotator and UTC day, answers, active time (each answer's seconds,
capped) and gold accuracy, as JSON and CSV from the API and on the admin page, over one competition or all."""

import csv
import io
import re
import time
from collections import defaultdict
from datetime import UTC, date, timedelta

import pytest
from sqlalchemy import select, update

from app.competitions.schemas import CompetitionCreate
from app.competitions.service import create_competition
from app.db.base import utcnow
from app.labelling.models import GoldAnswer, Question, Vote
from app.labelling.quality_control.work_records import ACTIVE_SECONDS_CAP
from app.users.models import Role, User
from tests.conftest import TEST_PASSWORD, bearer, make_user
from tests.labelling.factories import (
    add_classifiers,
    add_images,
    labelling_competition,
    let_time_pass,
    store_pair,
)

SECONDS = {"alice": [[1.5, 200.0], [None, 3.0]], "@mallory": [[10.0, 20.0]]}
"""What each annotator takes per question, image by image (None: an API client that sent no seconds)."""
LOOKED = 300.0
"""How long each image is on screen before it is answered, by the server's clock."""


@pytest.fixture
def worked(client, db_session, competition):
    """Two annotators' answers in the competition (alice's first image yesterday), one gold question right and
    one wrong for alice, and an answer by alice in another competition; the labelling path."""
    competition.k = 2
    labelling_competition(db_session, competition, classifiers=3, images_per_pair=3)
    other = create_competition(db_session=db_session, spec=CompetitionCreate(name="other"))
    other.k = 2
    pair = tuple(add_classifiers(db_session, other, 2))
    store_pair(db_session, other, pair, add_images(db_session, other, 2, seed=90_000), first_label=0)
    db_session.commit()
    for name, images in SECONDS.items():
        headers = bearer(db_session, make_user(db_session, name, Role.annotator))
        for seconds in images:
            answer(client, db_session, competition.id, headers, seconds)
        if name == "alice":
            answer(client, db_session, other.id, headers, [5.0, 5.0])
    alice = db_session.scalar(select(User).where(User.username == "alice"))
    first = db_session.scalars(
        select(Vote)
        .join(Question)
        .where(Vote.user_id == alice.id, Question.competition_id == competition.id)
        .order_by(Vote.id)
        .limit(2)
    ).all()  # the two questions of alice's first image
    yesterday = utcnow() - timedelta(days=1)
    db_session.execute(
        update(Vote).where(Vote.id.in_([vote.id for vote in first])).values(created_at=yesterday)
    )
    for vote, known in zip(first, (True, False), strict=True):  # alice answered yes to both
        db_session.execute(update(Question).where(Question.id == vote.question_id).values(gold_answer=known))
        db_session.add(
            GoldAnswer(
                question_id=vote.question_id, user_id=alice.id, answer=vote.answer, created_at=yesterday
            )
        )
    db_session.commit()
    return competition, other


def answer(client, db_session, competition_id: int, headers: dict, seconds: list) -> None:
    """Lease the next image, look at it for LOOKED seconds, and answer yes to its questions, claiming these
    seconds."""
    path = f"/api/v1/competitions/{competition_id}/labelling"
    item = client.post(f"{path}/next", headers=headers).json()["item"]
    let_time_pass(db_session, LOOKED)
    answers = [
        {"question_id": question["question_id"], "answer": True} | ({} if took is None else {"seconds": took})
        for question, took in zip(item["questions"], seconds, strict=True)
    ]
    assert client.post(f"{path}/answers", json={"answers": answers}, headers=headers).status_code == 200


def expected(db_session, competition_id: int | None) -> dict:
    """(day, username) → (answers, active seconds, gold answered, gold correct), from the stored rows."""
    totals = defaultdict(lambda: [0, 0.0, 0, 0])
    votes = select(Vote, User.username, Question.competition_id).join(User).join(Question)
    for vote, name, in_competition in db_session.execute(votes):
        if competition_id in (None, in_competition):
            row = totals[vote.created_at.astimezone(UTC).date(), name]
            row[0] += 1
            row[1] += min(vote.seconds or 0.0, ACTIVE_SECONDS_CAP)
    golds = select(GoldAnswer, User.username, Question).join(User).join(Question)
    for gold, name, question in db_session.execute(golds):
        if competition_id in (None, question.competition_id):
            row = totals[gold.created_at.astimezone(UTC).date(), name]
            row[2] += 1
            row[3] += gold.answer == question.gold_answer
    return {key: tuple(value) for key, value in totals.items()}


def as_table(rows: list[dict]) -> dict:
    """The API's rows in expected()'s shape."""
    return {
        (date.fromisoformat(row["day"]), row["username"]): (
            row["answers"],
            row["active_seconds"],
            row["gold_answered"],
            row["gold_correct"],
        )
        for row in rows
    }


def test_work_records_count_answers_capped_time_and_gold_per_day(client, db_session, worked, admin_headers):
    competition, _ = worked
    today, yesterday = utcnow().date(), utcnow().date() - timedelta(days=1)
    for competition_id in (competition.id, None):
        query = {} if competition_id is None else {"competition_id": competition_id}
        response = client.get("/api/v1/work-records", params=query, headers=admin_headers)
        assert response.status_code == 200
        rows = response.json()
        got, want = as_table(rows), expected(db_session, competition_id)
        assert got.keys() == want.keys()
        for key, values in want.items():
            assert got[key] == pytest.approx(values), key
    alice_yesterday = next(r for r in rows if r["username"] == "alice" and r["day"] == str(yesterday))
    assert alice_yesterday["active_seconds"] == pytest.approx(1.5 + ACTIVE_SECONDS_CAP)  # 200 s was idle
    assert (alice_yesterday["gold_answered"], alice_yesterday["gold_accuracy"]) == (2, 0.5)
    alice_today = next(r for r in rows if r["username"] == "alice" and r["day"] == str(today))
    # no seconds sent: half the image's time on screen by the server's clock, over the cap
    assert alice_today["active_seconds"] == pytest.approx(ACTIVE_SECONDS_CAP + 3.0 + 5.0 + 5.0)
    assert alice_today["gold_accuracy"] is None

    only_today = client.get(
        "/api/v1/work-records", params={"since": str(today)}, headers=admin_headers
    ).json()
    assert {row["day"] for row in only_today} == {str(today)}
    assert (
        client.get(
            "/api/v1/work-records",
            params={"until": str(yesterday - timedelta(days=1))},
            headers=admin_headers,
        ).json()
        == []
    )


def test_the_csv_has_the_same_rows_and_runs_no_formula(client, worked, admin_headers):
    rows = client.get("/api/v1/work-records", headers=admin_headers).json()
    response = client.get("/api/v1/work-records", params={"format": "csv"}, headers=admin_headers)
    assert response.status_code == 200 and response.headers["content-type"].startswith("text/csv")
    assert "attachment" in response.headers["content-disposition"]
    parsed = list(csv.DictReader(io.StringIO(response.text)))
    assert [row["username"] for row in parsed] == [
        "'" + row["username"] if row["username"].startswith("@") else row["username"] for row in rows
    ]
    assert "'@mallory" in response.text and "\n@mallory" not in response.text
    for row, got in zip(rows, parsed, strict=True):
        assert float(got["active_seconds"]) == pytest.approx(row["active_seconds"])
        assert got["gold_accuracy"] == ("" if row["gold_accuracy"] is None else str(row["gold_accuracy"]))


def test_bad_spans_unknown_competitions_and_non_admins_are_refused(
    client, worked, admin_headers, annotator_headers
):
    today = utcnow().date()
    bad = [
        ({"since": str(today), "until": str(today - timedelta(days=1))}, 422, "after"),
        ({"since": str(today - timedelta(days=400))}, 422, "366 days"),
        ({"competition_id": 99_999}, 404, "no competition"),
        ({"since": "yesterday"}, 422, ""),
    ]
    for params, status, says in bad:
        response = client.get("/api/v1/work-records", params=params, headers=admin_headers)
        assert response.status_code == status and says in response.text, (params, response.text)
    assert client.get("/api/v1/work-records", headers=annotator_headers).status_code == 403
    assert client.get("/api/v1/work-records").status_code == 401


def test_the_admin_page_shows_the_records_and_links_the_csv(client, worked, admin):
    competition, _ = worked
    page = client.get("/login").text
    csrf = re.search(r'name="csrf_token" value="([^"]+)"', page).group(1)
    client.post("/login", data={"username": admin.username, "password": TEST_PASSWORD, "csrf_token": csrf})
    shown = client.get("/admin/work-records", params={"competition_id": competition.id})
    assert shown.status_code == 200 and "@mallory" in shown.text and "alice" in shown.text
    link = re.search(r'href="(/api/v1/work-records\?[^"]+)"', shown.text).group(1).replace("&amp;", "&")
    assert f"competition_id={competition.id}" in link and "format=csv" in link
    assert client.get(link).text.startswith("day,user_id,username,answers,active_seconds")
    assert client.get("/admin/work-records", params={"competition_id": 99_999}).status_code == 404


@pytest.mark.parametrize(
    "params",
    [
        {"until": "9999-12-31"},
        {"until": "0001-01-01"},
        {"since": "0001-01-01", "until": "0001-01-02"},
        {"since": "9999-12-31", "until": "9999-12-31"},
    ],
)
def test_days_at_the_ends_of_the_calendar_are_refused_with_a_message(client, admin, admin_headers, params):
    response = client.get("/api/v1/work-records", params=params, headers=admin_headers)
    assert response.status_code == 422 and "must be a day from 1970-01-01 to 9999-12-30" in response.text
    assert response.json()["code"] == "invalid"
    page = client.get("/login").text
    csrf = re.search(r'name="csrf_token" value="([^"]+)"', page).group(1)
    client.post("/login", data={"username": admin.username, "password": TEST_PASSWORD, "csrf_token": csrf})
    shown = client.get("/admin/work-records", params=params, headers={"Accept": "text/html"})
    assert shown.status_code == 422 and "must be a day from 1970-01-01 to 9999-12-30" in shown.text
    assert f'href="/account">{admin.username} (' in shown.text  # the error page knows who is signed in


def test_active_time_comes_from_the_servers_clock_not_the_clients_claim(client, db_session, competition):
    """Issue 25, item 3: fourteen answers sent as fast as the client can, each claiming a minute, are credited
    no more time than passed."""
    competition.k = 2
    labelling_competition(db_session, competition, classifiers=3, images_per_pair=3)  # 6 images
    claimant = make_user(db_session, "claimant", Role.annotator)
    headers = bearer(db_session, claimant)
    path = f"/api/v1/competitions/{competition.id}/labelling"
    started = time.monotonic()
    following = client.post(f"{path}/next", headers=headers).json()
    answered = 0
    while following["status"] == "item":
        answers = [
            {"question_id": q["question_id"], "answer": True, "seconds": ACTIVE_SECONDS_CAP}
            for q in following["item"]["questions"]
        ]
        sent = client.post(f"{path}/answers", json={"answers": answers, "next": True}, headers=headers)
        assert sent.status_code == 200, sent.text
        answered += sent.json()["recorded"]
        following = sent.json()["next"]
    took = time.monotonic() - started
    admin = make_user(db_session, "payer", Role.admin)
    (record,) = client.get(
        "/api/v1/work-records", params={"competition_id": competition.id}, headers=bearer(db_session, admin)
    ).json()
    assert (record["username"], record["answers"]) == ("claimant", answered) and answered == 12
    assert record["active_seconds"] <= took < answered * ACTIVE_SECONDS_CAP
