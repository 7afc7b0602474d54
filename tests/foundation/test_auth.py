"""Authentication and access: tokens, session cookies with CSRF, and admin-only routes."""

import re

import pytest
from argon2 import PasswordHasher, extract_parameters, profiles
from sqlalchemy import select

from app import security
from app.users.auth import require_admin
from app.users.models import ApiToken, User
from tests.conftest import TEST_PASSWORD
from tests.support.routes import endpoints


def admin_routes(app) -> list[tuple[str, str]]:
    """(method, sample path) of every endpoint that depends on require_admin."""
    return [(e.method, e.sample_path) for e in endpoints(app) if require_admin in e.dependency_calls]


def test_there_are_admin_routes_to_check(app):
    assert ("POST", "/api/v1/competitions") in admin_routes(app)
    assert ("POST", "/api/v1/users") in admin_routes(app)


def test_every_admin_route_refuses_annotators_and_anonymous_callers(app, client, annotator_headers):
    for method, path in admin_routes(app):
        anonymous = client.request(method, path)
        assert anonymous.status_code == 401, (method, path, anonymous.text)
        assert anonymous.headers["www-authenticate"] == "Bearer"
        annotator = client.request(method, path, headers=annotator_headers)
        assert annotator.status_code == 403, (method, path, annotator.text)
        assert "admin" in annotator.json()["detail"]


def test_admin_token_works_and_a_bad_token_is_401(client, admin_headers):
    assert client.get("/api/v1/me", headers=admin_headers).json()["role"] == "admin"
    response = client.get("/api/v1/me", headers={"Authorization": "Bearer mad_not-a-real-token"})
    assert response.status_code == 401
    assert response.json()["code"] == "not_authenticated"


def test_secrets_are_stored_hashed(db_session, client, admin, admin_headers):
    token = admin_headers["Authorization"].removeprefix("Bearer ")
    stored = db_session.scalars(select(ApiToken.token_hash)).all()
    assert token not in stored and all(len(value) == 64 for value in stored)
    assert admin.password_hash.startswith("$argon2id$")
    assert TEST_PASSWORD not in admin.password_hash


def test_the_service_hashes_passwords_at_rfc_9106s_parameters():
    # The tests' own processes hash at argon2-cffi's cheapest parameters (tests/conftest.py); the service not.
    hashed = PasswordHasher.from_parameters(security.PASSWORD_PARAMETERS).hash(TEST_PASSWORD)
    assert hashed.startswith("$argon2id$v=19$m=65536,t=3,p=4$")
    assert extract_parameters(hashed) == profiles.RFC_9106_LOW_MEMORY


def test_paused_account_loses_its_token(
    db_session, client, admin, admin_headers, annotator, annotator_headers
):
    response = client.patch(f"/api/v1/users/{annotator.id}", json={"is_active": False}, headers=admin_headers)
    assert response.status_code == 200 and response.json()["is_active"] is False
    assert client.get("/api/v1/me", headers=annotator_headers).status_code == 401


def _csrf_from(html: str) -> str:
    return re.search(r'name="csrf_token" value="([^"]+)"', html).group(1)


def _sign_in(client, username: str, password: str = TEST_PASSWORD):
    csrf = _csrf_from(client.get("/login").text)
    return client.post(
        "/login",
        data={"username": username, "password": password, "csrf_token": csrf, "next": "/"},
        follow_redirects=False,
    )


def test_login_needs_the_csrf_token_and_the_right_password(client, admin):
    client.get("/login")
    no_csrf = client.post("/login", data={"username": "admin", "password": TEST_PASSWORD})
    assert no_csrf.status_code == 403
    assert _sign_in(client, "admin", "wrong password").status_code == 401
    signed_in = _sign_in(client, "admin")
    assert signed_in.status_code == 303
    assert client.get("/api/v1/me").json()["username"] == "admin"


@pytest.mark.parametrize("send_csrf", [False, True])
def test_cookie_requests_that_change_state_need_the_csrf_header(client, admin, send_csrf, db_session):
    _sign_in(client, "admin")
    csrf = re.search(r'name="csrf-token" content="([^"]+)"', client.get("/").text).group(1)
    headers = {"X-CSRF-Token": csrf} if send_csrf else {}
    response = client.post(
        "/api/v1/users",
        json={"username": "bob", "role": "annotator", "password": "long enough"},
        headers=headers,
    )
    assert response.status_code == (201 if send_csrf else 403)
    assert (db_session.scalar(select(User).where(User.username == "bob")) is not None) == send_csrf


def test_logout_ends_the_session(client, admin):
    _sign_in(client, "admin")
    csrf = _csrf_from(client.get("/").text)
    client.post("/logout", data={"csrf_token": csrf})
    assert client.get("/api/v1/me").status_code == 401


def test_login_redirect_stays_on_this_site(client, admin):
    csrf = _csrf_from(client.get("/login").text)
    response = client.post(
        "/login",
        data={"username": "admin", "password": TEST_PASSWORD, "csrf_token": csrf, "next": "//evil.example/"},
        follow_redirects=False,
    )
    assert response.headers["location"] == "/admin"


def test_admins_land_on_the_admin_page_and_a_wrong_password_keeps_the_username(
    client, admin, annotator, db_session
):
    assert _sign_in(client, "admin").headers["location"] == "/admin"
    client.cookies.clear()
    assert _sign_in(client, "annotator").headers["location"] == "/"
    client.cookies.clear()
    csrf = _csrf_from(client.get("/login").text)
    asked = client.post(
        "/login",
        data={
            "username": "admin",
            "password": TEST_PASSWORD,
            "csrf_token": csrf,
            "next": "/competitions/1/label",
        },
        follow_redirects=False,
    )
    assert asked.headers["location"] == "/competitions/1/label"  # a page asked for comes first
    client.cookies.clear()
    wrong = _sign_in(client, "annotator", "wrong password")
    assert wrong.status_code == 401 and "Wrong username or password." in wrong.text
    assert re.search(r'<input id="username" name="username"[^>]* value="annotator"', wrong.text)
    assert re.search(r'<input id="password"[^>]* autofocus>', wrong.text)


def test_sign_in_is_rate_limited_per_address_and_username(client, admin, settings):
    for _ in range(settings.login_max_failures):
        assert _sign_in(client, "admin", "wrong password").status_code == 401
    blocked = _sign_in(client, "admin", "wrong password")
    assert blocked.status_code == 429
    assert int(blocked.headers["retry-after"]) > 0
    assert _sign_in(client, "admin").status_code == 429  # even the right password waits
    assert _sign_in(client, "someone-else", "wrong password").status_code == 401
