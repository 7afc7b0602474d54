"""Where the active policy reruns (issue 24; docs/architecture.md, Active sampling): in a process of its own
beside each server process, never in the server's threads.

A rerun reads every item of the competition and refits the bootstrap: a tenth to a third of a second of
CPU, most of it Python holding the GIL. Run in a thread of the server process it made that process's event
loop and request threads wait for the GIL at every step, so the next and submit p99 of benchmarks/labelling.py
rose to 2.5× uniform sampling's; in a process of its own it costs the requests only its CPU, and at a lower
CPU priority (POLICY_NICENESS) only the CPU they leave. The process is
started at the first answer under active sampling (a server that never samples actively never starts it;
starting takes a second or two of importing, done before the first rerun is due) with its own engine, made
once, and reruns one competition at a time; several server processes' reruns of one competition wait for
each other on the competition's row (app.labelling.active_sampling.policy).
"""

import asyncio
import logging
import multiprocessing
import os
import threading
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import Engine
from sqlalchemy.orm import Session, sessionmaker

from app.db.base import utcnow
from app.db.engine import create_db_engine, create_sessionmaker
from app.labelling.active_sampling import policy
from app.labelling.active_sampling.reads import PAUSE
from app.labelling.metrics import POLICY_RERUN_FAILURES

logger = logging.getLogger(__name__)

_sessions: dict[str, sessionmaker[Session]] = {}


def refresh_if_due_at(
    url: str, competition_id: int, counted: int, ran_dry: bool
) -> tuple[int, datetime | None]:
    """policy.refresh_if_due in a transaction of its own on the database at `url` (this process's sessions
    of it, made at the first call), its reads paced on Postgres (reads.PAUSE; on SQLite the transaction holds
    the one write lock from its BEGIN IMMEDIATE, which pauses would only make every writer wait for), then the
    rerun's priorities in short transactions of their own (policy.write_levels_in_turn, paced), then its rest
    (policy.rest, for the time it worked); the competition's refresh_interval, and until when the policy
    rests."""
    if url not in _sessions:
        _sessions[url] = create_sessionmaker(policy_engine(url))
    with _sessions[url]() as db_session, db_session.begin():
        pause = PAUSE if db_session.get_bind().dialect.name == "postgresql" else 0.0
        due = policy.refresh_if_due(
            db_session, competition_id=competition_id, counted=counted, ran_dry=ran_dry, pause=pause
        )
    if due.rerun is not None:
        written = policy.write_levels_in_turn(_sessions[url], competition_id, due.rerun)
        with _sessions[url]() as db_session, db_session.begin():
            return due.interval, policy.rest(db_session, competition_id, due.rerun, written.paused_s)
    return due.interval, due.resting_until


def policy_engine(url: str) -> Engine:
    """The policy's process's engine: one connection; on Postgres committing without waiting for its WAL
    to reach the disk (synchronous_commit off), so that its writes' flushes never hold up the requests'
    commits. A crash may lose its last rerun whole and never in part; the next reruns from what is left."""
    if url.startswith("sqlite"):
        return create_db_engine(url)
    return create_db_engine(url, pool_size=1, connect_args={"options": "-c synchronous_commit=off"})


BATCHES_PER_INTERVAL = 10
"""A server process hands its count of decided questions to the policy's process once it reaches a tenth of
the competition's refresh_interval (learnt from the last rerun; at once before the first)."""
POLICY_NICENESS = 10
"""How much lower the policy's process runs than the server's (nice): requests take the CPU first, and a
rerun waits for the gaps between them."""


def lower_priority() -> None:
    """Start of the policy's process: os.nice(POLICY_NICENESS)."""
    os.nice(POLICY_NICENESS)


def ready() -> None:
    """Nothing: run once so that the policy's process has imported this module before the first rerun."""


@dataclass(frozen=True)
class RerunFailure:
    """A failed rerun of the policy: when, and the error (its type and message)."""

    at: datetime
    error: str


class PolicyRunner:
    """Reruns the policy in a process of its own (module docstring), started by `start`, and counts the
    questions this server process's answers decide (`count`), handing them over in batches. A
    competition's rerun asked for while one of it waits or runs is dropped (its count stays here for the
    next): all but the first would only queue to find the count taken off."""

    def __init__(self, url: str):
        self.url = url
        self.pool: ProcessPoolExecutor | None = None
        self.starting = threading.Lock()
        self.asked: set[int] = set()
        self.failures: dict[int, RerunFailure] = {}
        """Each competition whose last rerun in this server process failed, with why."""
        self.counting = threading.Lock()
        self.pending: dict[int, int] = {}
        """Questions decided here and not yet handed to the policy's process, by competition."""
        self.batch: dict[int, int] = {}
        """refresh_interval / BATCHES_PER_INTERVAL of each competition, from its last rerun asked here."""
        self.resting_until: dict[int, datetime | None] = {}
        """Until when each competition's policy rests, as its last rerun asked here found: no count is handed
        over before then (it would only be added to the policy row's)."""

    def count(self, competition_id: int, decided: int) -> bool:
        """Add questions just decided in the competition (requests' threads call it); whether this process's
        count has reached its batch and the policy is not resting, so that refresh_if_due should hand it
        over."""
        with self.counting:
            pending = self.pending.get(competition_id, 0) + decided
            self.pending[competition_id] = pending
            resting = policy.is_resting(self.resting_until.get(competition_id))
            return pending >= self.batch.get(competition_id, 1) and not resting

    def _take(self, competition_id: int) -> int:
        """This process's count of the competition, taken off."""
        with self.counting:
            return self.pending.pop(competition_id, 0)

    def _give_back(self, competition_id: int, counted: int) -> None:
        """A count the policy's process did not take (its rerun failed), kept for the next."""
        with self.counting:
            self.pending[competition_id] = self.pending.get(competition_id, 0) + counted

    def start(self) -> ProcessPoolExecutor:
        """The policy's process, started (importing in the background) if it was not; requests' threads call
        it at once, so one of them starts it."""
        with self.starting:
            if self.pool is None:
                self.pool = ProcessPoolExecutor(
                    max_workers=1,
                    mp_context=multiprocessing.get_context("spawn"),
                    initializer=lower_priority,
                )
                self.pool.submit(ready)
            return self.pool

    async def refresh_if_due(self, competition_id: int, ran_dry: bool) -> None:
        """policy.refresh_if_due on the competition in the policy's process, with the questions counted here,
        unless one is asked already.

        A rerun that fails is logged with its traceback, counted (POLICY_RERUN_FAILURES) and kept in
        `failures` for the competition's admin page until a rerun succeeds; labelling goes on with the
        priorities of the last good rerun (the failed one's transaction is rolled back), and the questions it
        was to answer for stay counted, so the next decided question asks again.
        """
        if competition_id in self.asked:
            return
        self.asked.add(competition_id)
        counted = self._take(competition_id)
        try:
            loop = asyncio.get_running_loop()
            interval, resting_until = await loop.run_in_executor(
                self.start(), refresh_if_due_at, self.url, competition_id, counted, ran_dry
            )
        except Exception as error:
            if isinstance(error, BrokenProcessPool):
                self.pool = None  # the process died (killed, out of memory): the next rerun starts another
            self._give_back(competition_id, counted)
            self._failed(competition_id, error)
        else:
            self.batch[competition_id] = max(1, interval // BATCHES_PER_INTERVAL)
            self.resting_until[competition_id] = resting_until
            self.failures.pop(competition_id, None)
        finally:
            self.asked.discard(competition_id)

    def _failed(self, competition_id: int, error: Exception) -> None:
        """Log, count and keep a failed rerun of the competition."""
        logger.error("the active policy's rerun of competition %s failed", competition_id, exc_info=error)
        POLICY_RERUN_FAILURES.labels(str(competition_id)).inc()
        self.failures[competition_id] = RerunFailure(utcnow(), f"{type(error).__name__}: {error}")

    def close(self) -> None:
        """Stop the policy's process, dropping the reruns not started (each is due again at the next
        decided question)."""
        if self.pool is not None:
            self.pool.shutdown(wait=True, cancel_futures=True)
            self.pool = None
