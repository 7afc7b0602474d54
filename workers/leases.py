"""The leases a worker holds, kept alive by heartbeats from a background thread.

A worker holds the jobs it runs and those it claimed ahead (the next shard, read while the current one runs)
and those whose results are on their way up; a job is released once reported. A lease the service refuses
is recorded as lost, so the work on that job stops and its result is not reported.
"""

import threading

from app.jobs.schemas import ClaimedJob
from workers.client import ServiceClient


class LeaseKeeper:
    """Heartbeats the leases of the jobs held, every third of a lease, with each job's progress."""

    def __init__(self, client: ServiceClient) -> None:
        self.client = client
        self.interval_s: float | None = None
        self.leases: dict[int, str] = {}
        self.progress: dict[int, int] = {}
        self.lost: set[int] = set()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._beat, name="lease-keeper", daemon=True)

    def __enter__(self) -> "LeaseKeeper":
        return self

    def __exit__(self, *exc_info) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()

    def hold(self, jobs: list[ClaimedJob], lease_seconds: float) -> None:
        """Heartbeat these jobs' leases from now on (the thread starts with the first)."""
        with self._lock:
            self.leases.update({job.id: job.lease_token for job in jobs})
            self.progress.update({job.id: 0 for job in jobs})
            self.interval_s = min(self.interval_s or lease_seconds, lease_seconds / 3)
        if not self._thread.is_alive() and not self._stop.is_set():
            self._thread.start()

    def release(self, jobs: list[ClaimedJob]) -> None:
        """Stop heartbeating these jobs (reported, failed or lost)."""
        with self._lock:
            for job in jobs:
                self.leases.pop(job.id, None)
                self.progress.pop(job.id, None)
                self.lost.discard(job.id)

    def report_progress(self, jobs: list[ClaimedJob], done: int) -> None:
        """Images done of these jobs' shard, sent with the next heartbeat."""
        with self._lock:
            self.progress.update({job.id: done for job in jobs if job.id in self.leases})

    def all_lost(self, jobs: list[ClaimedJob]) -> bool:
        """True when every one of these jobs' leases was taken over."""
        return {job.id for job in jobs} <= self.lost

    def _beat(self) -> None:
        """Every interval, extend the leases still held; a refused one is recorded as lost."""
        while not self._stop.wait(self.interval_s):
            with self._lock:
                held_leases = [
                    (job_id, token, self.progress[job_id])
                    for job_id, token in self.leases.items()
                    if job_id not in self.lost
                ]
            if not held_leases:
                continue
            try:
                held = self.client.heartbeat(held_leases)
            except Exception:  # a missed beat is retried next interval; the lease has slack
                continue
            with self._lock:
                self.lost |= {
                    job_id for job_id, is_held in held.items() if not is_held and job_id in self.leases
                }
