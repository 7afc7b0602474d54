"""Usernames are one without regard to case and Unicode form, in the database itself (two accounts made at the
same moment cannot beat it), and the service's own names cannot be taken; the loser of two invitations
accepted at once with one username gets the form back with a message, its link still unused."""

import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select, text
from sqlalchemy.orm import Session, sessionmaker
from typer.testing import CliRunner

from app.cli.main import app as cli
from app.db.engine import create_db_engine, create_sessionmaker
from app.main import create_app
from app.users import invitations
from app.users import service as users_service
from app.users.models import Invitation, Role, User
from tests.conftest import TEST_PASSWORD, settings_for
from tests.onboarding.test_api_tokens import sign_in
from tests.onboarding.test_invitations import NEW_PASSWORD, accept, form_token, invite

RAW_CONSTRAINT_TEXT = ("duplicate key", "UNIQUE constraint", "IntegrityError", "username_key", "uq_users")


def test_a_username_in_another_case_is_taken(client, admin, admin_headers):
    for username in ("Admin", "ADMIN", "aDmIn"):
        response = client.post(
            "/api/v1/users",
            json={"username": username, "role": "annotator", "password": TEST_PASSWORD},
            headers=admin_headers,
        )
        assert response.status_code == 409, response.text
        assert response.json()["code"] == "conflict" and "'admin' has it" in response.json()["detail"]
    path = "/invitations/" + invite(client, admin_headers)["url"].rsplit("/", 1)[1]
    refused = accept(client, path, "ADMIN")
    assert refused.status_code == 409 and "is taken" in refused.text and 'value="ADMIN"' in refused.text


def test_sign_in_takes_the_name_in_any_case(client, admin):
    sign_in(client, "ADMIN")
    assert client.get("/api/v1/me").json()["username"] == "admin"


def test_the_service_s_own_worker_name_cannot_be_taken(client, admin_headers):
    for username in ("local-worker", "Local-Worker"):
        for role in ("annotator", "worker"):
            response = client.post(
                "/api/v1/users",
                json={"username": username, "role": role, "password": TEST_PASSWORD},
                headers=admin_headers,
            )
            assert response.status_code == 422 and "reserved" in response.json()["detail"], response.text
    path = "/invitations/" + invite(client, admin_headers)["url"].rsplit("/", 1)[1]
    refused = accept(client, path, "LOCAL-WORKER")
    assert refused.status_code == 422 and "reserved for the service" in refused.text


def test_the_command_line_refuses_taken_other_forms_and_reserved_names(tmp_path, fresh_database_url):
    env = {
        "MAD_DATABASE_URL": fresh_database_url,
        "MAD_DATA_DIR": str(tmp_path / "data"),
        "MAD_ENV": "development",
    }
    runner = CliRunner()
    assert runner.invoke(cli, ["users", "add", "alice", "--password", TEST_PASSWORD], env=env).exit_code == 0
    refusals = [
        (["users", "add", "ALICE", "--password", TEST_PASSWORD], "is taken"),
        (["users", "add", "ａｌｉｃｅ", "--password", TEST_PASSWORD], "letters, digits"),  # fullwidth
        (["users", "add", "local-worker", "--role", "worker"], "reserved"),
    ]
    for args, says in refusals:
        result = runner.invoke(cli, args, env=env)
        assert result.exit_code == 1 and says in result.output, (args, result.output)
    engine = create_db_engine(fresh_database_url)
    try:
        with create_sessionmaker(engine)() as session:
            assert session.scalars(select(User.username)).all() == ["alice"]
    finally:
        engine.dispose()
    found = runner.invoke(cli, ["users", "password", "Alice", "--password", "another password"], env=env)
    assert found.exit_code == 0 and "New password set for Alice" in found.output


@dataclass
class LiveService:
    """The app on a committed database of its own, a client, and sessions on that database."""

    client: TestClient
    sessions: sessionmaker[Session]
    backend: str
    admin_headers: dict[str, str]


@pytest.fixture
def live(tmp_path, fresh_database_url, backend) -> Iterator[LiveService]:
    engine = create_db_engine(fresh_database_url)
    sessions = create_sessionmaker(engine)
    with sessions() as session:
        admin = users_service.create_user(
            db_session=session, username="root", role=Role.admin, password=TEST_PASSWORD
        )
        token = users_service.create_api_token(db_session=session, user=admin, name="test")
        session.commit()
    try:
        with TestClient(create_app(settings_for(tmp_path, fresh_database_url))) as client:
            yield LiveService(client, sessions, backend, {"Authorization": f"Bearer {token}"})
    finally:
        engine.dispose()


def while_another_account_is_made(live: LiveService, make, request):
    """Send `request` (a callable returning a response) while `make(session)` has made an account in a
    transaction not yet committed, which commits once the request waits for it; the response.

    On Postgres the request has passed every check of its own and waits on the unique index (seen in
    pg_stat_activity) before the other commits: the race the index alone decides. SQLite lets one writer in
    at a time, so there the request waits at BEGIN until the other has committed.
    """
    answered: list = []
    with live.sessions() as other:
        make(other)
        other.flush()
        sender = threading.Thread(target=lambda: answered.append(request()))
        sender.start()
        wait_for_a_lock_wait(live)
        other.commit()
    sender.join(timeout=60)
    assert answered, "the request did not finish"
    return answered[0]


def wait_for_a_lock_wait(live: LiveService) -> None:
    """Return once a connection to this database waits for a lock (Postgres); on SQLite, after a moment."""
    if live.backend == "sqlite":
        time.sleep(0.5)
        return
    deadline = time.monotonic() + 30
    with live.sessions() as watcher:
        while time.monotonic() < deadline:
            waiting = watcher.scalar(
                text(
                    "SELECT count(*) FROM pg_stat_activity "
                    "WHERE datname = current_database() AND wait_event_type = 'Lock'"
                )
            )
            watcher.rollback()
            if waiting:
                return
            time.sleep(0.02)
    raise AssertionError("the request never waited for the other transaction")


def test_two_accounts_made_at_once_in_two_cases_are_one_name(live):
    def make(session):
        users_service.create_user(
            db_session=session, username="carol", role=Role.annotator, password=TEST_PASSWORD
        )

    body = {"username": "Carol", "role": "annotator", "password": TEST_PASSWORD}
    response = while_another_account_is_made(
        live, make, lambda: live.client.post("/api/v1/users", json=body, headers=live.admin_headers)
    )
    assert response.status_code == 409 and response.json()["code"] == "conflict", response.text
    assert "is taken" in response.json()["detail"]
    assert not any(raw in response.text for raw in RAW_CONSTRAINT_TEXT), response.text
    with live.sessions() as session:
        assert session.scalars(select(User.username).where(User.username != "root")).all() == ["carol"]


def test_the_loser_of_two_invitations_accepted_at_once_with_one_name_gets_the_form(live):
    first = invite(live.client, live.admin_headers)
    second = invite(live.client, live.admin_headers)
    path = "/invitations/" + second["url"].rsplit("/", 1)[1]
    page = live.client.get(path)
    form = {"username": "zed", "password": NEW_PASSWORD, "password_again": NEW_PASSWORD}
    form["csrf_token"] = form_token(page.text)
    token = first["url"].rsplit("/", 1)[1]

    def accept_the_first_link(session):
        invitations.accept_invitation(db_session=session, token=token, username="zed", password=NEW_PASSWORD)

    response = while_another_account_is_made(
        live,
        accept_the_first_link,
        lambda: live.client.post(path, data=form, headers={"Accept": "text/html"}, follow_redirects=False),
    )
    assert response.status_code == 409 and "text/html" in response.headers["content-type"], response.text
    assert "is taken" in response.text and "choose another" in response.text
    assert 'name="password_again"' in response.text and 'value="zed"' in response.text  # the form again
    assert not any(raw in response.text for raw in RAW_CONSTRAINT_TEXT)
    with live.sessions() as session:
        used = dict(session.execute(select(Invitation.id, Invitation.used_at)).all())
    assert used[first["id"]] is not None and used[second["id"]] is None  # the second link is not used up
    retried = live.client.post(path, data={**form, "username": "zoe"}, follow_redirects=False)
    assert retried.status_code == 303
