"""Faults: the server killed mid-labelling, Postgres connections dropped under load, a disk that fills up.

- The server (uvicorn in its own process) is killed with SIGKILL while annotators submit answers over
  HTTP; after a restart they go on, resending what was unanswered. Every vote the server acknowledged is
  in the database exactly once, and every question's tallies match its votes.
- Postgres: every connection of the service's database is terminated (pg_terminate_backend; the shared
  server keeps running for other test runs) three times while annotators submit; the service reconnects
  (closed connections are replaced at checkout) and goes on, only requests in flight fail, and no
  acknowledged vote is lost; a request sent after the connections were closed is answered.
- Postgres stopped and started again, then restarted (pg_ctl, on a private cluster the test makes with
  initdb) while annotators submit: while it is down they get clear 503s and resend; once it is back the
  service reconnects, no request sent after that fails, and no acknowledged vote is lost.
- A prediction shard (and an image) whose write fails with ENOSPC leaves no file, partial or temporary,
  answers 503 so the worker retries, and the same upload succeeds once there is room. When a later image
  of an upload fails, the files already written for the earlier ones go too (no file without its row);
  a CLI import keeps the batches it committed, rows and files.
- A worker started while the service is down (or answering 503) waits for it instead of exiting, then
  does its jobs.
- A worker killed mid-job is taken over by another and its predictions equal a clean run:
  tests/jobs/test_worker_faults.py::test_a_worker_killed_mid_shard_is_taken_over_and_predictions_equal_a_
  clean_run (racing and concurrent workers: the same file).

Waits here are liveness bounds (a dead service fails instead of hanging), never timing assertions.
"""

import errno
import os
import resource
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

import httpx
import numpy as np
import psycopg
import pytest
from fastapi.testclient import TestClient
from sqlalchemy import func, make_url, select

from app.classifiers import prediction_store
from app.classifiers.prediction_store import PredictionStore
from app.cli.main import app as cli
from app.competitions.schemas import CompetitionCreate
from app.competitions.service import create_competition
from app.db.engine import create_db_engine, create_sessionmaker
from app.images import service as image_service
from app.images.models import Image
from app.jobs.enums import JobStatus
from app.jobs.models import Job
from app.labelling.models import PairSubset, Question, Vote
from app.main import create_app
from app.migrate import upgrade
from app.storage import local as local_store
from app.users import service as users_service
from app.users.models import Role
from tests.conftest import TEST_SECRET_KEY, settings_for
from tests.labelling.factories import labelling_competition, users_with_tokens
from tests.leaderboard.scenario import corpus, digits_competition, register
from tests.reliability.test_bad_input import invoke, query, runner, shard
from tests.support.images import image_bytes
from tests.support.jobs import claimed_shard
from workers.worker import WorkerOptions, run_worker

REPOSITORY = Path(__file__).resolve().parents[2]
LIVENESS_S = 120
ANNOTATORS = 6


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_for(predicate: Callable[[], object], what: str):
    """Poll until predicate() is truthy; fail after LIVENESS_S (the service is dead, not slow)."""
    deadline = time.monotonic() + LIVENESS_S
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.02)
    raise AssertionError(f"gave up waiting for {what}")


class Server:
    """uvicorn serving the app in a process of its own, on a fixed port so it can be restarted."""

    def __init__(self, database_url: str, data_dir: Path, memory_bytes: int | None = None):
        self.memory_bytes = memory_bytes
        """At most this much address space for the server's process (RLIMIT_AS); None: no limit."""
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.environment = {
            **os.environ,
            "MAD_DATABASE_URL": database_url,
            "MAD_DATA_DIR": str(data_dir),
            "MAD_ENV": "test",
            "MAD_SECRET_KEY": TEST_SECRET_KEY,
        }
        self.process: subprocess.Popen | None = None

    def start(self) -> None:
        self.process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "uvicorn",
                "--factory",
                "app.main:create_app",
                "--port",
                str(self.port),
                "--no-access-log",
                "--log-level",
                "warning",
            ],
            cwd=REPOSITORY,
            env=self.environment,
            preexec_fn=None if self.memory_bytes is None else self._limit_memory,
        )
        wait_for(self.healthy, "the server to start")

    def _limit_memory(self) -> None:
        """In the server's process, before it runs: cap its address space at memory_bytes."""
        resource.setrlimit(resource.RLIMIT_AS, (self.memory_bytes, self.memory_bytes))

    def healthy(self) -> bool:
        assert self.process.poll() is None, "the server exited"
        try:
            return httpx.get(f"{self.url}/healthz", timeout=5).status_code == 200
        except httpx.TransportError:
            return False

    def kill(self) -> None:
        self.process.send_signal(signal.SIGKILL)
        self.process.wait()

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            self.process.wait(timeout=30)


class Failure(NamedTuple):
    """A request that failed: when it was sent and answered (time.monotonic()), and what happened."""

    sent_at: float
    failed_at: float
    what: str

    @classmethod
    def of(cls, sent_at: float, response: httpx.Response) -> "Failure":
        """A failure answered with this response: "503 {detail...}"."""
        return cls(sent_at, time.monotonic(), f"{response.status_code} {response.text[:200]}")


@dataclass
class Annotator:
    """A simulated annotator over HTTP: take an image, answer yes to all, repeat; resend after a failure.

    failures holds a Failure for each request that failed.
    """

    url: str
    token: str
    competition_id: int
    acknowledged: set = field(default_factory=set)
    sent: set = field(default_factory=set)
    failures: list[Failure] = field(default_factory=list)
    submissions: int = 0

    def run(self, stop: threading.Event) -> None:
        prefix = f"{self.url}/api/v1/competitions/{self.competition_id}/labelling"
        headers = {"Authorization": f"Bearer {self.token}"}
        item = pending = None
        http = httpx.Client(headers=headers, timeout=30)
        while not stop.is_set():
            sent_at = time.monotonic()
            try:
                if pending is None:
                    if item is None:
                        following = http.post(f"{prefix}/next")
                        if following.status_code != 200:
                            self.failures.append(Failure.of(sent_at, following))
                            time.sleep(0.05)
                            continue
                        if following.json()["status"] != "item":
                            time.sleep(0.05)
                            continue
                        item = following.json()["item"]
                    pending = [{"question_id": q["question_id"], "answer": True} for q in item["questions"]]
                self.sent |= {answer["question_id"] for answer in pending}
                response = http.post(f"{prefix}/answers", json={"answers": pending, "next": True})
                if response.status_code != 200:  # a 5xx may have been stored or not: resend the same answers
                    self.failures.append(Failure.of(sent_at, response))
                    item = None if response.status_code < 500 else item
                    pending = None if response.status_code < 500 else pending
                    time.sleep(0.05)
                    continue
                body = response.json()
                decided_meanwhile = set(body["already_decided"])
                self.acknowledged |= {a["question_id"] for a in pending} - decided_meanwhile
                self.submissions += 1
                pending, item = None, (body["next"] or {}).get("item")
            except httpx.HTTPError as error:  # the server is down: keep the answers, resend them
                self.failures.append(Failure(sent_at, time.monotonic(), repr(error)))
                http.close()
                http = httpx.Client(headers=headers, timeout=30)
                time.sleep(0.05)
        http.close()


@dataclass
class Crowd:
    """Annotators in threads against a server."""

    annotators: list[Annotator]
    stop: threading.Event = field(default_factory=threading.Event)
    threads: list[threading.Thread] = field(default_factory=list)

    def start(self) -> None:
        self.threads = [
            threading.Thread(target=a.run, args=(self.stop,), daemon=True) for a in self.annotators
        ]
        for thread in self.threads:
            thread.start()

    def submissions(self) -> int:
        return sum(annotator.submissions for annotator in self.annotators)

    def wait_for_more(self, count: int) -> None:
        target = self.submissions() + count
        wait_for(lambda: self.submissions() >= target, f"{count} more acknowledged submissions")

    def finish(self) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join(timeout=LIVENESS_S)


def labelling_database(database_url: str) -> tuple[int, list[tuple[int, str]]]:
    """A competition with 180 open images (six pairs of four classifiers) and annotators with tokens."""
    engine = create_db_engine(database_url)
    try:
        with create_sessionmaker(engine)() as session:
            competition = create_competition(db_session=session, spec=CompetitionCreate(name="faults"))
            labelling_competition(session, competition, classifiers=4, images_per_pair=competition.k)
            annotators = users_with_tokens(session, "crowd", ANNOTATORS)
            session.commit()
            return competition.id, annotators
    finally:
        engine.dispose()


def check_votes(database_url: str, crowd: Crowd, user_ids: list[int]) -> int:
    """Every acknowledged answer is stored once, nothing unsent is stored, every tally matches its votes."""
    engine = create_db_engine(database_url)
    try:
        with create_sessionmaker(engine)() as session:
            for user_id, annotator in zip(user_ids, crowd.annotators, strict=True):
                stored = session.scalars(select(Vote.question_id).where(Vote.user_id == user_id)).all()
                assert len(stored) == len(set(stored)), "a vote is stored twice"
                assert annotator.acknowledged <= set(stored), "an acknowledged vote is lost"
                assert set(stored) <= annotator.sent, "a vote nobody sent is stored"
            tallies = session.execute(
                select(Question.id, Question.yes_votes, Question.no_votes, func.count(Vote.id))
                .outerjoin(Vote, Vote.question_id == Question.id)
                .group_by(Question.id, Question.yes_votes, Question.no_votes)
            ).all()
            assert all(yes + no == votes for _, yes, no, votes in tallies), "a tally disagrees with its votes"
            return session.scalar(select(func.count()).select_from(Vote))
    finally:
        engine.dispose()


def test_a_server_killed_mid_labelling_loses_no_acknowledged_vote(fresh_database_url, tmp_path):
    competition_id, annotators = labelling_database(fresh_database_url)
    server = Server(fresh_database_url, tmp_path / "data")
    crowd = Crowd([Annotator(server.url, token, competition_id) for _, token in annotators])
    server.start()
    try:
        crowd.start()
        crowd.wait_for_more(40)
        server.kill()  # SIGKILL while answers are in flight
        wait_for(
            lambda: any(a.failures for a in crowd.annotators), "a request to fail against the dead server"
        )
        server.start()
        crowd.wait_for_more(40)
        server.kill()
        server.start()
        crowd.wait_for_more(40)
    finally:
        crowd.finish()
        server.stop()
    stored = check_votes(fresh_database_url, crowd, [user_id for user_id, _ in annotators])
    acknowledged = sum(len(a.acknowledged) for a in crowd.annotators)
    assert stored >= acknowledged >= 100


def terminate_backends(database_url: str, wait_s: float = 0) -> int:
    """Terminate every connection to the database (not the server), waiting up to wait_s for each to end;
    how many were terminated."""
    url = make_url(database_url)
    with psycopg.connect(
        host=url.host, port=url.port or 5432, user=url.username, dbname="postgres", autocommit=True
    ) as admin:
        return len(
            admin.execute(
                "SELECT pg_terminate_backend(pid, %s) FROM pg_stat_activity"
                " WHERE datname = %s AND pid <> pg_backend_pid()",
                (int(wait_s * 1000), url.database),
            ).fetchall()
        )


def test_a_request_after_postgres_closed_the_idle_connections_is_answered(
    fresh_database_url, tmp_path, backend
):
    """The pool hands out no connection that the server closed while it sat idle: each is replaced at
    checkout (app.db.engine._refuse_closed_connection), so the next request is answered, not failed with
    503."""
    if backend != "postgres":
        pytest.skip("connections to drop are Postgres's")
    settings = settings_for(tmp_path, fresh_database_url)
    with TestClient(create_app(settings)) as client:
        assert client.get("/healthz").status_code == 200  # a connection now waits in the pool
        for _ in range(2):
            assert terminate_backends(fresh_database_url, wait_s=10) >= 1
            assert [client.get("/healthz").status_code for _ in range(3)] == [200, 200, 200]


def test_the_service_reconnects_after_postgres_drops_its_connections(fresh_database_url, tmp_path, backend):
    if backend != "postgres":
        pytest.skip("connections to drop are Postgres's")
    competition_id, annotators = labelling_database(fresh_database_url)
    server = Server(fresh_database_url, tmp_path / "data")
    crowd = Crowd([Annotator(server.url, token, competition_id) for _, token in annotators])
    server.start()
    terminated = []
    try:
        crowd.start()
        crowd.wait_for_more(30)
        for _ in range(3):
            terminated.append(terminate_backends(fresh_database_url))
            crowd.wait_for_more(30)  # the service goes on
        assert server.healthy()
    finally:
        crowd.finish()
        server.stop()
    assert all(count >= 1 for count in terminated), terminated
    failed = [failure.what for annotator in crowd.annotators for failure in annotator.failures]
    assert all(failure.startswith("503") for failure in failed), failed  # retryable, the connection kept
    assert len(failed) <= ANNOTATORS * len(terminated), failed  # at most the requests in flight
    check_votes(fresh_database_url, crowd, [user_id for user_id, _ in annotators])


POSTGRES_BINARIES = sorted(Path("/usr/lib/postgresql").glob("*/bin/pg_ctl"), key=lambda p: int(p.parts[-3]))


class PrivatePostgres:
    """A Postgres cluster of the test's own in a temporary folder, so it can be stopped and restarted
    without disturbing the shared server. Its programs run as the postgres user when we are root (Postgres
    refuses to run as root)."""

    def __init__(self, bin_dir: Path):
        self.bin_dir = bin_dir
        self.root = Path(tempfile.mkdtemp(prefix="mad-pg-"))
        if os.geteuid() == 0:
            shutil.chown(self.root, "postgres", "postgres")
        self.data = self.root / "data"
        self.port = free_port()
        self._run("initdb", "-D", str(self.data), "--auth=trust", "--username=postgres", "--no-sync")
        self.server_url = f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/postgres"

    def _run(self, program: str, *args: str) -> None:
        as_postgres = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
        subprocess.run(
            [*as_postgres, str(self.bin_dir / program), *args], cwd=self.root, check=True, capture_output=True
        )

    def pg_ctl(self, action: str, *args: str) -> None:
        """pg_ctl start, stop or restart, waiting until it is done."""
        options = f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1 -c fsync=off"
        log = str(self.root / "postgres.log")
        self._run("pg_ctl", action, "-D", str(self.data), "-w", "-l", log, "-o", options, *args)

    def create_database(self, name: str) -> str:
        """A new database on the cluster, migrated; its URL."""
        with psycopg.connect(host="127.0.0.1", port=self.port, user="postgres", autocommit=True) as admin:
            admin.execute(f'CREATE DATABASE "{name}"')
        url = make_url(self.server_url).set(database=name).render_as_string(hide_password=False)
        upgrade(url)
        return url

    def remove(self) -> None:
        """Stop the cluster at once and delete its files."""
        try:
            self._run("pg_ctl", "stop", "-D", str(self.data), "-m", "immediate")
        except subprocess.CalledProcessError:
            pass  # not running
        shutil.rmtree(self.root, ignore_errors=True)


@pytest.fixture
def private_postgres():
    """A running Postgres cluster of this test's own; skipped where the Postgres programs are absent."""
    if not POSTGRES_BINARIES:
        pytest.skip("no Postgres programs under /usr/lib/postgresql")
    cluster = PrivatePostgres(POSTGRES_BINARIES[-1].parent)
    try:
        cluster.pg_ctl("start")
        yield cluster
    finally:
        cluster.remove()


def test_the_service_goes_on_after_postgres_is_stopped_and_restarted_under_load(private_postgres, tmp_path):
    database_url = private_postgres.create_database("mad")
    competition_id, annotators = labelling_database(database_url)
    server = Server(database_url, tmp_path / "data")
    crowd = Crowd([Annotator(server.url, token, competition_id) for _, token in annotators])
    server.start()
    outages = []
    try:
        crowd.start()
        crowd.wait_for_more(30)
        for stop, start in ((("stop", "-m", "fast"), ("start",)), (("restart", "-m", "fast"), None)):
            down_at = time.monotonic()
            private_postgres.pg_ctl(*stop)
            if start is not None:  # down for a while: annotators must be told to retry, clearly
                failed_before = sum(len(a.failures) for a in crowd.annotators)
                wait_for(
                    lambda n=failed_before: sum(len(a.failures) for a in crowd.annotators) >= n + ANNOTATORS,
                    "requests to fail while Postgres is down",
                )
                private_postgres.pg_ctl(*start)
            outages.append((down_at, time.monotonic()))
            crowd.wait_for_more(30)  # the service reconnects and goes on
        assert server.healthy()
    finally:
        crowd.finish()
        server.stop()
    failures = [failure for annotator in crowd.annotators for failure in annotator.failures]
    assert failures, "no request failed while Postgres was down"
    for failure in failures:  # each overlaps an outage: none sent after Postgres was back
        assert failure.what.startswith("503") and "database did not answer" in failure.what, failure
        assert any(failure.sent_at <= back and failure.failed_at >= down for down, back in outages), failure
    check_votes(database_url, crowd, [user_id for user_id, _ in annotators])


class DiskFull:
    """A stand-in for the os module whose fdopen gives files that take half of a write, then fail ENOSPC
    (after `room` files written whole)."""

    def __init__(self, room: int = 0):
        self.room = room

    def __getattr__(self, name):
        return getattr(os, name)

    def fdopen(self, descriptor, mode="r", *args, **kwargs):
        file = os.fdopen(descriptor, mode, *args, **kwargs)
        if self.room > 0:
            self.room -= 1
            return file
        return _FillingFile(file)


class _FillingFile:
    def __init__(self, file):
        self.file = file

    def __getattr__(self, name):
        return getattr(self.file, name)

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        self.file.close()

    def write(self, data) -> int:
        self.file.write(bytes(data)[: max(1, len(data) // 2)])
        raise OSError(errno.ENOSPC, "No space left on device")


def test_a_shard_write_that_fills_the_disk_leaves_no_file_and_the_job_completes_on_retry(
    client, db_session, competition, settings, monkeypatch
):
    n = 5
    claim = claimed_shard(client, db_session, competition, n)
    store = PredictionStore(settings.blob_store)
    older = _predictions(n, label=1)
    store.write_shard(claim.classifier.id, 0, older)  # a copy from an earlier run, replaced whole or kept
    url, lease = claim.url, claim.lease

    monkeypatch.setattr(local_store, "os", DiskFull())
    full = client.post(url, data=lease, files={"predictions": ("shard.npz", shard(n))}, headers=claim.worker)
    assert full.status_code == 503, full.text
    assert "No space left on device" in full.json()["detail"] and "try again" in full.json()["detail"]
    assert db_session.get(Job, claim.job.id, populate_existing=True).status == JobStatus.running
    assert [p.name for p in (settings.data_dir / "predictions" / str(claim.classifier.id)).iterdir()] == [
        "shard-0000000000-0000000005.npz"
    ]
    assert store.read(claim.classifier.id, n).top1.tolist() == older.top1.tolist()  # the old file, whole

    monkeypatch.undo()
    done = client.post(url, data=lease, files={"predictions": ("shard.npz", shard(n))}, headers=claim.worker)
    assert done.status_code == 200 and done.json()["status"] == "done"
    assert store.read(claim.classifier.id, n).top1.tolist() == [3] * n
    assert [p.name for p in (settings.data_dir / "predictions" / str(claim.classifier.id)).iterdir()] == [
        "shard-0000000000-0000000005.npz"
    ]


def _predictions(n: int, label: int):
    predictions = prediction_store.Predictions.empty(n)
    predictions.top1[:] = label
    predictions.prob[:] = 0.5
    return predictions


@pytest.mark.parametrize(
    "room",
    [0, 1, 2, 3],
    ids=["first-image-fails", "first-thumbnail-fails", "second-image-fails", "second-thumbnail-fails"],
)
def test_an_image_upload_that_fills_the_disk_stores_nothing(
    client, db_session, competition, admin_headers, settings, monkeypatch, room
):
    """The disk fills after `room` files: those written for earlier images go with their rows."""
    monkeypatch.setattr(local_store, "os", DiskFull(room=room))
    files = [("files", (f"{i}.png", image_bytes(100 + i), "image/png")) for i in range(3)]
    response = client.post(
        f"/api/v1/competitions/{competition.id}/images", files=files, headers=admin_headers
    )
    assert response.status_code == 503 and "No space left on device" in response.json()["detail"]
    assert db_session.scalar(select(func.count()).select_from(Image)) == 0
    assert not [p for p in settings.data_dir.rglob("*") if p.is_file()]
    monkeypatch.undo()
    again = client.post(f"/api/v1/competitions/{competition.id}/images", files=files, headers=admin_headers)
    assert again.status_code == 201 and len(again.json()["added"]) == 3
    assert len([p for p in settings.data_dir.rglob("*") if p.is_file()]) == 6  # images and thumbnails


def test_a_cli_import_that_fills_the_disk_keeps_the_batches_it_committed(
    fresh_database_url, tmp_path, monkeypatch
):
    """Batches of two: the second batch's second image fails; the first batch stays, rows and files."""
    cli_env = {"MAD_DATABASE_URL": fresh_database_url, "MAD_DATA_DIR": str(tmp_path / "data")}
    folder = tmp_path / "corpus"
    folder.mkdir()
    for index in range(6):
        (folder / f"{index}.png").write_bytes(image_bytes(300 + index))
    assert invoke(cli_env, "competitions", "create", "full-disk").exit_code == 0
    monkeypatch.setattr(image_service, "IMPORT_BATCH_SIZE", 2)
    monkeypatch.setattr(local_store, "os", DiskFull(room=6))  # batch one's 4 files, batch two's first 2
    command = ["images", "import", str(folder), "-c", "full-disk", "--processes", "1"]  # room: per process
    result = runner.invoke(cli, command, env=cli_env)
    assert result.exit_code == 1 and "No space left on device" in result.output, result.output
    url, data = cli_env["MAD_DATABASE_URL"], tmp_path / "data"
    stored = {row[0] for row in query(url, select(Image.sha256))}
    assert len(stored) == 2
    files = sorted(p for p in data.rglob("*") if p.is_file() and p.suffix in (".png", ".webp"))
    assert sorted({p.stem for p in files}) == sorted(stored) and len(files) == 4
    assert not [p for p in data.rglob(".tmp-*")]
    monkeypatch.undo()
    result = invoke(cli_env, "images", "import", str(folder), "-c", "full-disk")
    assert (
        result.exit_code == 0 and "4 added, 0 duplicates" in result.output and "2 skipped" in result.output
    ), result.output


def test_a_worker_waits_for_a_service_that_is_down_and_then_does_its_jobs(fresh_database_url, tmp_path):
    settings = settings_for(tmp_path, fresh_database_url)
    engine = create_db_engine(settings.sqlalchemy_url)
    with create_sessionmaker(engine)() as session:
        competition = digits_competition(session)
        hashes = corpus(session, settings, competition, 30)
        session.commit()
        for seed, name in enumerate(("left", "right")):
            labels = np.random.default_rng(seed).integers(0, 10, len(hashes))
            register(session, settings, competition, tmp_path, name, hashes, labels, seed=seed)
        worker = users_service.create_user(
            db_session=session, username="early", role=Role.worker, password=None
        )
        token = users_service.create_api_token(db_session=session, user=worker, name="t")
        session.commit()
    server = Server(fresh_database_url, settings.data_dir)
    waiting, finished = threading.Event(), []

    def report(text: str, done: int, total: int) -> None:
        if "unavailable" in text:
            waiting.set()

    options = WorkerOptions(device="cpu", loader_workers=0, cache_dir=tmp_path / "cache")
    thread = threading.Thread(
        target=lambda: finished.append(
            run_worker(url=server.url, token=token, options=options, exit_when_idle=True, report=report)
        ),
        daemon=True,
    )
    thread.start()
    try:
        wait_for(lambda: waiting.is_set() or not thread.is_alive(), "the worker to find the service down")
        assert waiting.is_set(), "the worker gave up on a service that was down"
        server.start()
        thread.join(LIVENESS_S)
    finally:
        server.stop()
    assert finished == [1]  # the pair's select job
    with create_sessionmaker(engine)() as session:
        assert session.scalars(select(Job.status)).all() == [JobStatus.done]
        assert session.scalar(select(func.count()).select_from(PairSubset)) == 1
    engine.dispose()
