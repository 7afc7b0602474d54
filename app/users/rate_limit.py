"""Slowing down password guessing: failed sign-ins are counted per client address and username."""

import threading
import time
from collections import defaultdict, deque


class LoginRateLimiter:
    """At most `max_failures` failed sign-ins per (address, username) within `window_s` seconds.

    Kept in memory, so each server process counts on its own; a restart forgets the counts.
    """

    def __init__(self, max_failures: int, window_s: float):
        self.max_failures = max_failures
        self.window_s = window_s
        self._failures: defaultdict[tuple[str, str], deque[float]] = defaultdict(deque)
        self._lock = threading.Lock()

    def retry_after(self, key: tuple[str, str]) -> int:
        """Seconds until this key may try again; 0 when it may try now."""
        now = time.monotonic()
        with self._lock:
            failures = self._failures[key]
            while failures and failures[0] <= now - self.window_s:
                failures.popleft()
            if len(failures) < self.max_failures:
                return 0
            return max(1, round(failures[0] + self.window_s - now))

    def record_failure(self, key: tuple[str, str]) -> None:
        """Count one failed sign-in."""
        with self._lock:
            self._failures[key].append(time.monotonic())

    def forget(self, key: tuple[str, str]) -> None:
        """Clear the count after a successful sign-in."""
        with self._lock:
            self._failures.pop(key, None)
