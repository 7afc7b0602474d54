"""Paying a study's participants, on SQLite and Postgres: the participants table and the bulk bonus file
match the votes (images answered) and the work records (active time by the server's clock); deleting a
study deletes its platform ids and keeps the votes; a release bundle carries pseudonyms, never platform
ids."""

import csv
import io
from decimal import ROUND_HALF_UP, Decimal

import pyarrow.parquet as pq
from fastapi.testclient import TestClient
from sqlalchemy import distinct, func, select

from app.db.base import Base
from app.labelling.models import Question, Vote
from app.release.bundle import write_release
from app.release.tables import pseudonym, pseudonym_key
from app.users.models import User
from tests.labelling.factories import labelling_competition, let_time_pass
from tests.studies.helpers import joined, make_study, prolific_id


def images_voted(db_session, competition_id: int, username: str) -> int:
    """The images an account answered in the competition, from the votes themselves."""
    return db_session.scalar(
        select(func.count(distinct(Question.image_id)))
        .join(Vote, Vote.question_id == Question.id)
        .join(User, User.id == Vote.user_id)
        .where(Vote.competition_id == competition_id, User.username == username)
    )


def participants(client: TestClient, study: dict, headers: dict[str, str]) -> dict[str, dict]:
    """The study's participants table, by platform id."""
    rows = client.get(f"/api/v1/studies/{study['id']}/participants", headers=headers)
    assert rows.status_code == 200, rows.text
    return {row["participant_id"]: row for row in rows.json()}


def test_per_image_bonuses_pay_the_images_beyond_the_required_to_those_who_completed(
    client, app, db_session, competition, admin_headers
):
    labelling_competition(db_session, competition, classifiers=3, images_per_pair=4)
    study = make_study(
        client,
        admin_headers,
        competition.id,
        required_images=2,
        max_images=4,
        bonus_rule="per_image",
        bonus_rate="0.05",
    )
    answered = {}  # platform id: images they answer
    for images, finishes in ((4, False), (3, True), (2, True), (1, False)):
        pid = prolific_id()
        with TestClient(app) as browser:
            participant = joined(browser, study, pid)
            for _ in range(images):
                participant.label()
            if finishes:
                assert participant.finish().json()["outcome"] == "completed"
            elif images == 4:
                assert participant.me()["outcome_due"] == "completed"  # the upper limit: leaving is due
                participant.finish()
        answered[pid] = images
    table = participants(client, study, admin_headers)
    expected = ""
    for pid, images in answered.items():
        row = table[pid]
        assert row["images"] == images_voted(db_session, competition.id, row["username"]) == images
        completed = images >= 2
        assert row["outcome"] == ("completed" if completed else None)
        bonus = Decimal("0.05") * (min(images, 4) - 2) if completed else Decimal(0)
        assert Decimal(row["bonus"]) == bonus
        if bonus > 0:
            expected += f"{pid},{bonus.quantize(Decimal('0.01'))}\n"
    bonuses = client.get(f"/api/v1/studies/{study['id']}/bonuses", headers=admin_headers)
    assert bonuses.status_code == 200 and bonuses.headers["content-type"].startswith("text/csv")
    assert bonuses.text == expected and expected.count("\n") == 2  # 0.10 and 0.05; none for 0.00


def test_per_minute_bonuses_pay_active_time_as_the_work_records_count_it(
    client, app, db_session, competition, admin_headers
):
    labelling_competition(db_session, competition, classifiers=3, images_per_pair=4)
    study = make_study(
        client,
        admin_headers,
        competition.id,
        required_images=2,
        time_limit_minutes=30,
        bonus_rule="per_minute",
        bonus_rate="0.13",
    )
    worked = prolific_id()
    with TestClient(app) as browser:
        participant = joined(browser, study, worked)
        for seconds in (
            25,
            70,
        ):  # claimed per answer; the server saw each image for 40 s, which is what counts
            participant.label(seconds=seconds, looking=lambda: let_time_pass(db_session, 40))
        assert participant.finish().json()["outcome"] == "completed"
    stopped = prolific_id()
    with TestClient(app) as browser:
        participant = joined(browser, study, stopped)
        participant.label()  # then leaves without finishing: no bonus while unfinished
    table = participants(client, study, admin_headers)
    records = client.get(
        "/api/v1/work-records", params={"competition_id": competition.id}, headers=admin_headers
    ).json()
    seconds = sum(r["active_seconds"] for r in records if r["username"] == table[worked]["username"])
    assert 0 < seconds == table[worked]["active_seconds"]
    bonus = (Decimal("0.13") * Decimal(repr(seconds)) / 60).quantize(Decimal("0.01"), ROUND_HALF_UP)
    assert Decimal(table[worked]["bonus"]) == bonus > 0
    assert table[stopped]["outcome"] is None and Decimal(table[stopped]["bonus"]) == 0
    bonuses = client.get(f"/api/v1/studies/{study['id']}/bonuses", headers=admin_headers).text
    assert bonuses == f"{worked},{bonus}\n"
    exported = client.get(
        f"/api/v1/studies/{study['id']}/participants", params={"format": "csv"}, headers=admin_headers
    )
    rows = list(csv.DictReader(io.StringIO(exported.text)))
    assert [(row["participant_id"], row["outcome"], row["bonus"]) for row in rows] == [
        (worked, "completed", str(bonus)),
        (stopped, "", "0.00"),
    ]


def database_text(db_session) -> str:
    """Every value of every table, as one text."""
    return "\n".join(
        repr(tuple(row)) for table in Base.metadata.sorted_tables for row in db_session.execute(select(table))
    )


def test_deleting_a_study_deletes_its_platform_ids_and_keeps_the_votes(
    client, app, db_session, competition, admin_headers
):
    labelling_competition(db_session, competition, classifiers=3, images_per_pair=4)
    study = make_study(client, admin_headers, competition.id)
    kept_study = make_study(client, admin_headers, competition.id, name="kept")
    pid, other_pid = prolific_id(), prolific_id()
    with TestClient(app) as browser:
        participant = joined(browser, study, pid)
        participant.label()
        username = participant.account()["username"]
    with TestClient(app) as other_browser:
        joined(other_browser, kept_study, other_pid).label()
    assert pid in database_text(db_session)
    deleted = client.delete(f"/api/v1/studies/{study['id']}", headers=admin_headers)
    assert deleted.status_code == 204
    text = database_text(db_session)
    assert pid not in text and other_pid in text  # the other study keeps its own
    account = db_session.scalar(select(User).where(User.username == username))
    assert not account.is_active and images_voted(db_session, competition.id, username) == 1
    assert client.get(f"/api/v1/studies/{study['id']}", headers=admin_headers).status_code == 404
    with TestClient(app) as browser:  # the same person in the kept study: a new account, nothing links them
        again = joined(browser, kept_study, pid)
        assert again.account()["username"] != username


def test_a_release_bundle_keeps_pseudonyms_and_never_a_platform_id(
    client, app, db_session, competition, admin_headers, settings, tmp_path
):
    labelling_competition(db_session, competition, classifiers=3, images_per_pair=4)
    study = make_study(client, admin_headers, competition.id)
    pid = prolific_id()
    with TestClient(app) as browser:
        participant = joined(browser, study, pid)
        participant.label()
        account = participant.account()
    out = tmp_path / "release"
    write_release(
        db_session=db_session, competition=competition, settings=settings, out=out, license_id="cc0-1.0"
    )
    files = b"".join(path.read_bytes() for path in sorted(out.rglob("*")) if path.is_file())
    assert pid.encode() not in files and account["username"].encode() not in files
    votes = pq.read_table(out / "votes.parquet").to_pylist()
    expected = pseudonym(pseudonym_key(settings.secret_key), competition.id, account["id"])
    assert [vote["annotator"] for vote in votes] == [expected, expected]
