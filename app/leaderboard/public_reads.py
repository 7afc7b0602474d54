"""Public reads (leaderboard, history, pair galleries, classifier analyses) computed once per data version.

A result is kept under its key and the competition's data version (competitions.service.data_version,
raised by database triggers in the transaction of every change it depends on), so it is served until the
labels change, and every process on one database sees the same versions. Concurrent misses of one key
wait for a single computation, and a process computes one public read at a time: however many anonymous
clients ask, at most one of the database gate's places does this work, and annotators queue for the rest.
"""

import asyncio
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Hashable
from typing import Annotated, Any, TypeVar

from fastapi import Depends, Request
from sqlalchemy.orm import Session

from app.classifiers.service import get_classifier
from app.competitions.service import data_version, get_competition
from app.db.session import DatabaseSteps
from app.leaderboard.classifier_analysis import classifier_analysis
from app.leaderboard.gallery import pair_gallery
from app.leaderboard.history import ranking_history
from app.leaderboard.schemas import ClassifierAnalysisRead, HistoryRead, LeaderboardRead, PairGalleryRead
from app.leaderboard.standings import compute_leaderboard
from app.settings import Settings

RESULTS_KEPT = 256
Result = TypeVar("Result")


class PublicReads:
    """Results by (key, data version), the most recently used RESULTS_KEPT of them, and the computations
    under way (single flight)."""

    def __init__(self) -> None:
        self.results: OrderedDict[Hashable, Any] = OrderedDict()
        self.pending: dict[Hashable, asyncio.Future] = {}
        self.computing = asyncio.Semaphore(1)
        self.waiting = 0
        self.computations = 0

    async def get(self, key: Hashable, compute: Callable[[], Awaitable[Any]]) -> Any:
        """The result kept under key, else that of the computation under way for it, else compute()'s.

        The computation runs as a task of its own, so a client that leaves does not cancel it for the
        others; an error reaches every waiter and is not kept."""
        if key in self.results:
            self.results.move_to_end(key)
            return self.results[key]
        task = self.pending.get(key)
        if task is None:
            task = self.pending[key] = asyncio.ensure_future(self._compute(key, compute))
        self.waiting += 1
        try:
            return await asyncio.shield(task)
        finally:
            self.waiting -= 1

    async def _compute(self, key: Hashable, compute: Callable[[], Awaitable[Any]]) -> Any:
        """compute() once the process's previous public computation is done; the result kept under key."""
        try:
            async with self.computing:
                self.computations += 1
                result = await compute()
            self.results[key] = result
            if len(self.results) > RESULTS_KEPT:
                self.results.popitem(last=False)
            return result
        finally:
            del self.pending[key]


def public_reads(request: Request) -> PublicReads:
    """The application's PublicReads."""
    return request.app.state.public_reads


PublicReadsDep = Annotated[PublicReads, Depends(public_reads)]


async def public_read(
    steps: DatabaseSteps,
    reads: PublicReads,
    key: tuple,
    competition_of: Callable[[Session], int],
    compute: Callable[[Session], Result],
) -> Result:
    """compute(session), kept under key and the data version of the competition competition_of names (its
    404 first), each a short database step of its own: no request holds the gate while it waits."""

    def competition_version(db_session: Session) -> int:
        return data_version(db_session=db_session, competition_id=competition_of(db_session))

    version = await steps.run(competition_version)
    return await reads.get((*key, version), lambda: steps.run(compute))


async def competition_read(
    steps: DatabaseSteps,
    reads: PublicReads,
    key: tuple,
    competition_id: int,
    compute: Callable[..., Result],
    **args,
) -> Result:
    """compute(db_session=…, competition=…, **args) of the competition (404 when there is none), kept under
    key and its data version."""

    def competition(db_session: Session):
        return get_competition(db_session=db_session, competition_id=competition_id)

    return await public_read(
        steps,
        reads,
        key,
        lambda db_session: competition(db_session).id,
        lambda db_session: compute(db_session=db_session, competition=competition(db_session), **args),
    )


async def leaderboard(steps: DatabaseSteps, reads: PublicReads, competition_id: int) -> LeaderboardRead:
    """The competition's leaderboard (standings.compute_leaderboard)."""
    return await competition_read(
        steps, reads, ("leaderboard", competition_id), competition_id, compute_leaderboard
    )


async def history(steps: DatabaseSteps, reads: PublicReads, competition_id: int) -> HistoryRead:
    """How its ranking formed (history.ranking_history)."""
    return await competition_read(steps, reads, ("history", competition_id), competition_id, ranking_history)


async def gallery(
    steps: DatabaseSteps, reads: PublicReads, competition_id: int, a_id: int, b_id: int
) -> PairGalleryRead:
    """A pair's gallery, either order (gallery.pair_gallery)."""
    key = ("pair", competition_id, min(a_id, b_id), max(a_id, b_id))
    return await competition_read(steps, reads, key, competition_id, pair_gallery, a_id=a_id, b_id=b_id)


async def analysis(
    steps: DatabaseSteps, reads: PublicReads, settings: Settings, classifier_id: int
) -> ClassifierAnalysisRead:
    """Where a classifier fails (classifier_analysis.classifier_analysis)."""

    def compute(db_session: Session) -> ClassifierAnalysisRead:
        classifier = get_classifier(db_session=db_session, classifier_id=classifier_id)
        competition = get_competition(db_session=db_session, competition_id=classifier.competition_id)
        return classifier_analysis(
            db_session=db_session, settings=settings, competition=competition, classifier=classifier
        )

    def competition_of(db_session: Session) -> int:
        return get_classifier(db_session=db_session, classifier_id=classifier_id).competition_id

    return await public_read(steps, reads, ("analysis", classifier_id), competition_of, compute)
