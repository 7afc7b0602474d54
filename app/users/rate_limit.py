"""Slowing down password guessing: failed sign-ins are counted per client address and username."""

import threading
import time
from collections import OrderedDict, deque

MAX_KEYS = 100_000
"""Most (address, username) keys tracked at once: a few MB, however many names an attacker sprays."""


class LoginRateLimiter:
    """At most `max_failures` failed sign-ins per (address, username) within `window_s` seconds.

    Kept in memory, so each server process counts on its own; a restart forgets the counts. Only keys with
    a failure inside the window are kept, at most `max_keys` of them: when full, the key whose last failure
    is oldest is forgotten first.
    """

    def __init__(self, max_failures: int, window_s: float, max_keys: int = MAX_KEYS):
        self.max_failures = max_failures
        self.window_s = window_s
        self.max_keys = max_keys
        self._failures: OrderedDict[tuple[str, str], deque[float]] = OrderedDict()
        """Recent failure times per key (the last max_failures), least recently failed key first."""
        self._lock = threading.Lock()

    def __len__(self) -> int:
        """How many keys are tracked now."""
        return len(self._failures)

    def retry_after(self, key: tuple[str, str]) -> int:
        """Seconds until this key may try again; 0 when it may try now."""
        now = time.monotonic()
        with self._lock:
            self._drop_expired(now)
            failures = self._failures.get(key)
            if failures is None:
                return 0
            while failures[0] <= now - self.window_s:  # the last one is recent: _drop_expired kept it
                failures.popleft()
            if len(failures) < self.max_failures:
                return 0
            return max(1, round(failures[0] + self.window_s - now))

    def record_failure(self, key: tuple[str, str]) -> None:
        """Count one failed sign-in, forgetting the least recently failed key when the table is full."""
        now = time.monotonic()
        with self._lock:
            self._drop_expired(now)
            failures = self._failures.get(key)
            if failures is None:
                while len(self._failures) >= self.max_keys:
                    self._failures.popitem(last=False)
                failures = self._failures[key] = deque(maxlen=self.max_failures)
            failures.append(now)
            self._failures.move_to_end(key)

    def forget(self, key: tuple[str, str]) -> None:
        """Clear the count after a successful sign-in."""
        with self._lock:
            self._failures.pop(key, None)

    def _drop_expired(self, now: float) -> None:
        """Forget the keys whose last failure is outside the window (they come first, by last failure)."""
        while self._failures:
            key, failures = next(iter(self._failures.items()))
            if failures[-1] > now - self.window_s:
                return
            del self._failures[key]
