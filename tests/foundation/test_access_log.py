"""`mad serve`'s access log never shows the secrets a URL can carry: an invitation link's token, a lease
token that an older worker sends in a query (ours send the X-Lease-Token header), and a crowd study's link
with the participant's platform ids in its query (personal data)."""

import os
import subprocess
import sys

import httpx

from app.db.engine import create_db_engine, create_sessionmaker
from app.users import invitations
from app.users import service as users_service
from app.users.models import Role
from tests.conftest import TEST_SECRET_KEY
from tests.reliability.test_faults import REPOSITORY, free_port, wait_for

LEASE_SECRET = "0123456789abcdef0123456789abcdef"
STUDY_SECRET = "a-study-link-secret"
PARTICIPANT_ID = "5f0123456789abcdef012345"


def test_mad_serve_logs_requests_without_invitation_lease_or_study_secrets(tmp_path, fresh_database_url):
    engine = create_db_engine(fresh_database_url)
    try:
        with create_sessionmaker(engine)() as session:
            _, invitation = invitations.create_invitation(
                db_session=session, role=Role.annotator, note="", valid_hours=1, created_by=None
            )
            worker = users_service.create_user(
                db_session=session, username="gpu-1", role=Role.worker, password=None
            )
            worker_token = users_service.create_api_token(db_session=session, user=worker, name="test")
            session.commit()
    finally:
        engine.dispose()
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    environment = {
        **os.environ,
        "MAD_DATABASE_URL": fresh_database_url,
        "MAD_DATA_DIR": str(tmp_path / "data"),
        "MAD_ENV": "test",
        "MAD_SECRET_KEY": TEST_SECRET_KEY,
    }
    log = tmp_path / "serve.log"
    with log.open("wb") as output:
        server = subprocess.Popen(
            [sys.executable, "-c", "from app.cli.main import app; app()", "serve", "--port", str(port)],
            cwd=REPOSITORY,
            env=environment,
            stdout=output,
            stderr=subprocess.STDOUT,
        )
        try:
            wait_for(lambda: _healthy(url, server), "mad serve to start")
            page = httpx.get(f"{url}/invitations/{invitation}")
            assert page.status_code == 200 and page.headers["referrer-policy"] == "no-referrer"
            joining = httpx.get(f"{url}/join/{STUDY_SECRET}", params={"PROLIFIC_PID": PARTICIPANT_ID})
            assert joining.status_code == 404  # no such study: what matters is what the log keeps
            older_worker = httpx.get(
                f"{url}/api/v1/jobs/999/images.tar",
                params={"lease_token": LEASE_SECRET, "start": 0},
                headers={"Authorization": f"Bearer {worker_token}"},
            )
            assert older_worker.status_code == 404  # no such job: the request is what matters here
        finally:
            server.terminate()
            server.wait(timeout=30)
    logged = log.read_text()
    assert invitation not in logged and LEASE_SECRET not in logged and worker_token not in logged
    assert STUDY_SECRET not in logged and PARTICIPANT_ID not in logged
    assert '"GET /join/[redacted] HTTP/1.1" 404' in logged
    assert '"GET /invitations/[redacted] HTTP/1.1" 200' in logged
    assert '"GET /api/v1/jobs/999/images.tar?lease_token=[redacted]&start=0 HTTP/1.1" 404' in logged


def _healthy(url: str, server: subprocess.Popen) -> bool:
    """Whether the server answers /healthz (failing at once if it has exited)."""
    assert server.poll() is None, "mad serve exited"
    try:
        return httpx.get(f"{url}/healthz", timeout=5).status_code == 200
    except httpx.TransportError:
        return False
