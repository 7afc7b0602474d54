"""Concurrent requests that clash: the same new image uploaded at once, one username created twice at once.

Over HTTP against uvicorn, on SQLite and on Postgres. SQLite has one writer, so there the requests take
turns. On Postgres the test holds locks of its own so that the requests are certain to overlap:

- four uploads of one new image (three into one competition, one into another) are sent while the test
  holds both competition rows; once all four wait on a lock the test lets go. Each had looked the image up
  before waiting and found it new, so all four try to store it at once. Every upload succeeds: the image is
  stored once (one row, one file and thumbnail), added once to each competition, and reported as a
  duplicate to the other two uploads.
- a user is created through the API while the test holds an uncommitted row of the same name: the
  request's check finds the name free, its insert waits, and when the test commits it gets 409 (the
  database's unique constraint, answered as a conflict), not a 500.
"""

import threading

import httpx
import psycopg
from sqlalchemy import func, make_url, select

from app.competitions.schemas import CompetitionCreate
from app.competitions.service import create_competition
from app.db.engine import create_db_engine, create_sessionmaker
from app.images.models import CompetitionImage, Image
from app.users import service as users_service
from app.users.models import Role, User
from tests.reliability.test_faults import Server, wait_for
from tests.support.images import image_bytes


def postgres_connection(database_url: str, autocommit: bool = False) -> psycopg.Connection:
    """A psycopg connection to the test's database."""
    url = make_url(database_url)
    return psycopg.connect(
        host=url.host, port=url.port or 5432, user=url.username, dbname=url.database, autocommit=autocommit
    )


def waiting_on_locks(admin: psycopg.Connection, database: str) -> int:
    """How many sessions of the database wait for a lock (pg_stat_activity is read afresh only outside a
    transaction: the connection must be autocommit)."""
    return admin.execute(
        "SELECT count(*) FROM pg_stat_activity WHERE datname = %s AND wait_event_type = 'Lock'", (database,)
    ).fetchone()[0]


def setup(database_url: str, tokens: int = 1) -> tuple[list[int], list[str]]:
    """Two competitions and an admin's tokens (a request updates its token's last use: requests with one
    token would take turns there)."""
    engine = create_db_engine(database_url)
    try:
        with create_sessionmaker(engine)() as session:
            ids = [
                create_competition(db_session=session, spec=CompetitionCreate(name=name)).id
                for name in ("first", "second")
            ]
            admin = users_service.create_user(
                db_session=session, username="admin", role=Role.admin, password="long enough"
            )
            tokens = [
                users_service.create_api_token(db_session=session, user=admin, name=f"t{i}")
                for i in range(tokens)
            ]
            session.commit()
            return ids, tokens
    finally:
        engine.dispose()


def in_threads(calls) -> list:
    """Start each call in a thread of its own; the threads, and the list their results fill in order."""
    results = [None] * len(calls)

    def run(index, call):
        results[index] = call()

    threads = [threading.Thread(target=run, args=(i, call)) for i, call in enumerate(calls)]
    for thread in threads:
        thread.start()
    return threads, results


def test_concurrent_uploads_of_one_new_image_store_it_once(fresh_database_url, tmp_path, backend):
    (first, second), tokens = setup(fresh_database_url, tokens=4)
    data = image_bytes(4242)
    server = Server(fresh_database_url, tmp_path / "data")
    server.start()
    lock_holder = postgres_connection(fresh_database_url) if backend == "postgres" else None
    try:
        if lock_holder is not None:
            lock_holder.execute(
                "SELECT id FROM competitions WHERE id IN (%s, %s) FOR UPDATE", (first, second)
            )

        def upload(competition_id: int, name: str, token: str):
            return lambda: httpx.post(
                f"{server.url}/api/v1/competitions/{competition_id}/images",
                files=[("files", (name, data, "image/png"))],
                headers={"Authorization": f"Bearer {token}"},
                timeout=120,
            )

        targets = [(first, "copy-0.png"), (first, "copy-1.png"), (first, "copy-2.png"), (second, "other.png")]
        threads, responses = in_threads(
            [upload(target, name, token) for (target, name), token in zip(targets, tokens, strict=True)]
        )
        if lock_holder is not None:
            with postgres_connection(fresh_database_url, autocommit=True) as watcher:
                database = make_url(fresh_database_url).database
                wait_for(lambda: waiting_on_locks(watcher, database) == 4, "all four uploads to wait")
            lock_holder.rollback()
        for thread in threads:
            thread.join(120)
    finally:
        if lock_holder is not None:
            lock_holder.close()
        server.stop()

    assert [response.status_code for response in responses] == [201] * 4, [r.text for r in responses]
    reports = [response.json() for response in responses]
    into_first = reports[:3]
    assert sum(len(report["added"]) for report in into_first) == 1
    duplicates = [item for report in into_first for item in report["duplicates"]]
    assert [item["detail"] for item in duplicates] == ["already in this competition"] * 2
    assert [item["name"] for item in reports[3]["added"]] == ["other.png"]
    engine = create_db_engine(fresh_database_url)
    try:
        with create_sessionmaker(engine)() as session:
            assert session.scalar(select(func.count()).select_from(Image)) == 1
            links = session.execute(select(CompetitionImage.competition_id, CompetitionImage.ordinal)).all()
            assert sorted(links) == [(first, 0), (second, 0)]
    finally:
        engine.dispose()
    stored = sorted(p.relative_to(tmp_path / "data").parts[0] for p in (tmp_path / "data").rglob("*.*"))
    assert stored == ["images", "thumbnails"]


def test_a_username_taken_while_the_request_runs_is_a_conflict(fresh_database_url, tmp_path, backend):
    _, (token,) = setup(fresh_database_url)
    server = Server(fresh_database_url, tmp_path / "data")
    server.start()
    engine = create_db_engine(fresh_database_url)
    try:
        with create_sessionmaker(engine)() as session:
            session.add(User(username="racer", role=Role.annotator, password_hash=None))
            session.flush()  # uncommitted: the request's check cannot see it yet (Postgres)
            threads, responses = in_threads(
                [
                    lambda: httpx.post(
                        f"{server.url}/api/v1/users",
                        json={"username": "racer", "role": "annotator", "password": "long enough"},
                        headers={"Authorization": f"Bearer {token}"},
                        timeout=120,
                    )
                ]
            )
            if backend == "postgres":
                with postgres_connection(fresh_database_url, autocommit=True) as watcher:
                    database = make_url(fresh_database_url).database
                    wait_for(lambda: waiting_on_locks(watcher, database) == 1, "the insert to wait")
            session.commit()
        threads[0].join(120)
        with create_sessionmaker(engine)() as session:
            assert session.scalar(select(func.count()).where(User.username == "racer")) == 1
    finally:
        engine.dispose()
        server.stop()
    (response,) = responses
    assert response.status_code == 409, response.text
    assert response.json()["code"] == "conflict" and "racer" in response.json()["detail"], response.text
