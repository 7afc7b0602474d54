"""A million-image MAD competition end to end: uploads → 190 selections → questions → votes → leaderboard.

A competition of --images image rows (bulk-inserted, no files: nothing on this path reads an image) over
the ImageNet-1k taxonomy and --classifiers classifiers registered through the API from Parquet prediction
files made by app.core.simulate (1,000 classes, errors shared on hard images and near the true class in the
hierarchy, confidences Beta(6, 1) when right and Beta(2, 2) when wrong, so around T = 0.8). One uvicorn
process serves it; one `mad worker` process, given the URL and a worker token, runs every select job.
Then a panel of three simulated annotators answers every question truthfully through the labelling API,
and the leaderboard is fetched once (its first, uncached computation). It prints:

  upload_s        all prediction files accepted (sequential POSTs of the files)
  select_s        from the worker's start until every pair's selection is stored
  questions_s     until the panel has decided every question
  leaderboard_ms  GET /api/v1/competitions/{id}/leaderboard
  peak_rss_mb     the larger peak RSS of the server and the worker

and each divided by the same pipeline's figure at --baseline-images, run afterwards (the scaling ratio; 0
skips it), and by the issue's target for this 2-core machine (vs_target): upload_s < 60, select_s < 120,
leaderboard_ms < 500, peak_rss_mb < 2048. Runs on a Postgres database of its own (created and dropped)
unless --database-url.

    .venv/bin/python benchmarks/scale.py [--json] [--images 1000000] [--classifiers 20]
        [--baseline-images 100000] [--k 30] [--database-url URL] [--seed 0]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from sqlalchemy import select, text

REPOSITORY = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPOSITORY))

from app.competitions.schemas import CompetitionCreate  # noqa: E402
from app.competitions.service import create_competition  # noqa: E402
from app.core.simulate import SimulationConfig, simulate_corpus, table_1_accuracies  # noqa: E402
from app.core.taxonomy_sources import imagenet_1k  # noqa: E402
from app.db.base import utcnow  # noqa: E402
from app.db.engine import create_db_engine, create_sessionmaker  # noqa: E402
from app.images.models import CompetitionImage, Image  # noqa: E402
from app.jobs.enums import JobKind, JobStatus  # noqa: E402
from app.jobs.models import Job  # noqa: E402
from app.labelling.models import Question  # noqa: E402
from app.migrate import upgrade  # noqa: E402
from app.users import service as users_service  # noqa: E402
from app.users.models import Role  # noqa: E402
from benchmarks.open_questions import _bulk_images, analyze  # noqa: E402
from benchmarks.soak import Database  # noqa: E402

SECRET_KEY = "scale-benchmark-secret-key-" + "x" * 32
TARGETS = {"upload_s": 60, "select_s": 120, "leaderboard_ms": 500, "peak_rss_mb": 2048}
PANEL = 3
CHUNK = 100_000
POLL_S = 0.5
TIMEOUT_S = 3600
FIGURES = ("upload_s", "select_s", "questions_s", "leaderboard_ms", "peak_rss_mb")


def free_port() -> int:
    """A free TCP port on 127.0.0.1."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def sha256_of(name: str, ordinal: int) -> str:
    """The (made-up) content hash of image `ordinal`, as open_questions._bulk_images makes it."""
    return hashlib.sha256(f"{name}-{ordinal}".encode()).hexdigest()


def make_predictions(n_images: int, n_classifiers: int, workdir: Path, seed: int) -> np.ndarray:
    """One Parquet file per classifier (sha256, top1, prob) in workdir; the objects in each image (n, 2),
    −1 for none, made CHUNK images at a time (images are independent)."""
    distance = imagenet_1k().distance_matrix()
    accuracies = table_1_accuracies(n_classifiers)
    writers = [
        pq.ParquetWriter(
            workdir / f"classifier-{i}.parquet",
            pa.schema([("sha256", pa.string()), ("top1", pa.int32()), ("prob", pa.float32())]),
        )
        for i in range(n_classifiers)
    ]
    objects = []
    for number, start in enumerate(range(0, n_images, CHUNK)):
        size = min(CHUNK, n_images - start)
        config = SimulationConfig(classifiers=n_classifiers, images=size)
        corpus = simulate_corpus(accuracies, distance, config, np.random.default_rng([seed, number]))
        hashes = pa.array([sha256_of("scale", ordinal) for ordinal in range(start, start + size)])
        for i, writer in enumerate(writers):
            probs = corpus.probs[i].astype(np.float32)
            writer.write_table(pa.table({"sha256": hashes, "top1": corpus.labels[i], "prob": probs}))
        objects.append(np.stack([corpus.first_object, corpus.second_object], axis=1))
    for writer in writers:
        writer.close()
    return np.concatenate(objects)


def insert_images(engine, db_session, competition_id: int, n_images: int) -> None:
    """The image rows and their ordinals: COPY on Postgres, executemany on SQLite."""
    if engine.dialect.name != "postgresql":
        _bulk_images(db_session, competition_id, "scale", n_images)
        return
    now = utcnow()
    connection = db_session.connection().connection.driver_connection
    first_new = db_session.scalar(select(Image.id).order_by(Image.id.desc()).limit(1)) or 0
    columns = "sha256, format, width, height, bytes, original_name, created_at"
    with connection.cursor().copy(f"COPY images ({columns}) FROM STDIN") as copy:
        for ordinal in range(n_images):
            copy.write_row((sha256_of("scale", ordinal), "jpeg", 640, 480, 1, f"{ordinal}.jpg", now))
    db_session.execute(
        text(
            "INSERT INTO competition_images (competition_id, image_id, ordinal, excluded, added_at) "
            "SELECT :competition, id, row_number() OVER (ORDER BY id) - 1, false, :now FROM images "
            "WHERE id > :first"
        ),
        {"competition": competition_id, "now": now, "first": first_new},
    )


def fill(database_url: str, n_images: int, k: int) -> dict:
    """Competition, image rows and accounts (an admin, a worker, the panel); their tokens."""
    engine = create_db_engine(database_url)
    with create_sessionmaker(engine)() as db_session:
        competition = create_competition(
            db_session=db_session,
            spec=CompetitionCreate(name="scale", k=k, panel_size=PANEL, taxonomy="imagenet-1k"),
        )
        insert_images(engine, db_session, competition.id, n_images)

        def token(name: str, role: Role) -> str:
            password = None if role == Role.worker else "scale password"
            user = users_service.create_user(
                db_session=db_session, username=name, role=role, password=password
            )
            return users_service.create_api_token(db_session=db_session, user=user, name="scale")

        world = {
            "competition_id": competition.id,
            "admin": token("scale-admin", Role.admin),
            "worker": token("scale-worker", Role.worker),
            "panel": [token(f"annotator-{index}", Role.annotator) for index in range(PANEL)],
        }
        db_session.commit()
    if engine.dialect.name == "postgresql":
        analyze(engine)
    engine.dispose()
    return world


def peak_rss_mb(pid: int) -> float:
    """A live process's peak resident set size (VmHWM), in MB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmHWM for process {pid}")


def start(command: list[str], environment: dict, log: Path) -> subprocess.Popen:
    """A child process in the repository, its output in `log`."""
    with log.open("wb") as output:
        return subprocess.Popen(
            command,
            cwd=REPOSITORY,
            env={**os.environ, **environment},
            stdout=output,
            stderr=subprocess.STDOUT,
        )


def stop(process: subprocess.Popen) -> None:
    """Terminate a child (SIGINT may be ignored in a background shell's children) and wait for it."""
    if process.poll() is None:
        process.terminate()
        process.wait(timeout=60)


def wait_until(ready, what: str, process: subprocess.Popen, log: Path) -> None:
    """Poll `ready()` until true; fail early when `process` died."""
    deadline = time.monotonic() + TIMEOUT_S
    while not ready():
        if process.poll() is not None:
            raise RuntimeError(f"{what}: process exited {process.returncode}: {log.read_text()[-2000:]}")
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what}: timed out")
        time.sleep(POLL_S)


def server_ready(url: str) -> bool:
    """The server answers /healthz."""
    try:
        return httpx.get(f"{url}/healthz", timeout=2).status_code == 200
    except httpx.TransportError:
        return False


def upload(url: str, token: str, competition_id: int, paths: list[Path]) -> None:
    """Register each file as a predictions-file classifier through the API."""
    with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=600) as http:
        for path in paths:
            with path.open("rb") as file:
                response = http.post(
                    f"/api/v1/competitions/{competition_id}/classifiers",
                    data={"name": path.stem, "source": "predictions-file"},
                    files={"file": (path.name, file, "application/octet-stream")},
                )
            if response.status_code != 201:
                raise RuntimeError(f"upload of {path.name}: {response.status_code} {response.text[:500]}")


def selections_done(session_factory, pairs: int) -> bool:
    """Every select job is done (none failed)."""
    with session_factory() as db_session:
        rows = dict(
            db_session.execute(
                select(Job.status, text("count(*)")).where(Job.kind == JobKind.select).group_by(Job.status)
            ).all()
        )
    if rows.get(JobStatus.failed):
        raise RuntimeError(f"{rows[JobStatus.failed]} select jobs failed")
    return rows.get(JobStatus.done, 0) == pairs


def question_truth(session_factory, competition_id: int, objects: np.ndarray) -> dict[int, bool]:
    """Each question's true answer: is its class one of the objects in the image?"""
    with session_factory() as db_session:
        rows = db_session.execute(
            select(Question.id, Question.class_index, CompetitionImage.ordinal)
            .join(CompetitionImage, CompetitionImage.image_id == Question.image_id)
            .where(
                Question.competition_id == competition_id, CompetitionImage.competition_id == competition_id
            )
        ).all()
    return {
        question: bool((objects[ordinal] == class_index).any()) for question, class_index, ordinal in rows
    }


def annotate(url: str, token: str, competition_id: int, truth: dict[int, bool]) -> int:
    """One annotator: take the next image, answer its questions truthfully, until none is left; answers."""
    prefix = f"/api/v1/competitions/{competition_id}/labelling"
    answered = 0
    with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=60) as http:
        while True:
            body = http.post(f"{prefix}/next").raise_for_status().json()
            if body["status"] == "finished":
                return answered
            if body["status"] == "busy":
                time.sleep(0.05)
                continue
            answers = [
                {"question_id": q["question_id"], "answer": truth[q["question_id"]], "seconds": 1.0}
                for q in body["item"]["questions"]
            ]
            http.post(f"{prefix}/answers", json={"answers": answers}).raise_for_status()
            answered += len(answers)


def run(database_url: str, n_images: int, n_classifiers: int, k: int, seed: int, workdir: Path) -> dict:
    """The whole pipeline once at n_images; its figures."""
    world = fill(database_url, n_images, k)
    objects = make_predictions(n_images, n_classifiers, workdir, seed)
    paths = [workdir / f"classifier-{i}.parquet" for i in range(n_classifiers)]
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    service = {"MAD_DATABASE_URL": database_url, "MAD_DATA_DIR": str(workdir / "data"), "MAD_ENV": "test"}
    service["MAD_SECRET_KEY"] = SECRET_KEY
    server_log, worker_log = workdir / "server.log", workdir / "worker.log"
    server = start(
        [sys.executable, "-m", "uvicorn", "--factory", "app.main:create_app", "--port", str(port)],
        service,
        server_log,
    )
    worker = None
    engine = create_db_engine(database_url)
    session_factory = create_sessionmaker(engine)
    try:
        wait_until(lambda: server_ready(url), "server start", server, server_log)
        started = time.perf_counter()
        upload(url, world["admin"], world["competition_id"], paths)
        upload_s = time.perf_counter() - started

        pairs = n_classifiers * (n_classifiers - 1) // 2
        started = time.perf_counter()
        worker = start(
            [
                sys.executable,
                "-c",
                "from app.cli.main import app; app()",
                "worker",
                "--url",
                url,
                "--token",
                world["worker"],
                "--name",
                "scale-worker",
                "--device",
                "cpu",
            ],
            {"MAD_DATA_DIR": str(workdir / "worker"), "OMP_NUM_THREADS": "1"},
            worker_log,
        )
        wait_until(lambda: selections_done(session_factory, pairs), "selections", worker, worker_log)
        select_s = time.perf_counter() - started
        worker_rss = peak_rss_mb(worker.pid)
        stop(worker)

        truth = question_truth(session_factory, world["competition_id"], objects)
        started = time.perf_counter()
        with ThreadPoolExecutor(PANEL) as pool:
            answers = sum(
                pool.map(lambda t: annotate(url, t, world["competition_id"], truth), world["panel"])
            )
        questions_s = time.perf_counter() - started

        started = time.perf_counter()
        leaderboard = httpx.get(
            f"{url}/api/v1/competitions/{world['competition_id']}/leaderboard", timeout=600
        )
        leaderboard_ms = (time.perf_counter() - started) * 1000
        leaderboard.raise_for_status()
        server_rss = peak_rss_mb(server.pid)
    finally:
        if worker is not None:
            stop(worker)
        stop(server)
        engine.dispose()
    ranked = leaderboard.json()["classifiers"]
    return {
        "images": n_images,
        "classifiers": n_classifiers,
        "pairs": pairs,
        "questions": len(truth),
        "answers": answers,
        "ranked": len(ranked),
        "upload_s": round(upload_s, 2),
        "select_s": round(select_s, 2),
        "questions_s": round(questions_s, 2),
        "leaderboard_ms": round(leaderboard_ms, 1),
        "peak_rss_mb": round(max(server_rss, worker_rss), 1),
        "server_rss_mb": round(server_rss, 1),
        "worker_rss_mb": round(worker_rss, 1),
    }


def run_on_own_database(database_url: str | None, n_images: int, args) -> dict:
    """`run` on the given database, or on a Postgres database of its own, created and dropped."""
    own = Database() if database_url is None else None
    try:
        with tempfile.TemporaryDirectory(prefix="mad-scale-") as workdir:
            url = own.url if own else database_url
            upgrade(url)
            return run(url, n_images, args.classifiers, args.k, args.seed, Path(workdir))
    finally:
        if own:
            own.drop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--images", type=int, default=1_000_000)
    parser.add_argument("--classifiers", type=int, default=20)
    parser.add_argument("--baseline-images", type=int, default=100_000, help="the baseline's size; 0: none")
    parser.add_argument("--k", type=int, default=30, help="images selected per pair")
    parser.add_argument(
        "--database-url", help="an empty database to use (default: a Postgres one of its own)"
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", action="store_true", help="print the result as one JSON line")
    args = parser.parse_args()
    if args.database_url and args.baseline_images:
        parser.error("--database-url takes one empty database: give --baseline-images 0 with it")
    result = run_on_own_database(args.database_url, args.images, args)
    if args.baseline_images:
        baseline = run_on_own_database(None, args.baseline_images, args)
        result["baseline"] = baseline
        result["ratio"] = {name: round(result[name] / max(baseline[name], 1e-9), 2) for name in FIGURES}
    result["targets"] = TARGETS
    result["vs_target"] = {name: round(result[name] / limit, 2) for name, limit in TARGETS.items()}
    result["within_targets"] = all(result[name] < limit for name, limit in TARGETS.items())
    if args.json:
        print(json.dumps(result))
    else:
        for name, value in result.items():
            print(f"{name:>16}: {value}")


if __name__ == "__main__":
    main()
