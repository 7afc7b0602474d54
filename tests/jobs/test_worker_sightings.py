"""Whether a worker is about: its claims and heartbeats are its sightings; the progress API, the admin
pages and `mad jobs` say when none has been seen for a job lease, and what waits for one."""

from datetime import timedelta

from sqlalchemy import update
from typer.testing import CliRunner

from app.cli.main import app as cli
from app.competitions.schemas import CompetitionCreate
from app.competitions.service import create_competition
from app.db.base import utcnow
from app.db.engine import create_db_engine, create_sessionmaker
from app.jobs.enums import JobKind
from app.jobs.models import Job, WorkerSighting
from app.users.models import Role
from tests.conftest import bearer, make_user
from tests.foundation.test_auth import _sign_in
from tests.labelling.factories import add_classifiers

WAITING = "1 job waits: start one with `mad worker`."


def queue_a_job(db_session, competition) -> None:
    """A queued predict job of a new classifier (an empty shard)."""
    (classifier_id,) = add_classifiers(db_session, competition, 1)
    db_session.add(
        Job(
            competition_id=competition.id,
            kind=JobKind.predict,
            key=f"predict:{classifier_id}:0-0",
            classifier_id=classifier_id,
            shard_start=0,
            shard_end=0,
        )
    )
    db_session.commit()


def backdate_sightings(db_session, minutes: int) -> None:
    db_session.execute(update(WorkerSighting).values(last_seen_at=utcnow() - timedelta(minutes=minutes)))
    db_session.commit()


def test_claims_and_heartbeats_are_sightings_and_a_long_silence_is_told(
    client, db_session, competition, admin, admin_headers
):
    queue_a_job(db_session, competition)
    worker_headers = bearer(db_session, make_user(db_session, "gpu-box", Role.worker))
    progress_url = f"/api/v1/competitions/{competition.id}/progress"

    def progress() -> dict:
        response = client.get(progress_url, headers=admin_headers)
        assert response.status_code == 200, response.text
        return response.json()

    before = progress()
    assert before["workers"] == []
    assert before["worker_warning"] == f"No worker has asked for work yet; {WAITING}"

    claimed = client.post("/api/v1/jobs/claim", json={"worker": "gpu-box:1"}, headers=worker_headers).json()
    (job,) = claimed["jobs"]
    after_claim = progress()
    assert [(w["worker"], w["seen_ago"]) for w in after_claim["workers"]] == [("gpu-box:1", "0 s")]
    assert after_claim["worker_warning"] is None

    backdate_sightings(db_session, minutes=10)
    silent = progress()
    assert silent["workers"][0]["seen_ago"] == "10 min"
    assert silent["worker_warning"] == "No worker seen for 10 min; no job waits: start one with `mad worker`."
    _sign_in(client, "admin")
    for page in ("/admin", f"/admin/competitions/{competition.id}"):
        assert "No worker seen for 10 min" in client.get(page).text, page
    assert "gpu-box:1 seen 10 min ago" in client.get(f"/admin/competitions/{competition.id}").text

    lease = {"job_id": job["id"], "lease_token": job["lease_token"]}
    held = client.post("/api/v1/jobs/heartbeat", json={"leases": [lease]}, headers=worker_headers)
    assert held.json() == [{"job_id": job["id"], "held": True}]
    assert progress()["worker_warning"] is None, "a heartbeat is a sighting too"


def test_mad_jobs_says_no_worker_was_seen(tmp_path, fresh_database_url):
    engine = create_db_engine(fresh_database_url)
    sessions = create_sessionmaker(engine)
    with sessions() as db_session:
        competition = create_competition(db_session=db_session, spec=CompetitionCreate(name="quiet"))
        queue_a_job(db_session, competition)
    env = {"MAD_DATABASE_URL": fresh_database_url, "MAD_DATA_DIR": str(tmp_path), "MAD_ENV": "development"}
    arguments = ["jobs", "--competition", "quiet"]

    never = CliRunner().invoke(cli, arguments, env={**env, "COLUMNS": "200"}, catch_exceptions=False)
    assert never.exit_code == 0, never.output
    assert "Workers last seen: none yet" in never.output
    assert f"No worker has asked for work yet; {WAITING}" in never.output

    with sessions() as db_session:
        db_session.add(WorkerSighting(worker="old-box:7", last_seen_at=utcnow() - timedelta(hours=3)))
        db_session.commit()
    engine.dispose()
    lost = CliRunner().invoke(cli, arguments, env={**env, "COLUMNS": "200"}, catch_exceptions=False)
    assert "Workers last seen: old-box:7 3 h ago" in lost.output
    assert f"No worker seen for 3 h; {WAITING}" in lost.output
