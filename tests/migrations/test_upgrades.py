"""Upgrades keep people's data (issue 27, item 4): `mad db upgrade` runs on databases people keep (their
demo-data, real deployments), so every revision after the first is tested on a database of the revision
before it, filled with a seed that schema wrote (tests/support/seeds.py). After the upgrade to the revision
and to head, every seeded row is still there with the values of every column both schemas have, and the
service reads them: the leaderboard computes, frozen boards are served, people sign in with their
passwords or their OpenID identities and an annotator's progress counts their answers. How to add a
revision: CONTRIBUTING.md.
"""

import hashlib
import json
from pathlib import Path

import pytest
from alembic.script import ScriptDirectory
from fastapi.testclient import TestClient

from app.db.base import utcnow
from app.db.engine import create_db_engine
from app.main import create_app
from app.migrate import alembic_config, upgrade
from app.settings import OpenIDProvider
from app.studies.payments import participant_rows
from app.studies.service import get_study
from app.users.openid import ProviderIdentity, sign_in_identity
from tests.conftest import settings_for
from tests.labelling.factories import sign_in
from tests.support.seeds import Rows, load, rows

SEEDS = Path(__file__).parent / "seeds"
FIRST_REVISION = Path(__file__).parents[2] / "migrations" / "versions" / "0001_initial_schema.py"
FIRST_REVISION_SHA256 = "e1746678eb296cf63849c2c141248358f9ba563d004d2e8af4779e4f7696bf7f"
"""Revision 0001 is frozen: people's databases were made by it, so a change to it is a new revision."""
DROPPED: dict[str, set[str]] = {
    "0008": {"competitions.annotator_reliability"},
    "0012": {"active_policies.votes_used"},
    "0014": {"active_policies.tallied_through"},
}
"""Tables or columns ("table.column") a revision drops on purpose, by revision id: not compared after it.
0008: the one reliability shared by every annotator gives way to each annotator's (annotator_reliabilities,
filled at the active policy's next refresh from the votes, which stay). 0012: the votes used that every
rerun counted and stored and nothing read (the leaderboard counts them from the votes, which stay). 0014: the
active policy's tally mark, whose untallied decisions become untallied_decisions rows."""


def revision_chain() -> list[tuple[str | None, str]]:
    """(down-revision, revision) of every revision, oldest first (the first's down-revision is None)."""
    scripts = ScriptDirectory.from_config(alembic_config())
    return [(script.down_revision, script.revision) for script in reversed(list(scripts.walk_revisions()))]


def seed_before(revision: str) -> tuple[str, Rows]:
    """The newest seed at or before `revision` (going down the chain), and its revision."""
    down = dict((revision, down) for down, revision in revision_chain())
    at: str | None = revision
    while at is not None:
        if (SEEDS / f"{at}.json").exists():
            return at, json.loads((SEEDS / f"{at}.json").read_text())["tables"]
        at = down[at]
    raise AssertionError(f"no seed in {SEEDS} for {revision} or a revision before it")


def content(url: str) -> Rows:
    """Every row of the database at url."""
    engine = create_db_engine(url)
    try:
        with engine.connect() as connection:
            return rows(connection)
    finally:
        engine.dispose()


def seeded_database(url: str, revision: str) -> Rows:
    """Make the database at url at `revision` with the newest seed before it in it; its rows."""
    seed_revision, seed = seed_before(revision)
    upgrade(url, seed_revision)
    engine = create_db_engine(url)
    try:
        with engine.begin() as connection:
            load(connection, seed)
    finally:
        engine.dispose()
    upgrade(url, revision)
    return content(url)


def assert_kept(before: Rows, after: Rows, dropped: set[str]) -> None:
    """Every row of `before` is in `after`, with the same value in every column both have."""
    for table, old_rows in before.items():
        if table in dropped:
            continue
        assert table in after, f"table {table} is gone: list it in DROPPED if that is the intent"
        columns = {name for name in old_rows[0] if f"{table}.{name}" not in dropped} if old_rows else set()
        new_rows = after[table]
        gone = columns - set(new_rows[0] if new_rows else columns)
        assert not gone, f"{table} lost columns {sorted(gone)}: list them in DROPPED if that is the intent"
        kept = [{name: row[name] for name in columns} for row in new_rows]
        lost = [row for row in old_rows if {name: row[name] for name in columns} not in kept]
        assert not lost, f"{table}: {len(lost)} of {len(old_rows)} rows lost or changed, first {lost[0]}"


def assert_the_service_reads(url: str, seeded: Rows, tmp_path: Path) -> None:
    """The leaderboard of every seeded competition names its classifiers (and counts labelled images when
    questions are decided), every frozen board is served, every person signs in with the test password and
    every OpenID identity to its account, an annotator's progress counts their votes, and every crowd study
    lists its participants with their platform ids and outcomes."""
    app = create_app(settings_for(tmp_path, url))
    active = {user["id"] for user in seeded.get("users", []) if user["is_active"]}
    for identity in seeded.get("openid_identities", []):
        if identity["user_id"] not in active:
            continue
        provider = OpenIDProvider(
            name="seeded",
            display_name="Seeded",
            issuer=identity["issuer"],
            client_id="mad",
            client_secret="-",
        )
        with app.state.sessionmaker() as db_session:
            signed_in = sign_in_identity(
                db_session=db_session,
                identity=ProviderIdentity(
                    identity["issuer"], identity["subject"], identity["email"], False, None
                ),
                provider=provider,
                invitation_token=None,
                signed_in=None,
            )
            assert signed_in.id == identity["user_id"]
    for study in seeded.get("studies", []):
        with app.state.sessionmaker() as db_session:
            listed = participant_rows(
                db_session=db_session,
                study=get_study(db_session=db_session, study_id=study["id"]),
                now=utcnow(),
            )
        identities = {row["user_id"]: row["participant_id"] for row in seeded["crowd_identities"]}
        assert sorted((row.participant_id, row.finished_at is not None) for row in listed) == sorted(
            (identities[row["user_id"]], row["finished_at"] is not None)
            for row in seeded["study_participants"]
            if row["study_id"] == study["id"]
        )
    with TestClient(app) as client:
        for competition in seeded.get("competitions", []):
            board = client.get(f"/api/v1/competitions/{competition['id']}/leaderboard")
            assert board.status_code == 200, board.text
            names = {entry["name"] for entry in board.json()["classifiers"] + board.json()["unranked"]}
            own = seeded["classifiers"] if "classifiers" in seeded else []
            assert names == {row["name"] for row in own if row["competition_id"] == competition["id"]}
            decided = [
                row for row in seeded.get("questions", []) if row["competition_id"] == competition["id"]
            ]
            if any(row["outcome"] is not None for row in decided):
                assert board.json()["case_shares"]["images"] > 0
        for snapshot in seeded.get("leaderboard_snapshots", []):
            assert client.get(f"/api/v1/leaderboards/{snapshot['slug']}").status_code == 200
    for user in seeded.get("users", []):
        if user["password_hash"] is None or not user["is_active"]:
            continue
        with TestClient(app) as client:
            sign_in(client, user["username"])
            assert client.get("/api/v1/me").json()["username"] == user["username"]
            for competition in seeded.get("competitions", []) if user["role"] == "annotator" else []:
                votes = [
                    vote
                    for vote in seeded.get("votes", [])
                    if vote["user_id"] == user["id"] and vote["competition_id"] == competition["id"]
                ]
                progress = client.get(f"/api/v1/competitions/{competition['id']}/labelling/me")
                if progress.status_code == 200:
                    assert progress.json()["answered_total"] == len(votes)
                else:  # not a member of a members-only competition
                    assert progress.status_code == 403 and competition["members_only"] and not votes


def test_the_first_revision_is_frozen():
    assert hashlib.sha256(FIRST_REVISION.read_bytes()).hexdigest() == FIRST_REVISION_SHA256


@pytest.mark.parametrize("seed", sorted(path.stem for path in SEEDS.glob("*.json")))
def test_each_seed_loads_at_its_revision_and_the_service_reads_it_at_head(database_factory, tmp_path, seed):
    url = database_factory.empty_url()
    seeded = seeded_database(url, seed)
    upgrade(url, "head")
    assert_kept(seeded, content(url), set().union(*DROPPED.values()))
    assert_the_service_reads(url, seeded, tmp_path)


@pytest.mark.parametrize(
    ("down_revision", "revision"), [step for step in revision_chain() if step[0] is not None], ids=str
)
def test_an_upgrade_keeps_the_data_of_the_revision_before(
    database_factory, tmp_path, down_revision, revision
):
    url = database_factory.empty_url()
    seeded = seeded_database(url, down_revision)
    upgrade(url, revision)
    assert_kept(seeded, content(url), DROPPED.get(revision, set()))
    upgrade(url, "head")
    assert_kept(seeded, content(url), set().union(*DROPPED.values()))
    assert_the_service_reads(url, seeded, tmp_path)
