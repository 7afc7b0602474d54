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
from typing import Annotated, Any

from fastapi import Depends, Request

RESULTS_KEPT = 256


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
