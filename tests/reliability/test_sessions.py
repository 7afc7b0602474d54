"""Sessions end server-side: a sign-in cookie stops working after sign-out, deactivation (even once
reactivated) and a new password, whichever way those are made (API, CLI) and on every server process.

A copy of the cookie taken before is replayed afterwards, as a thief holding it would; the labelling hot
path (which reads the caller in its own query) is checked beside /api/v1/me.
"""

import re

import pytest
from fastapi.testclient import TestClient
from typer.testing import CliRunner

from app.cli.main import app as cli
from app.main import create_app
from tests.conftest import TEST_PASSWORD
from tests.reliability.test_access import sign_in


def signed_in_cookie(app, username: str, password: str = TEST_PASSWORD) -> tuple[str, str]:
    """A fresh sign-in of `username`: its session cookie and CSRF token."""
    with TestClient(app) as client:
        assert sign_in(client, username, password).status_code == 303
        csrf = re.search(r'name="csrf-token" content="([^"]+)"', client.get("/").text).group(1)
        return client.cookies["mad_session"], csrf


def works(app, cookie: str, csrf: str, competition_id: int) -> dict[str, int]:
    """What a replayed cookie gets from /api/v1/me and from the labelling hot path."""
    with TestClient(app, cookies={"mad_session": cookie}) as client:
        me = client.get("/api/v1/me").status_code
        label = client.post(
            f"/api/v1/competitions/{competition_id}/labelling/next", headers={"X-CSRF-Token": csrf}
        ).status_code
    return {"me": me, "label": label}


ALIVE = {"me": 200, "label": 200}
ENDED = {"me": 401, "label": 401}


def test_signing_out_ends_the_session_on_every_server_process(world_app, world, world_settings):
    cookie, csrf = signed_in_cookie(world_app, "the-annotator")
    other_process = create_app(world_settings)
    try:
        assert works(other_process, cookie, csrf, world.competition_id) == ALIVE
        with TestClient(world_app, cookies={"mad_session": cookie}) as client:
            assert (
                client.post("/logout", data={"csrf_token": csrf}, follow_redirects=False).status_code == 303
            )
        assert works(world_app, cookie, csrf, world.competition_id) == ENDED
        assert works(other_process, cookie, csrf, world.competition_id) == ENDED
        fresh, fresh_csrf = signed_in_cookie(other_process, "the-annotator")  # signing in again works
        assert works(world_app, fresh, fresh_csrf, world.competition_id) == ALIVE
    finally:
        other_process.state.engine.dispose()


def test_a_deactivated_and_reactivated_account_must_sign_in_again(world_app, world):
    cookie, csrf = signed_in_cookie(world_app, "the-annotator")
    annotator = world.user_ids["annotator"]
    with TestClient(world_app) as admin:
        for is_active in (False, True):
            response = admin.patch(
                f"/api/v1/users/{annotator}", json={"is_active": is_active}, headers=world.headers("admin")
            )
            assert response.status_code == 200
    assert works(world_app, cookie, csrf, world.competition_id) == ENDED
    assert works(world_app, *signed_in_cookie(world_app, "the-annotator"), world.competition_id) == ALIVE


@pytest.fixture
def cli_env(world_settings, monkeypatch):
    """The CLI pointed at the world's database."""
    monkeypatch.setenv("MAD_DATABASE_URL", world_settings.database_url)
    monkeypatch.setenv("MAD_DATA_DIR", str(world_settings.data_dir))
    monkeypatch.setenv("MAD_ENV", "development")


def test_deactivating_through_the_cli_ends_the_sessions(world_app, world, cli_env):
    cookie, csrf = signed_in_cookie(world_app, "seeded-voter0")
    for command in ("deactivate", "reactivate"):
        result = CliRunner().invoke(cli, ["users", command, "seeded-voter0"])
        assert result.exit_code == 0, result.output
    assert works(world_app, cookie, csrf, world.competition_id) == ENDED


def test_a_new_password_ends_the_sessions_through_the_api_and_the_cli(world_app, world, cli_env):
    new_password = "a brand new password"
    cookie, csrf = signed_in_cookie(world_app, "the-annotator")
    with TestClient(world_app) as admin:
        changed = admin.put(
            f"/api/v1/users/{world.user_ids['annotator']}/password",
            json={"password": new_password},
            headers=world.headers("admin"),
        )
        assert changed.status_code == 200, changed.text
    assert works(world_app, cookie, csrf, world.competition_id) == ENDED
    cookie, csrf = signed_in_cookie(world_app, "the-annotator", new_password)
    result = CliRunner().invoke(cli, ["users", "password", "the-annotator", "--password", TEST_PASSWORD])
    assert result.exit_code == 0, result.output
    assert works(world_app, cookie, csrf, world.competition_id) == ENDED


def test_changing_ones_own_password_ends_the_other_sessions_only(world_app, world):
    elsewhere, elsewhere_csrf = signed_in_cookie(world_app, "the-annotator")
    here, here_csrf = signed_in_cookie(world_app, "the-annotator")
    with TestClient(world_app, cookies={"mad_session": here}) as client:
        changed = client.put(
            "/api/v1/me/password",
            json={"current_password": TEST_PASSWORD, "new_password": "another new password"},
            headers={"X-CSRF-Token": here_csrf},
        )
        assert changed.status_code == 200, changed.text
        assert client.get("/api/v1/me").status_code == 200  # this browser stays signed in
    assert works(world_app, elsewhere, elsewhere_csrf, world.competition_id) == ENDED
