"""Benchmark labelling: 50 concurrent annotators against uvicorn on Postgres with 100,000 open questions.

Creates its own database (and drops it), fills it in bulk (images by SQL, pairs through the labelling
service: k = 30 selected and 2 reserve images per pair, two questions per image), starts uvicorn, and
runs simulated annotators (asyncio, keep-alive HTTP/1.1) that think for a random time (exponential, mean
`--think-ms`) per question and answer (the hidden truth 90% of the time). Identical think times would march
all 50 in step. Latencies are measured by the clients after a warm-up; the server's CPU time per answer and
the machine's load average are printed too: latency on a shared machine depends on what else runs, CPU per
answer does not.

--flow api (default): for every image, POST …/next leases it and POST …/answers answers it, each timed on
its own, so next-item is always a lease taken from the queue. --flow page does what the labelling page
does: each submit also brings the next image ("next": true, so submit includes a queue lease), and the
page is loaded afresh every --reload-every images, which calls …/next (resuming the image it holds).

Baseline, measured in the same run on the same server before the labelling: the same annotators with the
same think times calling GET /api/v1/me (bearer token checked, account read: the floor of any annotator
request on this machine now). Each latency is also printed as a ratio to the baseline's.

After the labelling warm-up the database is analysed once more, as autovacuum does on a production server
once the votes and assignments tables fill (this machine's Postgres runs with autovacuum off). Without it
the planner keeps the plans it made while those tables were empty: sequential scans of tables that grow by
thousands of rows during the run (--skip-analyze shows it: p99 110-133 ms instead of 40-47 ms, and twice
the Postgres CPU).

Exits with status 1 when any request failed (the errors are printed), and prints null with a warning for a
latency with no sample rather than a number.

    .venv/bin/python benchmarks/labelling.py [--json] [--annotators 50] [--questions 100000]
        [--duration 30] [--baseline-duration 10] [--think-ms 100] [--flow api|page] [--reload-every 10]
        [--server-workers 2] [--skip-analyze] [--backend postgres|sqlite] [--sampling uniform|active]

--sampling active runs the same load on a competition under Active MAD (issue 24): the policy runs once
before the load, then after the responses that bring its refresh due, as the service does;
policy_reruns_measured counts the reruns seen while measuring (its refreshed_at, polled every 0.2 s).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import shutil
import sys
import tempfile
import time
import uuid
from pathlib import Path

import numpy as np
import psycopg
from sqlalchemy import make_url

REPOSITORY = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPOSITORY))

from app.competitions.models import Sampling  # noqa: E402
from app.db.engine import create_db_engine, create_sessionmaker  # noqa: E402
from app.labelling.active_sampling import policy  # noqa: E402
from app.migrate import upgrade  # noqa: E402
from app.users import service as users_service  # noqa: E402
from app.users.models import Role  # noqa: E402
from benchmarks.local_server import free_port, start_uvicorn, stop_uvicorn  # noqa: E402
from benchmarks.open_questions import analyze, open_questions_competition  # noqa: E402

POSTGRES_URL = os.environ.get("MAD_TEST_POSTGRES_URL", "postgresql+psycopg://root@127.0.0.1:5432/postgres")
TRUTH_RATE = 0.9
SECRET_KEY = "benchmark-secret-key-" + "x" * 32
BASELINE_WARMUP_S = 2
RECONNECT_EVERY = 20
"""Requests per connection. Browsers and proxies recycle connections; with one connection for life per
annotator, uvicorn's shared accept queue put 43 of the 50 on one of two workers."""


class Database:
    """A database of its own: a new Postgres database (dropped at the end) or an SQLite file."""

    def __init__(self, backend: str, workdir: Path):
        self.backend = backend
        self.name = f"mad_bench_{uuid.uuid4().hex[:12]}"
        if backend == "sqlite":
            self.url = f"sqlite:///{workdir / 'bench.sqlite3'}"
            return
        server = make_url(POSTGRES_URL)
        self.admin = dict(
            host=server.host, port=server.port or 5432, user=server.username, dbname=server.database
        )
        with psycopg.connect(**self.admin, autocommit=True) as admin:
            admin.execute(f'CREATE DATABASE "{self.name}"')
        self.url = server.set(database=self.name).render_as_string(hide_password=False)

    def analyze(self) -> None:
        """Refresh the planner's statistics, as autovacuum does on a production server once labelling has
        filled the votes and assignments tables (this machine's Postgres runs without autovacuum)."""
        engine = create_db_engine(self.url)
        analyze(engine)
        engine.dispose()

    def drop(self) -> None:
        """Remove the Postgres database."""
        if self.backend == "postgres":
            with psycopg.connect(**self.admin, autocommit=True) as admin:
                admin.execute(f'DROP DATABASE IF EXISTS "{self.name}" WITH (FORCE)')


def fill(
    url: str, questions: int, annotators: int, seed: int, sampling: Sampling
) -> tuple[int, list[str], dict[int, bool], float]:
    """The open questions (benchmarks/open_questions.py) under `sampling` (active: the policy has run once,
    as switching to it does) and annotators with tokens; returns the competition id, the tokens, each
    question's hidden truth, and the seconds it took."""
    started = time.perf_counter()
    engine = create_db_engine(url)
    with create_sessionmaker(engine)() as db_session:
        competition, truth = open_questions_competition(db_session, "bench", questions, seed)
        policy.set_sampling(db_session, competition, sampling)
        tokens = []
        for index in range(annotators):
            user = users_service.create_user(
                db_session=db_session, username=f"bench-{index}", role=Role.annotator, password="long enough"
            )
            tokens.append(users_service.create_api_token(db_session=db_session, user=user, name="bench"))
        db_session.commit()
        competition_id = competition.id
    analyze(engine)
    engine.dispose()
    return competition_id, tokens, truth, time.perf_counter() - started


class Server:
    """uvicorn serving the app in subprocesses."""

    def __init__(self, url: str, data_dir: Path, workers: int):
        self.port = free_port()
        environment = {
            **os.environ,
            "MAD_DATABASE_URL": url,
            "MAD_DATA_DIR": str(data_dir),
            "MAD_ENV": "test",
            "MAD_SECRET_KEY": SECRET_KEY,
        }
        self.process = start_uvicorn(
            environment, self.port, "--workers", str(workers), "--log-level", "warning"
        )

    def stop(self) -> None:
        """Stop uvicorn."""
        stop_uvicorn(self.process)


class Annotator:
    """One simulated annotator over one keep-alive HTTP/1.1 connection (asyncio, so that 50 of them cost
    the machine little next to the server they measure)."""

    def __init__(
        self,
        port: int,
        competition_id: int,
        token: str,
        truth: dict[int, bool],
        think_s: float,
        flow: str,
        reload_every: int,
        seed: int,
    ):
        self.port = port
        self.flow = flow
        self.reload_every = reload_every
        self.prefix = f"/api/v1/competitions/{competition_id}/labelling"
        self.token = token
        self.truth = truth
        self.think_s = think_s
        self.random = random.Random(seed)
        self.baseline_ms: list[float] = []
        self.next_ms: list[float] = []
        self.submit_ms: list[float] = []
        self.answers = 0
        self.errors: list[str] = []
        self.connection: tuple[asyncio.StreamReader, asyncio.StreamWriter] | None = None
        self.requests = 0

    async def request(self, method: str, path: str, body: dict | None, latencies: list[float], measuring):
        """Send a request (on a new connection every RECONNECT_EVERY requests), timing it when measuring;
        the JSON answer, or RuntimeError unless 200."""
        payload = b"" if body is None else json.dumps(body).encode()
        head = (
            f"{method} {path} HTTP/1.1\r\nHost: bench\r\nAuthorization: Bearer {self.token}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(payload)}\r\n\r\n"
        )
        started = time.perf_counter()
        if self.requests % RECONNECT_EVERY == 0:
            self.close()
            self.connection = await asyncio.open_connection("127.0.0.1", self.port)
        self.requests += 1
        reader, writer = self.connection
        writer.write(head.encode() + payload)
        status = await reader.readline()
        length = 0
        while (line := await reader.readline()) not in (b"\r\n", b""):
            if line.lower().startswith(b"content-length:"):
                length = int(line.split(b":", 1)[1])
        data = await reader.readexactly(length)
        elapsed_ms = (time.perf_counter() - started) * 1000
        if not status.startswith(b"HTTP/1.1 200"):
            raise RuntimeError(f"{method} {path}: {status!r} {data[:200]!r}")
        if measuring.is_set():
            latencies.append(elapsed_ms)
        return json.loads(data)

    def close(self) -> None:
        """Close the connection, if open."""
        if self.connection is not None:
            self.connection[1].close()

    async def think(self, questions: int) -> list[float]:
        """Think about each question for a random time (exponential, mean think_s); the seconds taken."""
        thinking = [self.random.expovariate(1 / self.think_s) for _ in range(questions)]
        await asyncio.sleep(sum(thinking))
        return thinking

    async def run_baseline(self, stop, measuring) -> None:
        """Think as for an image of two questions, then GET /api/v1/me; until told to stop."""
        try:
            while not stop.is_set():
                await self.think(2)
                await self.request("GET", "/api/v1/me", None, self.baseline_ms, measuring)
        except Exception as error:  # noqa: BLE001 - reported in the results
            self.errors.append(repr(error))

    async def run(self, stop, measuring) -> None:
        """Label until told to stop."""
        try:
            following, images = None, 0
            while not stop.is_set():
                reload = self.flow == "page" and images % self.reload_every == 0
                if following is None or following["item"] is None or self.flow == "api" or reload:
                    following = await self.request(
                        "POST", f"{self.prefix}/next", None, self.next_ms, measuring
                    )
                if following["item"] is None:
                    await asyncio.sleep(0.05)
                    continue
                questions = following["item"]["questions"]
                thinking = await self.think(len(questions))
                answers = [
                    {
                        "question_id": q["question_id"],
                        "answer": self.truth[q["question_id"]] == (self.random.random() < TRUTH_RATE),
                        "seconds": seconds,
                    }
                    for q, seconds in zip(questions, thinking, strict=True)
                ]
                body = {"answers": answers, "next": self.flow == "page"}
                result = await self.request("POST", f"{self.prefix}/answers", body, self.submit_ms, measuring)
                following, images = result["next"], images + 1
                if measuring.is_set():
                    self.answers += result["recorded"]
        except Exception as error:  # noqa: BLE001 - reported in the results
            self.errors.append(repr(error))
        finally:
            self.close()


def cpu_seconds(root_pid: int) -> float:
    """CPU seconds (user + system) used so far by a process and its children (Linux /proc)."""
    ticks = os.sysconf("SC_CLK_TCK")
    total = 0.0
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(entry.name) == root_pid or int(fields[1]) == root_pid:
            total += (int(fields[11]) + int(fields[12])) / ticks
    return total


class PolicyWatch:
    """The policy's reruns seen during the labelling: each new refreshed_at of the competition's policy row,
    polled every POLL_S, with the (perf_counter) time it was seen."""

    POLL_S = 0.2

    def __init__(self, url: str, competition_id: int):
        self.engine = create_db_engine(url)
        self.competition_id = competition_id
        self.seen: list[float] = []

    async def watch(self, stop: asyncio.Event) -> None:
        """Poll until stop is set."""
        last = await asyncio.to_thread(self.refreshed_at)
        while not stop.is_set():
            await asyncio.sleep(self.POLL_S)
            now = await asyncio.to_thread(self.refreshed_at)
            if now != last:
                self.seen.append(time.perf_counter())
                last = now

    def refreshed_at(self):
        """The policy row's refreshed_at (None before the first run)."""
        with self.engine.connect() as connection:
            return connection.exec_driver_sql(
                f"SELECT refreshed_at FROM active_policies WHERE competition_id = {int(self.competition_id)}"
            ).scalar()

    def between(self, start: float, end: float) -> int:
        """Reruns seen in [start, end)."""
        return sum(start <= at < end for at in self.seen)


async def phase(
    tasks_of, warmup_s: float, duration_s: float, server_pid: int, after_warmup=None
) -> tuple[float, float, float]:
    """Start tasks_of(stop, measuring), measure for duration_s after warmup_s (and after_warmup(), run in a
    thread, if given), stop them; the seconds measured, the server's CPU seconds in that time, and when
    measuring started (perf_counter)."""
    stop, measuring = asyncio.Event(), asyncio.Event()
    tasks = [asyncio.create_task(task) for task in tasks_of(stop, measuring)]
    await asyncio.sleep(warmup_s)
    if after_warmup is not None:
        await asyncio.to_thread(after_warmup)
    measuring.set()
    started, cpu_started = time.perf_counter(), cpu_seconds(server_pid)
    await asyncio.sleep(duration_s)
    measuring.clear()
    elapsed, cpu = time.perf_counter() - started, cpu_seconds(server_pid) - cpu_started
    stop.set()
    await asyncio.gather(*tasks)
    return elapsed, cpu, started


async def load(
    crowd: list[Annotator], args: argparse.Namespace, server_pid: int, database: Database, watch: PolicyWatch
) -> tuple[float, float, int]:
    """The baseline, then the labelling; the labelling's seconds measured, server CPU seconds, and the
    policy's reruns seen while measuring."""
    await phase(
        lambda stop, measuring: [a.run_baseline(stop, measuring) for a in crowd],
        BASELINE_WARMUP_S,
        args.baseline_duration,
        server_pid,
    )
    watching = asyncio.Event()
    watcher = asyncio.create_task(watch.watch(watching))
    elapsed, cpu, started = await phase(
        lambda stop, measuring: [a.run(stop, measuring) for a in crowd],
        args.warmup,
        args.duration,
        server_pid,
        after_warmup=None if args.skip_analyze else database.analyze,
    )
    watching.set()
    await watcher
    return elapsed, cpu, watch.between(started, started + elapsed)


def percentile(values: list[float], q: float, name: str, warnings: list[str]) -> float | None:
    """The q-th percentile (0-100) of the values in ms, rounded; None with a warning when there are none."""
    if not values:
        warnings.append(f"no {name} request was measured: its latency is unknown")
        return None
    return round(float(np.percentile(values, q)), 2)


def ratio(value: float | None, baseline: float | None) -> float | None:
    """value / baseline, rounded; None when either is unknown."""
    return None if value is None or not baseline else round(value / baseline, 2)


def run(args: argparse.Namespace) -> dict:
    """Set up, load, measure, tear down."""
    workdir = Path(tempfile.mkdtemp(prefix="mad-bench-"))
    database = Database(args.backend, workdir)
    server = None
    try:
        upgrade(database.url)
        print(f"filling {args.questions:,} open questions (minutes at 100,000) …", file=sys.stderr)
        competition_id, tokens, truth, setup_s = fill(
            database.url, args.questions, args.annotators, args.seed, Sampling(args.sampling)
        )
        print(f"filled in {setup_s:.0f} s; measuring the baseline, then the labelling …", file=sys.stderr)
        server = Server(database.url, workdir / "data", args.server_workers)
        crowd = [
            Annotator(
                server.port,
                competition_id,
                token,
                truth,
                args.think_ms / 1000,
                args.flow,
                args.reload_every,
                seed,
            )
            for seed, token in enumerate(tokens)
        ]
        watch = PolicyWatch(database.url, competition_id)
        elapsed, server_cpu_s, reruns = asyncio.run(load(crowd, args, server.process.pid, database, watch))
        watch.engine.dispose()
        answers = sum(annotator.answers for annotator in crowd)
        samples = {
            name: [value for annotator in crowd for value in getattr(annotator, f"{name}_ms")]
            for name in ("baseline", "next", "submit")
        }
        warnings: list[str] = []
        latency = {
            f"{name}_p{q}_ms": percentile(values, q, name, warnings)
            for name, values in samples.items()
            for q in (50, 99)
        }
        return {
            "backend": args.backend,
            "annotators": args.annotators,
            "open_questions": len(truth),
            "think_ms_per_question": args.think_ms,
            "flow": args.flow,
            "sampling": args.sampling,
            "server_workers": args.server_workers,
            "setup_s": round(setup_s, 1),
            "duration_s": round(elapsed, 1),
            "answers_per_s": round(answers / elapsed, 1),
            "baseline": "GET /api/v1/me, same annotators and think times, measured first on the same server",
            "baseline_requests": len(samples["baseline"]),
            "baseline_p50_ms": latency["baseline_p50_ms"],
            "baseline_p99_ms": latency["baseline_p99_ms"],
            "next_requests": len(samples["next"]),
            "next_p50_ms": latency["next_p50_ms"],
            "next_p99_ms": latency["next_p99_ms"],
            "next_p99_vs_baseline": ratio(latency["next_p99_ms"], latency["baseline_p99_ms"]),
            "submit_requests": len(samples["submit"]),
            "submit_p50_ms": latency["submit_p50_ms"],
            "submit_p99_ms": latency["submit_p99_ms"],
            "submit_p99_vs_baseline": ratio(latency["submit_p99_ms"], latency["baseline_p99_ms"]),
            "server_cpu_ms_per_answer": round(1000 * server_cpu_s / max(answers, 1), 2),
            "policy_reruns_measured": reruns,
            "load_average_1min": round(os.getloadavg()[0], 1),
            "warnings": warnings,
            "errors": [error for annotator in crowd for error in annotator.errors],
        }
    finally:
        if server is not None:
            server.stop()
        database.drop()
        shutil.rmtree(workdir, ignore_errors=True)


def main() -> None:
    """Parse arguments, run, print."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    parser.add_argument("--annotators", type=int, default=50)
    parser.add_argument("--questions", type=int, default=100_000, help="open questions to create")
    parser.add_argument("--duration", type=float, default=30, help="seconds measured")
    parser.add_argument("--warmup", type=float, default=5, help="seconds before measuring")
    parser.add_argument("--think-ms", type=float, default=100, help="an annotator's mean time per question")
    parser.add_argument(
        "--baseline-duration",
        type=float,
        default=10,
        help="seconds measured of the baseline (GET /api/v1/me)",
    )
    parser.add_argument(
        "--flow",
        choices=("api", "page"),
        default="api",
        help="next and submit apart for every image (api), or submit brings the next image (page)",
    )
    parser.add_argument(
        "--reload-every", type=int, default=10, help="page flow: images between page loads (each calls next)"
    )
    parser.add_argument("--server-workers", type=int, default=2, help="uvicorn worker processes")
    parser.add_argument(
        "--skip-analyze",
        action="store_true",
        help="do not analyse after the warm-up (as a server without autovacuum would run)",
    )
    parser.add_argument("--backend", choices=("postgres", "sqlite"), default="postgres")
    parser.add_argument(
        "--sampling",
        choices=[sampling.value for sampling in Sampling],
        default=Sampling.uniform.value,
        help="the competition's labelling order: uniform (the paper's), or active (the policy's, refreshed)",
    )
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    if args.reload_every < 1:
        parser.error("--reload-every must be at least 1")
    results = run(args)
    for warning in results["warnings"]:
        print(f"warning: {warning}", file=sys.stderr)
    if args.json:
        print(json.dumps(results))
    else:
        for key, value in results.items():
            print(f"{key:>24}: {value}")
    if results["errors"]:
        print(f"{len(results['errors'])} request(s) failed: the figures are not valid", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
