"""`mad studies`: open a study and get its link once, list, close and reopen it, give it a new link, read its
participants and bonus file, delete it; bad input is a clean message, nothing made."""

import csv
import io
import re

import pytest
from typer.testing import CliRunner

from app.cli.main import app as cli
from app.competitions.service import get_competition_by_name
from app.db.base import utcnow
from app.db.engine import create_db_engine, create_sessionmaker
from app.studies import arrivals, progress
from app.studies.models import Study
from app.users.models import User
from tests.labelling.factories import answer_next, labelling_competition
from tests.studies.helpers import CONSENT, prolific_id

runner = CliRunner()


def invoke(env, *args):
    """Run `mad` with these arguments in this environment."""
    return runner.invoke(cli, list(args), env=env, catch_exceptions=False, terminal_width=200)


def study_options(consent: str) -> list[str]:
    """`mad studies create`'s options for a small per-image study."""
    return [
        *("--name", "pilot", "--participants", "5", "--required", "2", "--max-images", "3"),
        *("--consent", consent, "--completed-code", "DONE1", "--no-work-left-code", "EMPTY1"),
        *("--screened-out-code", "GOLD1", "--timed-out-code", "LATE1"),
        *("--bonus-rule", "per_image", "--bonus-rate", "0.25", "--base-url", "https://mad.example.org/"),
    ]


@pytest.fixture
def env(tmp_path, fresh_database_url) -> dict[str, str]:
    """Environment for `mad` on a database of its own, with the competition `crowd` and consent.txt made."""
    environment = {
        "MAD_DATABASE_URL": fresh_database_url,
        "MAD_DATA_DIR": str(tmp_path / "data"),
        "MAD_ENV": "development",
    }
    (tmp_path / "consent.txt").write_text(CONSENT, encoding="utf-8")
    assert invoke(environment, "competitions", "create", "crowd").exit_code == 0
    return environment


def test_a_study_from_the_command_line(env, tmp_path, fresh_database_url):
    made = invoke(env, "studies", "create", "crowd", *study_options(str(tmp_path / "consent.txt")))
    assert made.exit_code == 0, made.output
    link = re.search(
        r"https://mad\.example\.org/join/(\S+)\?PROLIFIC_PID=\{\{%PROLIFIC_PID%\}\}\S*", made.output
    )
    assert link is not None, made.output
    token = link.group(1)
    listed = invoke(env, "studies", "list", "-c", "crowd")
    assert listed.exit_code == 0 and "pilot" in listed.output and "0 of 5" in listed.output
    assert token not in listed.output  # shown once

    engine = create_db_engine(fresh_database_url)
    try:
        with create_sessionmaker(engine)() as session:
            competition = get_competition_by_name(db_session=session, name="crowd")
            labelling_competition(session, competition, classifiers=3, images_per_pair=4)
            pid = prolific_id()
            arrival = arrivals.Arrival(pid, "a" * 24, "b" * 24)
            participant, user = arrivals.admit(
                db_session=session, token=token, arrival=arrival, now=utcnow(), per_minute=60
            )
            session.commit()
            for _ in range(3):
                answer_next(session, competition, session.get_one(User, user.id))
            study = session.get_one(Study, participant.study_id)
            assert (
                progress.finish(db_session=session, study=study, user=user, now=utcnow()).value == "completed"
            )
            session.commit()
            study_id = study.id
    finally:
        engine.dispose()

    bonuses = invoke(env, "studies", "bonuses", str(study_id))
    assert bonuses.exit_code == 0 and bonuses.output == f"{pid},0.25\n"
    out = tmp_path / "participants.csv"
    assert invoke(env, "studies", "participants", str(study_id), "--out", str(out)).exit_code == 0
    (row,) = csv.DictReader(io.StringIO(out.read_text(encoding="utf-8")))
    assert (row["participant_id"], row["images"], row["outcome"], row["bonus"]) == (
        pid,
        "3",
        "completed",
        "0.25",
    )
    shown = invoke(env, "studies", "participants", str(study_id))
    assert pid in shown.output and "completed" in shown.output

    assert "closed to new participants" in invoke(env, "studies", "close", str(study_id)).output
    assert "closed" in invoke(env, "studies", "list").output
    assert invoke(env, "studies", "open", str(study_id)).exit_code == 0
    renewed = invoke(env, "studies", "link", str(study_id), "--base-url", "https://mad.example.org")
    assert renewed.exit_code == 0 and token not in renewed.output and "/join/" in renewed.output

    deleted = invoke(env, "studies", "delete", str(study_id), "--yes")
    assert deleted.exit_code == 0 and "platform ids of its 1 participants" in deleted.output
    assert invoke(env, "studies", "bonuses", str(study_id)).exit_code == 1


def test_bad_study_options_are_clean_messages_and_make_nothing(env, tmp_path):
    options = study_options(str(tmp_path / "consent.txt"))
    for args, why in (
        (["nope", *options], "no competition named 'nope'"),
        (
            ["crowd", *options, "--completed-code", "has space"],
            "codes.completed: String should match pattern",
        ),
        (["crowd", *options, "--bonus-rate", "lots"], "--bonus-rate 'lots' is not a number"),
        (["crowd", *options, "--platform", "sona"], "a study on sona names its query parameters"),
        (["crowd", *options, "--max-images", "1"], "max_images (1) is below required_images (2)"),
    ):
        refused = invoke(env, "studies", "create", *args)
        assert refused.exit_code == 1 and why in " ".join(refused.output.split()), refused.output
        assert "Traceback" not in refused.output
    assert invoke(env, "studies", "list").exit_code == 1  # "no studies yet"
