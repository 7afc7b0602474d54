"""A web request's database session: one per request, behind the database gate, committed once."""

from collections.abc import AsyncIterator, Callable, Iterator
from typing import Annotated, TypeVar, cast

from fastapi import Depends, Request
from sqlalchemy.orm import Session
from starlette.concurrency import run_in_threadpool

Chunk = TypeVar("Chunk")


async def through_database_gate(request: Request, chunks: Iterator[Chunk]) -> AsyncIterator[Chunk]:
    """A streamed response's chunks, each made in a thread once the database gate lets it in.

    Streamed exports read the database between chunks with sessions of their own; made in threads without
    passing the gate, forty of them waiting for connections could take every thread from the requests
    that hold the connections (see get_session).
    """
    end = object()
    while True:
        async with request.app.state.database_gate:
            chunk = await run_in_threadpool(next, chunks, end)
        if chunk is end:
            return
        yield cast(Chunk, chunk)


async def get_session(request: Request) -> AsyncIterator[Session]:
    """One session per request, committed once when the endpoint returns (unless it committed already, as
    in_one_thread does), rolled back on error.

    The request first waits at the database gate: only as many requests use the database at once as it
    has connections (one on SQLite, the pool size on Postgres), the rest queue on the event loop before
    they take a thread. A request holds its connection between thread hops (dependencies, endpoint,
    commit); were more let in than there are connections, those waiting for a connection inside threads
    could take every thread and leave the holders none to commit in: a deadlock until the pool (or
    SQLite's busy) timeout. Making the session touches no database, so it needs no thread.
    """
    async with request.app.state.database_gate:
        session = request.app.state.sessionmaker()
        try:
            yield session
            if session.in_transaction():
                await run_in_threadpool(session.commit)
        except BaseException:
            if session.in_transaction():
                await run_in_threadpool(session.rollback)
            raise
        finally:
            session.close()


SessionDep = Annotated[Session, Depends(get_session, scope="function")]

Result = TypeVar("Result")


async def in_one_thread(db_session: Session, work: Callable[[], Result]) -> Result:
    """Run a request's database work and its one commit in a single worker thread.

    For the labelling hot path, from an async endpoint: a sync endpoint takes one thread hop for itself and
    another for get_session's commit, and on a busy two-core server each hop costs CPU and wait. An error
    rolls back in get_session.
    """

    def work_and_commit() -> Result:
        result = work()
        db_session.commit()
        return result

    return await run_in_threadpool(work_and_commit)


class DatabaseSteps:
    """Short database steps of one request, each in a session of its own, committed, behind the database
    gate: for a request that must not hold a connection between them (sign-in computes Argon2 between its
    reads and writes, ~50–200 ms a guess that would otherwise keep the gate from every other request)."""

    def __init__(self, request: Request):
        self.request = request

    async def run(self, work: Callable[[Session], Result]) -> Result:
        """work(session) in a worker thread once the gate lets it in; committed, or rolled back on error."""
        state = self.request.app.state

        def step() -> Result:
            with state.sessionmaker() as session, session.begin():
                return work(session)

        async with state.database_gate:
            return await run_in_threadpool(step)


def database_steps(request: Request) -> DatabaseSteps:
    """The request's DatabaseSteps (a dependency, so that tests can bind the steps to their transaction)."""
    return DatabaseSteps(request)


DatabaseStepsDep = Annotated[DatabaseSteps, Depends(database_steps)]
