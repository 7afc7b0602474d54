"""Sign-in under attack: failures are counted in the database (every server process, and a restarted one,
sees the same), per address and username and per address across usernames; old failures are deleted; the
Argon2 check runs without holding the database gate; unknown usernames cost the same Argon2 work.

Time is the login's own clock (app.site.pages.utcnow), moved by the test (no sleeping, no timed assertions).
The Argon2 work is counted by wrapping the password hasher's verify, which still does the real check.
"""

from datetime import timedelta

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import func, select

from app import security
from app.db.base import utcnow
from app.db.engine import create_db_engine
from app.main import create_app
from app.settings import Settings
from app.site import pages as site_pages
from app.users.models import LoginFailure
from tests.reliability.test_access import sign_in

ATTACKER = ("203.0.113.7", 4000)


class Clock:
    """The sign-in's clock, moved only by the test."""

    def __init__(self):
        self.now = utcnow()

    def __call__(self):
        return self.now


@pytest.fixture
def clock(monkeypatch) -> Clock:
    clock = Clock()
    monkeypatch.setattr(site_pages, "utcnow", clock)
    return clock


def failures_stored(settings: Settings) -> int:
    """Rows in login_failures."""
    engine = create_db_engine(settings.sqlalchemy_url)
    try:
        with engine.connect() as connection:
            return connection.scalar(select(func.count()).select_from(LoginFailure))
    finally:
        engine.dispose()


def test_every_server_process_counts_the_same_failures_and_a_restart_keeps_them(world, world_settings, clock):
    limit = world_settings.login_max_failures
    processes = [create_app(world_settings) for _ in range(2)]
    try:
        for index in range(limit):  # spread over two processes, as `mad serve --workers 2` would
            with TestClient(processes[index % 2], client=ATTACKER) as attacker:
                assert sign_in(attacker, "the-admin", "guess").status_code == 401
        for process in processes:
            with TestClient(process, client=ATTACKER) as attacker:
                assert sign_in(attacker, "the-admin", "guess").status_code == 429
        restarted = create_app(world_settings)
        processes.append(restarted)
        with TestClient(restarted, client=ATTACKER) as attacker:
            refused = sign_in(attacker, "the-admin")  # even the right password waits
            assert refused.status_code == 429 and int(refused.headers["retry-after"]) > 0
        clock.now += timedelta(seconds=world_settings.login_window_s + 1)
        with TestClient(restarted, client=ATTACKER) as owner:
            assert sign_in(owner, "the-admin").status_code == 303
    finally:
        for process in processes:
            process.state.engine.dispose()


def test_one_address_spraying_many_usernames_is_limited_too(world_app, world, world_settings, clock):
    per_address = world_settings.login_max_address_failures
    with TestClient(world_app, client=ATTACKER) as attacker:
        for index in range(per_address):
            assert sign_in(attacker, f"nobody-{index}", "guess").status_code == 401
        assert sign_in(attacker, "someone-new", "guess").status_code == 429
        assert sign_in(attacker, "the-admin").status_code == 429
    with TestClient(world_app, client=("198.51.100.9", 4000)) as elsewhere:
        assert sign_in(elsewhere, "the-admin").status_code == 303  # other addresses are not blocked


def test_failures_leave_the_table_once_out_of_the_window(world_app, world, world_settings, clock):
    with TestClient(world_app, client=ATTACKER) as attacker:
        for index in range(20):
            assert sign_in(attacker, f"spray-{index}", "guess").status_code == 401
        assert failures_stored(world_settings) == 20
        clock.now += timedelta(seconds=world_settings.login_window_s + 1)
        assert sign_in(attacker, "one-more", "guess").status_code == 401
        assert failures_stored(world_settings) == 1  # the 20 old ones were deleted
        assert sign_in(attacker, "the-admin").status_code == 303


@pytest.fixture
def argon2_calls(monkeypatch) -> tuple[list[bool], object]:
    """Each real Argon2 verification during a sign-in, recorded with whether the database gate was held."""
    calls: list[bool] = []
    hasher = security._password_hasher

    class CountingHasher:
        gate = None

        def hash(self, password):
            return hasher.hash(password)

        def verify(self, password_hash, password):
            calls.append(self.gate.locked())
            return hasher.verify(password_hash, password)

    counting = CountingHasher()
    monkeypatch.setattr(security, "_password_hasher", counting)
    return calls, counting


def test_argon2_runs_outside_the_database_gate(world, world_settings, argon2_calls):
    calls, counted = argon2_calls
    app = create_app(Settings(**{**world_settings.model_dump(), "db_pool_size": 1}))  # a gate of one
    counted.gate = app.state.database_gate
    try:
        with TestClient(app, client=ATTACKER) as client:
            assert sign_in(client, "the-annotator", "wrong password").status_code == 401
            assert sign_in(client, "the-annotator").status_code == 303
    finally:
        app.state.engine.dispose()
    assert calls == [False, False]


def test_unknown_usernames_cost_the_same_argon2_work_as_known_ones(world_app, world, argon2_calls):
    calls, counted = argon2_calls
    counted.gate = world_app.state.database_gate
    with TestClient(world_app, client=ATTACKER) as client:
        for username in ("the-annotator", "no-such-user", "the-worker"):  # known, unknown, no password
            before = len(calls)
            assert sign_in(client, username, "wrong password").status_code == 401
            assert len(calls) - before == 1, username
