"""The sign-in rate limiter keeps its memory bounded under a username-spraying attack.

Only keys with a failure inside the window are kept; asking about a key stores nothing; the table holds at
most max_keys keys, forgetting the least recently failed first. The clock is the limiter's own
time.monotonic, replaced by a counter the test advances (no sleeping, no timed assertions).
"""

from types import SimpleNamespace

import pytest

from app.users import rate_limit
from app.users.rate_limit import LoginRateLimiter
from tests.reliability.test_access import sign_in


class Clock:
    """A monotonic clock that moves only when told."""

    def __init__(self):
        self.now = 1000.0

    def monotonic(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch) -> Clock:
    """The limiter's clock, under the test's control."""
    clock = Clock()
    monkeypatch.setattr(rate_limit, "time", SimpleNamespace(monotonic=clock.monotonic))
    return clock


def test_asking_about_a_key_stores_nothing(clock):
    limiter = LoginRateLimiter(max_failures=3, window_s=60)
    for index in range(1000):
        assert limiter.retry_after(("203.0.113.7", f"name-{index}")) == 0
    assert len(limiter) == 0


def test_keys_are_forgotten_once_their_failures_leave_the_window(clock):
    limiter = LoginRateLimiter(max_failures=3, window_s=60)
    for index in range(500):
        limiter.record_failure(("203.0.113.7", f"name-{index}"))
        clock.now += 0.1
    assert len(limiter) == 500
    clock.now += 60 - 25  # the first 250 failures are now older than the window
    assert limiter.retry_after(("203.0.113.7", "name-0")) == 0
    assert len(limiter) == 250
    clock.now += 25
    limiter.record_failure(("198.51.100.9", "admin"))
    assert len(limiter) == 1


def test_the_table_is_bounded_and_forgets_the_least_recently_failed_key(clock):
    limiter = LoginRateLimiter(max_failures=2, window_s=300, max_keys=100)
    target = ("198.51.100.9", "admin")
    limiter.record_failure(target)
    for index in range(50):
        limiter.record_failure(("203.0.113.7", f"spray-{index}"))
        clock.now += 0.01
    limiter.record_failure(target)  # the target failed again: now the most recent key
    assert limiter.retry_after(target) > 0
    for index in range(50, 10_000):
        limiter.record_failure(("203.0.113.7", f"spray-{index}"))
        assert len(limiter) <= 100
    assert len(limiter) == 100
    assert limiter.retry_after(target) == 0  # forgotten after 99 newer keys failed
    assert limiter.retry_after(("203.0.113.7", "spray-9999")) == 0  # one failure of two allowed
    limiter.record_failure(("203.0.113.7", "spray-9999"))
    assert limiter.retry_after(("203.0.113.7", "spray-9999")) > 0


def test_a_key_is_blocked_only_while_enough_failures_are_in_the_window(clock):
    limiter = LoginRateLimiter(max_failures=3, window_s=60)
    key = ("203.0.113.7", "admin")
    for _ in range(3):
        limiter.record_failure(key)
        clock.now += 10
    assert limiter.retry_after(key) == 30  # until the first failure is 60 s old
    clock.now += 30
    assert limiter.retry_after(key) == 0
    limiter.record_failure(key)
    assert limiter.retry_after(key) == 10  # the second failure leaves the window 10 s from now
    limiter.forget(key)
    assert limiter.retry_after(key) == 0 and len(limiter) == 0


def test_spraying_usernames_through_the_form_keeps_only_recent_failures(world_app, world, clock):
    from fastapi.testclient import TestClient

    limiter = world_app.state.login_limiter
    with TestClient(world_app, client=("203.0.113.7", 4000)) as attacker:
        for index in range(40):
            assert sign_in(attacker, f"nobody-{index}", "guess").status_code == 401
        assert len(limiter) == 40
        clock.now += limiter.window_s
        assert sign_in(attacker, "the-admin").status_code == 303
        assert len(limiter) == 0
