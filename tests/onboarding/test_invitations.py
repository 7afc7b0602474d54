"""Invitations: an admin makes a one-time, expiring link (API or CLI); the person sets their own username and
password on its page and is signed in; the link then works no more. Only a hash of the token is stored."""

import re
from datetime import timedelta

import pytest
from sqlalchemy import select, update
from typer.testing import CliRunner

from app.cli.main import app as cli
from app.db.base import utcnow
from app.db.engine import create_db_engine, create_sessionmaker
from app.errors import NotFound
from app.security import hash_api_token
from app.users import invitations
from app.users.models import Invitation, Role, User

NEW_PASSWORD = "a long new passphrase"


def invite(client, headers, **body) -> dict:
    """A new invitation through the API; its body."""
    response = client.post("/api/v1/invitations", json=body, headers=headers)
    assert response.status_code == 201, response.text
    return response.json()


def form_token(page: str) -> str:
    """The CSRF token of a page's form."""
    return re.search(r'name="csrf_token" value="([^"]+)"', page).group(1)


def accept(client, path: str, username: str, password: str = NEW_PASSWORD, again: str | None = None):
    """Open the invitation page and send its form."""
    page = client.get(path)
    assert page.status_code == 200, page.text
    data = {"username": username, "password": password, "password_again": again or password}
    return client.post(path, data={**data, "csrf_token": form_token(page.text)}, follow_redirects=False)


def test_an_invitation_makes_one_account_with_the_persons_own_password(client, db_session, admin_headers):
    created = invite(client, admin_headers, note="alice at the lab")
    assert created["status"] == "open" and created["role"] == "annotator" and created["username"] is None
    path = re.fullmatch(r"http://testserver(/invitations/[\w-]+)", created["url"]).group(1)
    token = path.rsplit("/", 1)[1]
    stored = db_session.scalar(select(Invitation).where(Invitation.id == created["id"]))
    assert stored.token_hash == hash_api_token(token) != token
    assert timedelta(hours=71) < stored.expires_at - stored.created_at <= timedelta(hours=72)

    mistakes = [
        ("alice", NEW_PASSWORD, "another passphrase", 422, "differ"),
        ("alice", "short", "short", 422, "at least 8"),
        ("admin", NEW_PASSWORD, NEW_PASSWORD, 409, "taken"),
        ("al ice", NEW_PASSWORD, NEW_PASSWORD, 422, "username"),
    ]
    for username, password, again, status, says in mistakes:
        response = accept(client, path, username, password, again)
        assert response.status_code == status and says in response.text, (username, response.text[-500:])
        assert f'value="{username}"' in response.text  # the username is kept to fix
    assert db_session.scalar(select(Invitation.used_at).where(Invitation.id == created["id"])) is None

    done = accept(client, path, "alice")
    assert done.status_code == 303 and done.headers["location"] == "/"
    me = client.get("/api/v1/me").json()  # signed in by the page's session cookie
    assert (me["username"], me["role"]) == ("alice", "annotator")
    alice = db_session.scalar(select(User).where(User.username == "alice"))
    assert alice.password_hash != NEW_PASSWORD

    assert client.get(path).status_code == 404
    csrf = re.search(r'name="csrf-token" content="([^"]+)"', client.get("/").text).group(1)
    again = {
        "username": "mallory",
        "password": NEW_PASSWORD,
        "password_again": NEW_PASSWORD,
        "csrf_token": csrf,
    }
    assert client.post(path, data=again).status_code == 404
    assert db_session.scalar(select(User).where(User.username == "mallory")) is None

    (listed,) = client.get("/api/v1/invitations", headers=admin_headers).json()
    assert (listed["status"], listed["username"], listed["note"]) == ("used", "alice", "alice at the lab")
    assert "url" not in listed and token not in str(listed)


def test_the_signed_in_person_can_then_sign_in_with_their_password(client, admin_headers):
    path = "/invitations/" + invite(client, admin_headers, role="admin")["url"].rsplit("/", 1)[1]
    assert accept(client, path, "carol").headers["location"] == "/admin"
    client.cookies.clear()
    login = client.get("/login").text
    signed_in = client.post(
        "/login",
        data={"username": "carol", "password": NEW_PASSWORD, "csrf_token": form_token(login)},
        follow_redirects=False,
    )
    assert signed_in.status_code == 303 and client.get("/api/v1/me").json()["role"] == "admin"


def test_an_expired_invitation_is_refused(client, db_session, admin_headers):
    created = invite(client, admin_headers, valid_hours=1)
    path = "/invitations/" + created["url"].rsplit("/", 1)[1]
    db_session.execute(
        update(Invitation)
        .where(Invitation.id == created["id"])
        .values(expires_at=utcnow() - timedelta(seconds=1))
    )
    db_session.commit()
    page = client.get(path)
    assert page.status_code == 404 and "expired or was already used" in page.text
    assert client.get("/invitations/not-a-token").status_code == 404
    (listed,) = client.get("/api/v1/invitations", headers=admin_headers).json()
    assert listed["status"] == "expired"


def test_bad_invitations_are_refused(client, admin_headers, annotator_headers):
    for body in ({"role": "worker"}, {"valid_hours": 0}, {"valid_hours": 24 * 31}, {"note": "x" * 201}):
        response = client.post("/api/v1/invitations", json=body, headers=admin_headers)
        assert response.status_code == 422, (body, response.text)
    assert (
        "workers use API tokens"
        in client.post("/api/v1/invitations", json={"role": "worker"}, headers=admin_headers).json()["detail"]
    )
    assert client.post("/api/v1/invitations", json={}, headers=annotator_headers).status_code == 403
    assert client.post("/api/v1/invitations", json={}).status_code == 401


def test_an_invitation_is_used_once_even_when_sent_twice(db_session):
    invitation, token = invitations.create_invitation(
        db_session=db_session, role=Role.annotator, note="", valid_hours=1, created_by=None
    )
    user = invitations.accept_invitation(
        db_session=db_session, token=token, username="dave", password=NEW_PASSWORD
    )
    assert (invitation.used_at is not None, invitation.user_id) == (True, user.id)
    with pytest.raises(NotFound):
        invitations.accept_invitation(
            db_session=db_session, token=token, username="eve", password=NEW_PASSWORD
        )


def test_mad_users_invite_prints_a_link_once(tmp_path, fresh_database_url):
    env = {
        "MAD_DATABASE_URL": fresh_database_url,
        "MAD_DATA_DIR": str(tmp_path / "data"),
        "MAD_ENV": "development",
    }
    runner = CliRunner()
    result = runner.invoke(
        cli,
        ["users", "invite", "--note", "bob", "--hours", "2", "--base-url", "https://mad.example.org/"],
        env=env,
    )
    assert result.exit_code == 0, result.output
    token = re.search(r"https://mad\.example\.org/invitations/([\w-]+)", result.output).group(1)
    engine = create_db_engine(fresh_database_url)
    try:
        with create_sessionmaker(engine)() as session:
            stored = session.scalar(select(Invitation))
            assert (stored.token_hash, stored.note, stored.role) == (
                hash_api_token(token),
                "bob",
                Role.annotator,
            )
    finally:
        engine.dispose()
    for args, says in (
        (["--role", "worker"], "workers use API tokens"),
        (["--hours", "0"], "1 to 720 hours"),
    ):
        refused = runner.invoke(cli, ["users", "invite", *args], env=env)
        assert refused.exit_code != 0 and says in refused.output, refused.output
