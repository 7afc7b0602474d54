"""Soak: 50 simulated annotators and 2 workers against uvicorn on Postgres for a given number of minutes.

Creates its own Postgres database (and drops it at the end), with two competitions:

- "soak-labelling": pair selections stored through the labelling service (k = 30 selected and 2 reserve
  images per pair, two questions per image, images by SQL, no files), enough open questions that the
  annotators never run dry. Annotators (asyncio, keep-alive HTTP/1.1 with httpx) take the next image,
  think, answer (the hidden truth 90% of the time) and get the next image in the same request, as the
  labelling page does.
- "soak-images": real PNG images and two tiny timm classifiers with weight files. Two `mad worker`
  processes predict them (shards of 50) and select their pair over HTTP with a worker token, while an
  admin uploads a batch of new images through the API every --feed-s seconds (new shards to predict).

Before the workers start, one annotator alone answers --baseline-requests requests without pausing: the
baseline. At the end it prints votes sent (counted by the annotators: answers in submissions the server
acknowledged with 200, less those it said were decided meanwhile) against votes recorded (rows in the
votes table), errors (annotators' and the admin's failed or non-2xx requests, the server's non-2xx answers
to the workers from its access log, jobs that failed or were retried, crashed workers), the latency
percentiles of every annotator request under load and p99 over the baseline's p99, and what the workers
did. --json prints the same as one JSON object. The exit status is 1 when votes sent and recorded
differ, any error happened, or the workers finished no job.

    .venv/bin/python benchmarks/soak.py --minutes 2 [--json] [--annotators 50] [--workers 2]
        [--questions 30000] [--think-ms 300] [--server-workers 2] [--feed-s 10] [--baseline-requests 300]
        [--seed 0]
"""

from __future__ import annotations

import argparse
import asyncio
import io
import json
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import numpy as np
import psycopg
from PIL import Image as PILImage
from sqlalchemy import func, make_url, select

REPOSITORY = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPOSITORY))

from app.classifiers import service as classifiers_service  # noqa: E402
from app.competitions.schemas import CompetitionCreate  # noqa: E402
from app.competitions.service import create_competition  # noqa: E402
from app.db.engine import create_db_engine, create_sessionmaker  # noqa: E402
from app.images.service import ImageLimits, import_entries  # noqa: E402
from app.images.sources import Candidate  # noqa: E402
from app.images.store import ImageStore  # noqa: E402
from app.jobs.enums import JobKind, JobStatus  # noqa: E402
from app.jobs.lifecycle import enqueue_classifier  # noqa: E402
from app.jobs.models import Job  # noqa: E402
from app.labelling.models import PairSubset, Question, Vote  # noqa: E402
from app.migrate import upgrade  # noqa: E402
from app.settings import Settings  # noqa: E402
from app.users import service as users_service  # noqa: E402
from app.users.models import Role  # noqa: E402
from benchmarks.open_questions import analyze, open_questions_competition  # noqa: E402

POSTGRES_URL = os.environ.get("MAD_TEST_POSTGRES_URL", "postgresql+psycopg://root@127.0.0.1:5432/postgres")
SECRET_KEY = "soak-secret-key-" + "x" * 32
TRUTH_RATE = 0.9
SHARD_SIZE = 50
TINY_ARCHITECTURES = ("test_resnet", "test_efficientnet")
DIGITS = """\
root: digit
classes: ["0", "1", "2", "3", "4", "5", "6", "7", "8", "9"]
children:
  digit: [round, straight]
  round: ["0", "6", "8", "9", "3"]
  straight: ["1", "4", "7", "2", "5"]
"""
ACCESS_LINE = re.compile(r'"[A-Z]+ (?P<path>\S+) HTTP/[\d.]+" (?P<status>\d{3})')
"""A request in uvicorn's access log: "POST /api/v1/jobs/claim HTTP/1.1" 200."""
WORKER_PATHS = ("/api/v1/jobs/", "/api/v1/classifiers/", "/images/")
"""Where workers' requests go (claims, heartbeats, results; weights and predictions; image files)."""


def free_port() -> int:
    """A free TCP port on 127.0.0.1."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Database:
    """A Postgres database of its own, created here and dropped at the end (as tests/conftest.py does)."""

    def __init__(self):
        self.name = f"mad_soak_{uuid.uuid4().hex[:12]}"
        server = make_url(POSTGRES_URL)
        self.admin = dict(
            host=server.host, port=server.port or 5432, user=server.username, dbname=server.database
        )
        with psycopg.connect(**self.admin, autocommit=True) as admin:
            admin.execute(f'CREATE DATABASE "{self.name}"')
        self.url = server.set(database=self.name).render_as_string(hide_password=False)

    def drop(self) -> None:
        """Remove the database, whoever is still connected."""
        with psycopg.connect(**self.admin, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{self.name}" WITH (FORCE)')


def png(rng: np.random.Generator) -> bytes:
    """A small PNG of random pixels."""
    buffer = io.BytesIO()
    PILImage.fromarray(rng.integers(0, 256, (32, 48, 3), dtype=np.uint8), "RGB").save(buffer, format="PNG")
    return buffer.getvalue()


def tiny_weights(path: Path, architecture: str, seed: int) -> Path:
    """Randomly initialised weights of a tiny timm test architecture for ten classes."""
    import safetensors.torch
    import timm
    import torch

    torch.manual_seed(seed)
    safetensors.torch.save_file(timm.create_model(architecture, num_classes=10).state_dict(), str(path))
    return path


def fill(settings: Settings, questions: int, annotators: int, images: int, seed: int, workdir: Path) -> dict:
    """Both competitions, the accounts and their tokens; the hidden truth of every labelling question."""
    started = time.perf_counter()
    rng = np.random.default_rng(seed)
    engine = create_db_engine(settings.sqlalchemy_url)
    with create_sessionmaker(engine)() as db_session:
        labelling, truth = open_questions_competition(db_session, "soak-labelling", questions, seed)

        corpus = create_competition(
            db_session=db_session,
            spec=CompetitionCreate(
                name="soak-images",
                taxonomy="custom",
                taxonomy_source=DIGITS,
                k=10,
                confidence_threshold=0.0,
                max_per_label=1000,
            ),
        )
        with ThreadPoolExecutor(2) as executor:
            import_entries(
                db_session=db_session,
                store=ImageStore(settings.blob_store),
                competition=corpus,
                entries=[Candidate(f"initial-{i}.png", png(rng)) for i in range(images)],
                limits=ImageLimits(settings.max_image_bytes, settings.max_image_pixels, 64),
                executor=executor,
            )
        for index, architecture in enumerate(TINY_ARCHITECTURES):
            weights = tiny_weights(workdir / f"{architecture}.safetensors", architecture, seed + index)
            classifier = classifiers_service.register_timm_weights(
                db_session=db_session,
                settings=settings,
                competition=corpus,
                name=architecture,
                architecture=architecture,
                weights_file=weights,
                weights_filename=weights.name,
            )
            enqueue_classifier(db_session=db_session, settings=settings, classifier=classifier)

        def account(name: str, role: Role) -> tuple[int, str]:
            password = None if role == Role.worker else "soak password"
            user = users_service.create_user(
                db_session=db_session, username=name, role=role, password=password
            )
            return user.id, users_service.create_api_token(db_session=db_session, user=user, name="soak")

        crowd = [account(f"annotator-{index}", Role.annotator) for index in range(annotators)]
        _, admin_token = account("soak-admin", Role.admin)
        _, worker_token = account("soak-worker", Role.worker)
        db_session.commit()
        world = {
            "labelling_id": labelling.id,
            "corpus_id": corpus.id,
            "annotators": crowd,
            "admin_token": admin_token,
            "worker_token": worker_token,
            "truth": truth,
        }
    analyze(engine)
    engine.dispose()
    world["setup_s"] = time.perf_counter() - started
    return world


class Server:
    """uvicorn serving the app in subprocesses, its access log in a file."""

    def __init__(self, settings: Settings, workers: int, log_path: Path):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        environment = {
            **os.environ,
            "MAD_DATABASE_URL": settings.database_url,
            "MAD_DATA_DIR": str(settings.data_dir),
            "MAD_ENV": "test",
            "MAD_SECRET_KEY": SECRET_KEY,
            "MAD_PREDICT_SHARD_SIZE": str(SHARD_SIZE),
        }
        command = [
            sys.executable,
            "-m",
            "uvicorn",
            "--factory",
            "app.main:create_app",
            "--port",
            str(self.port),
        ]
        command += ["--workers", str(workers), "--log-level", "info"]
        self.log_path = log_path
        with log_path.open("wb") as log:
            self.process = subprocess.Popen(
                command, cwd=REPOSITORY, env=environment, stdout=log, stderr=subprocess.STDOUT
            )
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"{self.url}/healthz", timeout=2).status_code == 200:
                    return
            except httpx.TransportError:
                time.sleep(0.2)
        self.stop()
        raise RuntimeError("uvicorn did not start")

    def stop(self) -> None:
        """Stop uvicorn."""
        if self.process.poll() is None:
            self.process.terminate()
            self.process.wait(timeout=60)

    def worker_errors(self) -> list[str]:
        """Every non-2xx answer the server gave to a worker's request, from its access log."""
        errors = []
        for line in self.log_path.read_text(errors="replace").splitlines():
            match = ACCESS_LINE.search(line)
            if match and match["path"].startswith(WORKER_PATHS) and not match["status"].startswith("2"):
                errors.append(f"worker request: {match[0]}")
        return errors


class Workers:
    """`mad worker` processes against the server, each with its own cache dir."""

    def __init__(self, url: str, token: str, count: int, workdir: Path):
        self.processes = []
        self.logs = []
        for index in range(count):
            log = open(workdir / f"worker-{index}.log", "w+b")  # noqa: SIM115 - closed in stop()
            environment = {
                **os.environ,
                "MAD_DATA_DIR": str(workdir / f"worker-{index}"),
                "OMP_NUM_THREADS": "1",
            }
            command = [sys.executable, "-c", "from app.cli.main import app; app()", "worker", "--url", url]
            command += ["--token", token, "--name", f"soak-worker-{index}", "--device", "cpu"]
            command += ["--batch-size", "16", "--loader-workers", "0"]
            self.processes.append(
                subprocess.Popen(
                    command, cwd=REPOSITORY, env=environment, stdout=log, stderr=subprocess.STDOUT
                )
            )
            self.logs.append(log)

    def crashed(self) -> list[str]:
        """The end of the log of every worker that has exited on its own."""
        crashed = []
        for process, log in zip(self.processes, self.logs, strict=True):
            if process.poll() is not None:
                log.seek(0)
                crashed.append(
                    f"worker exited {process.returncode}: {log.read()[-400:].decode(errors='replace')}"
                )
        return crashed

    def stop(self) -> list[str]:
        """Interrupt the workers (their jobs return to the queue); what crashed before."""
        crashed = self.crashed()
        for process in self.processes:
            if process.poll() is None:
                process.send_signal(signal.SIGINT)
        for process in self.processes:
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        for log in self.logs:
            log.close()
        return crashed


class Annotator:
    """One simulated annotator over a keep-alive connection, as the labelling page behaves."""

    def __init__(
        self, client: httpx.AsyncClient, competition_id: int, token: str, truth: dict, think_s: float, seed
    ):
        self.client = client
        self.prefix = f"/api/v1/competitions/{competition_id}/labelling"
        self.headers = {"Authorization": f"Bearer {token}"}
        self.truth = truth
        self.think_s = think_s
        self.random = random.Random(seed)
        self.latencies_ms: dict[str, list[float]] = {"next": [], "answers": []}
        self.votes_sent = 0
        """Answers in submissions acknowledged with 200, less those the server said were decided meanwhile."""
        self.answers_sent = 0
        self.already_decided = 0
        self.errors: list[str] = []

    def requests(self) -> int:
        """Requests answered so far."""
        return sum(len(latencies) for latencies in self.latencies_ms.values()) + len(self.errors)

    async def post(self, path: str, body: dict | None) -> dict | None:
        """POST, timing it; the JSON, or None after recording an error."""
        started = time.perf_counter()
        try:
            response = await self.client.post(f"{self.prefix}/{path}", json=body, headers=self.headers)
        except httpx.HTTPError as error:
            self.errors.append(f"{path}: {error!r}")
            return None
        self.latencies_ms[path].append((time.perf_counter() - started) * 1000)
        if response.status_code != 200:
            self.errors.append(f"{path}: {response.status_code} {response.text[:200]}")
            return None
        return response.json()

    async def run(self, stop: asyncio.Event, requests: int | None = None) -> None:
        """Label until told to stop (or after that many requests)."""
        following = None
        while not stop.is_set() and (requests is None or self.requests() < requests):
            if following is None or following["item"] is None:
                following = await self.post("next", None)
                if following is None or following["item"] is None:
                    await asyncio.sleep(0.2)
                    following = None
                    continue
            questions = following["item"]["questions"]
            await asyncio.sleep(self.random.expovariate(1) * self.think_s * len(questions))
            answers = [
                {
                    "question_id": q["question_id"],
                    "answer": self.truth[q["question_id"]] == (self.random.random() < TRUTH_RATE),
                    "seconds": self.think_s,
                }
                for q in questions
            ]
            result = await self.post("answers", {"answers": answers, "next": True})
            if result is None:
                following = None
                continue
            self.answers_sent += len(answers)
            self.votes_sent += len(answers) - len(result["already_decided"])
            self.already_decided += len(result["already_decided"])
            following = result["next"]


async def feed_images(
    url: str, token: str, competition_id: int, every_s: float, stop: asyncio.Event, seed: int
):
    """An admin uploads 25 new images every every_s seconds (new shards to predict); (uploaded, errors)."""
    rng = np.random.default_rng(seed + 1000)
    uploaded, errors = 0, []
    async with httpx.AsyncClient(
        base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=60
    ) as client:
        while not stop.is_set():
            try:
                await asyncio.wait_for(stop.wait(), timeout=every_s)
                break
            except TimeoutError:
                pass
            files = [("files", (f"fed-{uploaded + i}.png", png(rng), "image/png")) for i in range(25)]
            try:
                response = await client.post(f"/api/v1/competitions/{competition_id}/images", files=files)
                if response.status_code == 201:
                    uploaded += len(response.json()["added"])
                else:
                    errors.append(f"upload: {response.status_code} {response.text[:200]}")
            except httpx.HTTPError as error:
                errors.append(f"upload: {error!r}")
    return uploaded, errors


async def baseline(url: str, world: dict, args: argparse.Namespace) -> Annotator:
    """One annotator alone on the idle service (no workers yet), answering without pause."""
    async with httpx.AsyncClient(base_url=url, timeout=60) as client:
        _, token = world["annotators"][0]
        solo = Annotator(client, world["labelling_id"], token, world["truth"], 0.0, args.seed - 1)
        await solo.run(asyncio.Event(), requests=args.baseline_requests)
    return solo


async def load(
    url: str, world: dict, args: argparse.Namespace
) -> tuple[list[Annotator], int, list[str], float]:
    """Run the annotators and the image feeder for the given minutes."""
    stop = asyncio.Event()
    limits = httpx.Limits(max_connections=args.annotators, max_keepalive_connections=args.annotators)
    async with httpx.AsyncClient(base_url=url, timeout=60, limits=limits) as client:
        crowd = [
            Annotator(
                client, world["labelling_id"], token, world["truth"], args.think_ms / 1000, args.seed + index
            )
            for index, (_, token) in enumerate(world["annotators"])
        ]
        tasks = [asyncio.create_task(annotator.run(stop)) for annotator in crowd]
        feeder = asyncio.create_task(
            feed_images(url, world["admin_token"], world["corpus_id"], args.feed_s, stop, args.seed)
        )
        started = time.perf_counter()
        await asyncio.sleep(args.minutes * 60)
        stop.set()
        await asyncio.gather(*tasks)
        uploaded, feed_errors = await feeder
        elapsed = time.perf_counter() - started
    return crowd, uploaded, feed_errors, elapsed


def percentile(values: list[float], q: float) -> float:
    """The q-th percentile (0-100), 0 when there are none."""
    return round(float(np.percentile(values, q)), 2) if values else 0.0


def outcome(settings: Settings, world: dict) -> dict:
    """What the database holds at the end: votes of the crowd, and the workers' jobs."""
    engine = create_db_engine(settings.sqlalchemy_url)
    try:
        with create_sessionmaker(engine)() as db_session:
            crowd_ids = [user_id for user_id, _ in world["annotators"]]
            recorded = db_session.scalar(
                select(func.count())
                .select_from(Vote)
                .join(Question, Question.id == Vote.question_id)
                .where(Vote.user_id.in_(crowd_ids), Question.competition_id == world["labelling_id"])
            )
            decided = db_session.scalar(
                select(func.count()).where(
                    Question.competition_id == world["labelling_id"], Question.outcome.is_not(None)
                )
            )
            jobs = dict(
                db_session.execute(
                    select(Job.status, func.count())
                    .where(Job.competition_id == world["corpus_id"])
                    .group_by(Job.status)
                ).all()
            )
            predicted = db_session.scalar(
                select(func.coalesce(func.sum(Job.shard_end - Job.shard_start), 0)).where(
                    Job.competition_id == world["corpus_id"],
                    Job.kind == JobKind.predict,
                    Job.status == JobStatus.done,
                )
            )
            pairs = db_session.scalar(
                select(func.count())
                .select_from(PairSubset)
                .where(PairSubset.competition_id == world["corpus_id"])
            )
            failed_jobs = db_session.scalar(  # failed, or failed and requeued, or retried since
                select(func.count()).where(
                    Job.competition_id == world["corpus_id"],
                    (Job.status == JobStatus.failed) | Job.error.is_not(None) | (Job.attempts > 1),
                )
            )
            failures = db_session.scalars(
                select(Job.error)
                .where(Job.competition_id == world["corpus_id"], Job.error.is_not(None))
                .limit(3)
            ).all()
    finally:
        engine.dispose()
    return {
        "votes_recorded": recorded,
        "questions_decided": decided,
        "jobs": {status.value: count for status, count in jobs.items()},
        "images_predicted": int(predicted),
        "pairs_selected": pairs,
        "failed_jobs": failed_jobs,
        "job_errors": [error[-300:] for error in failures],
    }


def run(args: argparse.Namespace) -> dict:
    """Set up, measure the baseline, soak, measure, tear down."""
    workdir = Path(tempfile.mkdtemp(prefix="mad-soak-"))
    database = Database()
    server = workers = None
    try:
        upgrade(database.url)
        settings = Settings(
            env="test",
            data_dir=workdir / "data",
            database_url=database.url,
            secret_key=SECRET_KEY,
            predict_shard_size=SHARD_SIZE,
        )
        world = fill(settings, args.questions, args.annotators, args.images, args.seed, workdir)
        server = Server(settings, args.server_workers, workdir / "server.log")
        solo = asyncio.run(baseline(server.url, world, args))
        workers = Workers(server.url, world["worker_token"], args.workers, workdir)
        crowd, uploaded, feed_errors, elapsed = asyncio.run(load(server.url, world, args))
        crashed = workers.stop()
        workers = None
        server.stop()
        worker_errors = server.worker_errors()
        server = None
        latencies = [
            value for annotator in crowd for values in annotator.latencies_ms.values() for value in values
        ]
        baseline_latencies = [value for values in solo.latencies_ms.values() for value in values]
        stored = outcome(settings, world)
        errors = [error for annotator in [solo, *crowd] for error in annotator.errors]
        errors += feed_errors + crashed + worker_errors
        errors += [f"{stored['failed_jobs']} jobs failed or were retried"] if stored["failed_jobs"] else []
        votes_sent = sum(annotator.votes_sent for annotator in [solo, *crowd])
        p99, baseline_p99 = percentile(latencies, 99), percentile(baseline_latencies, 99)
        return {
            "minutes": round(elapsed / 60, 2),
            "annotators": args.annotators,
            "workers": args.workers,
            "server_workers": args.server_workers,
            "open_questions_at_start": len(world["truth"]),
            "setup_s": round(world["setup_s"], 1),
            "votes_sent": votes_sent,
            "votes_recorded": stored["votes_recorded"],
            "votes_equal": votes_sent == stored["votes_recorded"],
            "answers_sent": sum(annotator.answers_sent for annotator in [solo, *crowd]),
            "answers_already_decided": sum(annotator.already_decided for annotator in [solo, *crowd]),
            "questions_decided": stored["questions_decided"],
            "votes_per_s": round(sum(annotator.votes_sent for annotator in crowd) / elapsed, 1),
            "requests": len(latencies),
            "errors": len(errors),
            "error_examples": errors[:5],
            "p50_ms": percentile(latencies, 50),
            "p90_ms": percentile(latencies, 90),
            "p99_ms": p99,
            "max_ms": percentile(latencies, 100),
            "next_p99_ms": percentile([v for a in crowd for v in a.latencies_ms["next"]], 99),
            "answers_p99_ms": percentile([v for a in crowd for v in a.latencies_ms["answers"]], 99),
            "baseline_requests": len(baseline_latencies),
            "baseline_p99_ms": baseline_p99,
            "p99_vs_baseline": round(p99 / baseline_p99, 2) if baseline_p99 else None,
            "images_uploaded": uploaded,
            "images_predicted": stored["images_predicted"],
            "pairs_selected": stored["pairs_selected"],
            "jobs": stored["jobs"],
            "jobs_done": stored["jobs"].get(JobStatus.done.value, 0),
            "job_errors": stored["job_errors"],
        }
    finally:
        if workers is not None:
            workers.stop()
        if server is not None:
            server.stop()
        database.drop()
        shutil.rmtree(workdir, ignore_errors=True)


def passed(results: dict) -> bool:
    """Votes sent equal votes recorded, no error, and the workers finished some job."""
    return results["votes_equal"] and results["errors"] == 0 and results["jobs_done"] > 0


def main() -> None:
    """Parse arguments, soak, print; exit 1 unless it passed (votes equal, no errors, workers worked)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=2.0, help="how long to soak")
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    parser.add_argument("--annotators", type=int, default=50)
    parser.add_argument("--workers", type=int, default=2, help="`mad worker` processes")
    parser.add_argument("--questions", type=int, default=30_000, help="open questions to start with")
    parser.add_argument("--images", type=int, default=200, help="images for the workers to start with")
    parser.add_argument("--think-ms", type=float, default=300, help="an annotator's mean time per question")
    parser.add_argument("--feed-s", type=float, default=10, help="seconds between image uploads")
    parser.add_argument("--server-workers", type=int, default=2, help="uvicorn worker processes")
    parser.add_argument(
        "--baseline-requests", type=int, default=300, help="requests of the lone annotator measured first"
    )
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    results = run(args)
    if args.json:
        print(json.dumps(results))
    else:
        for key, value in results.items():
            print(f"{key:>24}: {value}")
    sys.exit(0 if passed(results) else 1)


if __name__ == "__main__":
    main()
