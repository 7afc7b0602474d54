"""Access: every route is classified by who may call it, and each refuses everybody else.

A new route fails test_every_route_is_classified until it is added to ROUTES, so no endpoint can slip
through unreviewed. Also: secrets are stored hashed (the whole database is searched for them), every
state-changing route refuses a cookie request without the CSRF token and stores nothing, session cookies
are HttpOnly/SameSite (and Secure in production), sign-in is rate-limited per address and username
(the limit itself: tests/foundation/test_auth.py::test_sign_in_is_rate_limited_per_address_and_username),
and the sign-in redirect never leaves the site. Which model predicted which label: test_leaks.py.
"""

import re

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select
from typer.testing import CliRunner

from app.cli.main import app as cli
from app.db.base import Base
from app.db.engine import create_db_engine
from app.labelling.annotating.router import labelling_request
from app.main import create_app
from app.settings import Settings
from app.users.auth import current_user, require_admin, require_worker
from tests.conftest import TEST_PASSWORD, TEST_SECRET_KEY
from tests.reliability.world import World
from tests.support.routes import endpoints

PUBLIC, ACCOUNT, ANNOTATOR, WORKER, ADMIN, FORM = "public", "account", "annotator", "worker", "admin", "form"
METRICS = "metrics"
"""public: anyone; account: any signed-in user; annotator / worker: that role or an admin; admin: admins
only; form: a sign-in form post, open to anyone holding the page's CSRF token; metrics: the bearer of
MAD_METRICS_TOKEN only, no account (off, 404, without one)."""

ROUTES = {
    ("GET", "/"): PUBLIC,
    ("GET", "/healthz"): PUBLIC,
    ("GET", "/metrics"): METRICS,
    ("GET", "/docs"): PUBLIC,
    ("GET", "/redoc"): PUBLIC,
    ("GET", "/favicon.ico"): PUBLIC,
    ("GET", "/login"): PUBLIC,
    ("POST", "/login"): FORM,
    ("POST", "/login/sso/{name}"): FORM,
    ("GET", "/login/sso/{name}/callback"): PUBLIC,
    ("POST", "/logout"): FORM,
    ("POST", "/language"): FORM,
    ("GET", "/account"): ANNOTATOR,
    ("GET", "/api/v1/me"): ACCOUNT,
    ("PUT", "/api/v1/me/password"): ACCOUNT,
    ("PUT", "/api/v1/users/{user_id}/password"): ADMIN,
    ("GET", "/api/v1/users"): ADMIN,
    ("POST", "/api/v1/users"): ADMIN,
    ("PATCH", "/api/v1/users/{user_id}"): ADMIN,
    ("POST", "/api/v1/users/{user_id}/tokens"): ADMIN,
    ("GET", "/api/v1/users/{user_id}/tokens"): ADMIN,
    ("DELETE", "/api/v1/users/{user_id}/tokens/{token_id}"): ADMIN,
    ("POST", "/api/v1/invitations"): ADMIN,
    ("GET", "/api/v1/invitations"): ADMIN,
    ("GET", "/api/v1/work-records"): ADMIN,
    ("GET", "/invitations/{token}"): PUBLIC,
    ("POST", "/invitations/{token}"): FORM,
    ("GET", "/api/v1/competitions"): PUBLIC,
    ("POST", "/api/v1/competitions"): ADMIN,
    ("GET", "/api/v1/competitions/{competition_id}"): PUBLIC,
    ("PATCH", "/api/v1/competitions/{competition_id}"): ADMIN,
    ("GET", "/api/v1/competitions/{competition_id}/members"): ADMIN,
    ("PUT", "/api/v1/competitions/{competition_id}/members/{user_id}"): ADMIN,
    ("DELETE", "/api/v1/competitions/{competition_id}/members/{user_id}"): ADMIN,
    ("GET", "/api/v1/competitions/{competition_id}/translations"): ADMIN,
    ("PUT", "/api/v1/competitions/{competition_id}/translations"): ADMIN,
    ("GET", "/api/v1/competitions/{competition_id}/classes"): PUBLIC,
    ("GET", "/api/v1/competitions/{competition_id}/images"): PUBLIC,
    ("POST", "/api/v1/competitions/{competition_id}/images"): ADMIN,
    ("POST", "/api/v1/competitions/{competition_id}/images/{sha256}/exclude"): ADMIN,
    ("GET", "/images/{sha256}"): PUBLIC,
    ("GET", "/thumbnails/{sha256}"): PUBLIC,
    ("POST", "/api/v1/competitions/{competition_id}/labelling/next"): ANNOTATOR,
    ("POST", "/api/v1/competitions/{competition_id}/labelling/answers"): ANNOTATOR,
    ("POST", "/api/v1/competitions/{competition_id}/labelling/flags"): ANNOTATOR,
    ("POST", "/api/v1/competitions/{competition_id}/labelling/undo"): ANNOTATOR,
    ("POST", "/api/v1/competitions/{competition_id}/labelling/skip"): ANNOTATOR,
    ("GET", "/api/v1/competitions/{competition_id}/labelling/me"): ANNOTATOR,
    ("GET", "/api/v1/competitions/{competition_id}/labelling/annotators"): ADMIN,
    ("GET", "/api/v1/competitions/{competition_id}/labelling/gold"): ADMIN,
    ("POST", "/api/v1/competitions/{competition_id}/labelling/gold"): ADMIN,
    ("PUT", "/api/v1/competitions/{competition_id}/labelling/sampling"): ADMIN,
    ("GET", "/api/v1/competitions/{competition_id}/labelling/quality-flags"): ADMIN,
    ("POST", "/api/v1/competitions/{competition_id}/labelling/quality-flags/{flag_id}/decision"): ADMIN,
    ("GET", "/api/v1/competitions/{competition_id}/labelling/review"): ADMIN,
    ("GET", "/api/v1/competitions/{competition_id}/labelling/adjudications"): ADMIN,
    ("POST", "/api/v1/competitions/{competition_id}/labelling/adjudications"): ADMIN,
    ("GET", "/competitions/{competition_id}/label"): ANNOTATOR,
    ("GET", "/competitions/{competition_id}/guidelines"): PUBLIC,
    ("GET", "/api/v1/competitions/{competition_id}/classifiers"): PUBLIC,
    ("POST", "/api/v1/competitions/{competition_id}/classifiers"): ADMIN,
    ("GET", "/api/v1/classifiers/{classifier_id}"): PUBLIC,
    ("POST", "/api/v1/classifiers/{classifier_id}/retire"): ADMIN,
    ("GET", "/api/v1/classifiers/{classifier_id}/weights"): WORKER,
    ("GET", "/api/v1/classifiers/{classifier_id}/predictions"): WORKER,
    ("POST", "/api/v1/jobs/claim"): WORKER,
    ("POST", "/api/v1/jobs/heartbeat"): WORKER,
    ("POST", "/api/v1/jobs/{job_id}/predictions"): WORKER,
    ("POST", "/api/v1/jobs/{job_id}/selection"): WORKER,
    ("POST", "/api/v1/jobs/{job_id}/fail"): WORKER,
    ("GET", "/api/v1/jobs/{job_id}/images.tar"): WORKER,
    ("GET", "/api/v1/jobs"): ADMIN,
    ("GET", "/api/v1/competitions/{competition_id}/progress"): ADMIN,
    ("GET", "/api/v1/competitions/{competition_id}/leaderboard"): PUBLIC,
    ("GET", "/api/v1/competitions/{competition_id}/leaderboard/history"): PUBLIC,
    ("GET", "/api/v1/competitions/{competition_id}/pairs/{a_id}/{b_id}"): PUBLIC,
    ("GET", "/api/v1/classifiers/{classifier_id}/analysis"): PUBLIC,
    ("GET", "/api/v1/competitions/{competition_id}/snapshots"): PUBLIC,
    ("POST", "/api/v1/competitions/{competition_id}/snapshots"): ADMIN,
    ("GET", "/api/v1/leaderboards/{slug}"): PUBLIC,
    ("GET", "/api/v1/competitions/{competition_id}/exports/subsets"): ADMIN,
    ("GET", "/api/v1/competitions/{competition_id}/exports/predictions"): ADMIN,
    ("GET", "/api/v1/competitions/{competition_id}/exports/votes"): ADMIN,
    ("GET", "/api/v1/competitions/{competition_id}/exports/questions"): ADMIN,
    ("GET", "/api/v1/competitions/{competition_id}/exports/adjudications"): ADMIN,
    ("GET", "/api/v1/competitions/{competition_id}/quality"): ADMIN,
    ("GET", "/competitions/{competition_id}/leaderboard"): PUBLIC,
    ("GET", "/leaderboards/{slug}"): PUBLIC,
    ("GET", "/competitions/{competition_id}/pairs/{a_id}/{b_id}"): PUBLIC,
    ("GET", "/competitions/{competition_id}/classifiers/{classifier_id}"): PUBLIC,
    ("GET", "/admin"): ADMIN,
    ("GET", "/admin/competitions/{competition_id}"): ADMIN,
    ("GET", "/admin/competitions/{competition_id}/gold"): ADMIN,
    ("GET", "/admin/competitions/{competition_id}/quality"): ADMIN,
    ("GET", "/admin/competitions/{competition_id}/review"): ADMIN,
    ("GET", "/admin/work-records"): ADMIN,
}
GATES = {ADMIN: require_admin, ANNOTATOR: labelling_request, WORKER: require_worker, ACCOUNT: current_user}
SIGNED_IN_BY_GATE = {ANNOTATOR}
"""The labelling hot path's gate reads the caller with the competition in one query, not through
current_user (app/labelling/annotating/router.py)."""
WELL_FORMED_BODIES = {
    ("POST", "/api/v1/competitions/{competition_id}/labelling/answers"): {
        "answers": [{"question_id": 0, "answer": True}]
    },
    ("POST", "/api/v1/competitions/{competition_id}/labelling/flags"): {"item_id": 0},
    ("POST", "/api/v1/competitions/{competition_id}/labelling/skip"): {"item_id": 0},
}
"""Bodies (of no question or item) for the labelling routes, which read their caller after the body is
validated (app/labelling/annotating/router.py: labelling_request): a role they do not admit is refused all the
same."""
ADMITTED = {
    PUBLIC: {"anonymous", "annotator", "worker", "admin"},
    ACCOUNT: {"annotator", "worker", "admin"},
    ANNOTATOR: {"annotator", "admin"},
    WORKER: {"worker", "admin"},
    ADMIN: {"admin"},
    FORM: set(),
    METRICS: set(),
}
SIGN_IN_PAGES = {
    "/account",
    "/admin",
    "/admin/competitions/{competition_id}",
    "/admin/competitions/{competition_id}/gold",
    "/admin/competitions/{competition_id}/quality",
    "/admin/competitions/{competition_id}/review",
    "/admin/work-records",
    "/competitions/{competition_id}/label",
}


def test_every_route_is_classified(app):
    served = {(endpoint.method, endpoint.path_template) for endpoint in endpoints(app)}
    unclassified = sorted(served - set(ROUTES))
    assert not unclassified, f"classify these new routes in ROUTES (who may call them?): {unclassified}"
    assert not set(ROUTES) - served, f"these routes are gone: {sorted(set(ROUTES) - served)}"


def test_api_routes_declare_the_gate_of_their_class(app):
    for endpoint in endpoints(app):
        if endpoint.path_template in SIGN_IN_PAGES:  # pages check the role in their body (behaviour below)
            continue
        kind = ROUTES[(endpoint.method, endpoint.path_template)]
        declared = {name for name, gate in GATES.items() if gate in endpoint.dependency_calls}
        # every role gate needs a signed-in user
        expected = set() if kind not in GATES else {kind} if kind in SIGNED_IN_BY_GATE else {kind, ACCOUNT}
        assert declared == expected, (endpoint.method, endpoint.path_template, declared)


def sample_path(template: str, world: World) -> str:
    """The path with real rows of the world."""
    values = {
        "competition_id": world.competition_id,
        "classifier_id": world.classifier_ids[0],
        "a_id": world.classifier_ids[0],
        "b_id": world.classifier_ids[1],
        "sha256": world.hashes[0],
        "slug": world.snapshot_slug,
        "user_id": world.user_ids["annotator"],
        "job_id": world.failed_job_id,
        "token": "no-such-invitation",
        "flag_id": 1,
        "token_id": 999_999,  # no such token: revoking a real one would sign a role of the world out
        "name": "no-such-provider",
    }
    return re.sub(r"{(\w+)}", lambda match: str(values[match.group(1)]), template)


def test_every_route_refuses_the_roles_it_does_not_admit(world_app, world):
    with TestClient(world_app) as client:
        for (method, template), kind in ROUTES.items():
            path = sample_path(template, world)
            for role in ("anonymous", "annotator", "worker", "admin"):
                response = client.request(
                    method,
                    path,
                    headers=world.headers(role),
                    json=WELL_FORMED_BODIES.get((method, template)),
                    follow_redirects=False,
                )
                status, where = response.status_code, (method, path, role, response.text[:300])
                if kind == FORM:
                    assert status == 403 and "CSRF" in response.json()["detail"], where
                elif kind == METRICS:
                    assert status in (401, 404), where
                elif role in ADMITTED[kind]:
                    assert status not in (401, 403), where
                elif role == "anonymous":
                    if template in SIGN_IN_PAGES:
                        assert status == 303 and response.headers["location"].startswith("/login?next="), (
                            where
                        )
                    else:
                        assert status == 401 and response.headers["www-authenticate"] == "Bearer", where
                else:
                    assert status == 403 and "role" in response.json()["detail"], where


def database_text(database_url: str) -> str:
    """Every value of every table, as one text."""
    engine = create_db_engine(database_url)
    try:
        with engine.connect() as connection:
            return "\n".join(
                repr(tuple(row))
                for table in Base.metadata.sorted_tables
                for row in connection.execute(select(table))
            )
    finally:
        engine.dispose()


def test_passwords_and_tokens_are_stored_hashed_whichever_way_they_are_made(
    world_app, world, world_settings, monkeypatch
):
    with TestClient(world_app) as client:
        password = "api-made password 77"
        made = client.post(
            "/api/v1/users",
            json={"username": "apiuser", "role": "annotator", "password": password},
            headers=world.headers("admin"),
        )
        assert made.status_code == 201
        token = client.post(
            f"/api/v1/users/{made.json()['id']}/tokens",
            json={"name": "laptop"},
            headers=world.headers("admin"),
        ).json()["token"]
        assert (
            client.get("/api/v1/me", headers={"Authorization": f"Bearer {token}"}).json()["username"]
            == "apiuser"
        )
        listing = client.get("/api/v1/users", headers=world.headers("admin")).text
        assert "argon2" not in listing and token not in listing
    for name, value in {
        "MAD_DATABASE_URL": world_settings.database_url,
        "MAD_DATA_DIR": str(world_settings.data_dir),
        "MAD_ENV": "development",
    }.items():
        monkeypatch.setenv(name, value)
    cli_password = "cli-made password 88"
    result = CliRunner().invoke(
        cli,
        ["users", "add", "cliuser", "--role", "annotator", "--token"],
        input=f"{cli_password}\n{cli_password}\n",
    )
    assert result.exit_code == 0, result.output
    cli_token = re.search(r"mad_[\w-]{43}", result.output).group(0)
    stored = database_text(world_settings.sqlalchemy_url)
    for secret in (password, token, cli_password, cli_token, TEST_PASSWORD, *world.tokens.values()):
        assert secret not in stored
    assert stored.count("$argon2id$") >= 6  # every person's password, hashed with Argon2id


def sign_in(client: TestClient, username: str, password: str = TEST_PASSWORD):
    """Sign in through the form; the response."""
    csrf = re.search(r'name="csrf_token" value="([^"]+)"', client.get("/login").text).group(1)
    return client.post(
        "/login",
        data={"username": username, "password": password, "csrf_token": csrf, "next": "/"},
        follow_redirects=False,
    )


def test_no_state_changes_from_a_cookie_request_without_the_csrf_token(world_app, world, world_settings):
    with TestClient(world_app) as client:
        assert sign_in(client, "the-admin").status_code == 303
        assert client.get("/api/v1/me").json()["role"] == "admin"
        before = database_text(world_settings.sqlalchemy_url)
        changing = [(method, template) for method, template in ROUTES if method != "GET"]
        assert len(changing) >= 20
        for method, template in changing:
            response = client.request(method, sample_path(template, world), json={})
            assert response.status_code == 403 and "CSRF" in response.json()["detail"], (method, template)
        assert database_text(world_settings.sqlalchemy_url) == before
        assert client.get("/api/v1/me").json()["role"] == "admin"  # not even signed out
        csrf = re.search(r'name="csrf-token" content="([^"]+)"', client.get("/").text).group(1)
        snapshot = client.post(
            f"/api/v1/competitions/{world.competition_id}/snapshots",
            json={"note": "with the token"},
            headers={"X-CSRF-Token": csrf},
        )
        assert snapshot.status_code == 201


@pytest.mark.parametrize("env", ["test", "production"])
def test_session_cookies_are_http_only_same_site_and_secure_in_production(world, world_settings, env):
    settings = Settings(**{**world_settings.model_dump(), "env": env, "secret_key": TEST_SECRET_KEY})
    application = create_app(settings)
    with TestClient(application, base_url="https://testserver") as client:
        cookie = sign_in(client, "the-admin").headers["set-cookie"].lower()
    application.state.engine.dispose()
    assert "httponly" in cookie and "samesite=lax" in cookie
    assert ("secure" in cookie.split("; ")) == (env == "production")


def test_sign_in_limits_count_per_address_and_reset_on_success(world_app, world, world_settings):
    limit = world_settings.login_max_failures
    with TestClient(world_app, client=("203.0.113.7", 4000)) as attacker:
        for _ in range(limit):
            assert sign_in(attacker, "the-admin", "guess").status_code == 401
        assert sign_in(attacker, "the-admin", "guess").status_code == 429
        assert sign_in(attacker, "the-admin").status_code == 429  # the right password waits too
    with TestClient(world_app, client=("198.51.100.9", 4000)) as owner:
        for _ in range(limit - 1):
            assert sign_in(owner, "the-annotator", "typo").status_code == 401
        assert sign_in(owner, "the-annotator").status_code == 303  # another address; success resets
        for _ in range(limit):
            assert sign_in(owner, "the-annotator", "typo").status_code == 401
        assert sign_in(owner, "the-admin").status_code == 303  # the admin is blocked only for the attacker


OFF_SITE_TARGETS = [
    "//evil.example/",
    "/\\evil.example/",
    "/\\/evil.example/",
    "\\\\evil.example",
    "/\t/evil.example",
    "/\n/evil.example",
    "/\x00/evil.example",
    "/%2F%2Fevil.example/",
    "/%2f/evil.example/",
    "/%5Cevil.example/",
    "/%5c%5cevil.example",
    "https://evil.example/",
    "javascript:alert(1)",
    " //evil.example",
]
"""Pages to go to after sign-in that are not plainly a path of this site: each is refused by the check
itself (safe_next), whatever the redirect's encoding would have made of it."""


def csrf_of(page: str) -> str:
    return re.search(r'name="csrf_token" value="([^"]+)"', page).group(1)


def test_sign_in_and_the_language_switch_never_redirect_off_the_site(world_app, world):
    with TestClient(world_app) as client:
        for target in OFF_SITE_TARGETS:
            form = client.get("/login", params={"next": target}).text
            assert 'name="next" value="/"' in form, target  # the form carries the site's home instead
            data = {"username": "the-admin", "password": TEST_PASSWORD, "csrf_token": csrf_of(form)}
            response = client.post("/login", data=data | {"next": target}, follow_redirects=False)
            assert (response.status_code, response.headers["location"]) == (303, "/admin"), target
            data = {"locale": "de", "next": target, "csrf_token": csrf_of(client.get("/").text)}
            response = client.post("/language", data=data, follow_redirects=False)
            assert (response.status_code, response.headers["location"]) == (303, "/"), target


def test_a_path_of_the_site_is_still_followed(world_app, world):
    target = "/competitions/1/label?from=home&q=a%20b"
    with TestClient(world_app) as client:
        form = client.get("/login", params={"next": target}).text
        data = {
            "username": "the-admin",
            "password": TEST_PASSWORD,
            "csrf_token": csrf_of(form),
            "next": target,
        }
        assert client.post("/login", data=data, follow_redirects=False).headers["location"] == target
        data = {"locale": "es", "next": target, "csrf_token": csrf_of(client.get("/").text)}
        assert client.post("/language", data=data, follow_redirects=False).headers["location"] == target
