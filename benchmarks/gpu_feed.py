"""The GPU's feed, measured on the CPU: what loader processes ship per image and how many images each passes
on in device-decode mode, against the engine's loader as it was measured on an H100 (commit 0bf205e) in the
same run; and how long a worker's model waits between one shard and the next.

1. Loader pass-through. --images JPEG files (about 95 KB: 300-720 px, made as benchmarks/inference.py makes
   them) are read from disk by --processes loader processes in batches of 256 for a CUDA engine's resnet50
   geometry, JPEGs left to the device: the feed of workers/feed.py (the JPEG bytes, one flat buffer a batch)
   against the DataLoader of workers/inference.py as `git show 0bf205e:workers/inference.py` gives it (a
   3x224x224 placeholder per image, Pillow's header parse and a copy per image, stacked by collate), both
   drained by a main process that does nothing else, in alternating rounds. Shipped bytes are those of the
   arrays and tensors a batch carries to the main process. On this CPU-only machine neither pins memory.
2. Between shards. A local service (uvicorn, SQLite) holds --shards shards of small JPEGs and a tiny timm
   classifier (test_resnet); a Worker on the CPU (--processes loader processes) predicts them, each batch's
   `classify` (normalise, forward, top-5) timed: between_shards_ms is the gap from a shard's last batch to
   the next shard's first, against the gap between two batches inside a shard.
3. Per-shard costs. On the same service, shards of --cost-sizes images (rows made by SQL, no files) are
   claimed and completed with made-up predictions through the worker's client, three of each size. A line
   through the claim and upload round trips against the shard size splits them into a cost per shard (its
   intercept) and one per image (a claim lists every image); the cost per shard is given as a share of a
   default shard's time at 10,000 img/s, with the shard size that keeps it under 5%. Both costs fall on the
   service and on the worker's service I/O thread, not between the model's batches.

Targets: shipped bytes <= JPEG + 1 KB an image, pass-through >= 3x per process, between shards <= 50 ms.

    .venv/bin/python benchmarks/gpu_feed.py [--json] [--images 2048] [--processes 2]
"""

import argparse
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import safetensors.torch
import timm
import torch
from inference import CyclingFileReader, make_jpegs
from local_server import free_port, start_uvicorn, stop_uvicorn
from open_questions import _bulk_images
from sqlalchemy.orm import Session

import workers.inference as inference
from app.classifiers import service as classifiers_service
from app.classifiers.models import Classifier
from app.classifiers.prediction_store import Predictions
from app.classifiers.timm_source import load_weights_file
from app.competitions.schemas import CompetitionCreate
from app.competitions.service import create_competition, get_competition_by_name
from app.db.engine import create_db_engine, create_sessionmaker
from app.jobs.lifecycle import enqueue_classifier
from app.migrate import upgrade
from app.settings import Settings
from app.users import service as users_service
from app.users.models import Role
from workers.client import ServiceClient
from workers.feed import BatchFeed, BatchLoader
from workers.worker import Worker, WorkerOptions

BASELINE_COMMIT = "0bf205e"
"""main when the GPU path was measured on an H100 (issue 26)."""
REPOSITORY = Path(__file__).resolve().parent.parent
SECRET_KEY = "gpu-feed-benchmark-secret-key-" + "x" * 32
BATCH = 256
RATE_FOR_SHARE = 10_000
"""img/s at which per-shard costs are compared with a shard's time."""


def baseline_module(folder: Path):
    """workers/inference.py as it was at BASELINE_COMMIT, imported as `baseline_inference`."""
    source = subprocess.run(
        ["git", "show", f"{BASELINE_COMMIT}:workers/inference.py"],
        cwd=REPOSITORY,
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    path = folder / "baseline_inference.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location("baseline_inference", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["baseline_inference"] = module  # its classes pickle by module name
    spec.loader.exec_module(module)
    return module


class BaselineLoader:
    """The 0bf205e engine's DataLoader for a CUDA device, built as its InferenceEngine._loader built it."""

    def __init__(self, module, config: dict, processes: int) -> None:
        self.batches = module.ShardBatches(BATCH)
        self.loader = torch.utils.data.DataLoader(
            module._ImageDataset([inference.uint8_transform(config)], [tuple(config["input_size"])], True),
            batch_sampler=self.batches,
            num_workers=processes,
            persistent_workers=True,
            collate_fn=module.collate,
            pin_memory=False,  # no CUDA here
        )

    def drain(self, reader, ordinals: list[int]) -> tuple[int, int]:
        """Images and shipped bytes of one pass."""
        self.batches.read_bytes, self.batches.ordinals = reader, ordinals
        images = shipped = 0
        for batches, ok, jpegs in self.loader:
            images += len(ok)
            shipped += sum(b.nbytes for b in batches) + ok.nbytes + sum(j.nbytes for _, j in jpegs)
        return images, shipped


class FeedLoader:
    """The feed of workers/feed.py with a CUDA engine's loader."""

    def __init__(self, config: dict, processes: int) -> None:
        loader = BatchLoader(
            [inference.uint8_transform(config)], [tuple(config["input_size"])], jpegs_to_device=True
        )
        self.feed = BatchFeed(loader, processes)

    def drain(self, reader, ordinals: list[int]) -> tuple[int, int]:
        """Images and shipped bytes of one pass."""
        images = shipped = 0
        for batch in self.feed.batches(self.feed.submit(reader, ordinals, BATCH)):
            images += batch.size
            shipped += batch.nbytes()
        return images, shipped


def pass_through(workdir: Path, images: int, processes: int, rounds: int) -> dict:
    """Both loaders over the same files, alternating rounds after a warm-up each."""
    paths = make_jpegs(workdir, images, sides=(300, 720))
    reader = CyclingFileReader(tuple(paths))
    config = timm.data.resolve_model_data_config(timm.create_model("resnet50"))
    loaders = {"baseline": BaselineLoader(baseline_module(workdir), config, processes)}
    loaders["feed"] = FeedLoader(config, processes)
    totals = {name: [0, 0, 0.0] for name in loaders}
    for loader in loaders.values():
        loader.drain(reader, list(range(BATCH * processes)))
    for _ in range(rounds):
        for name, loader in loaders.items():
            started = time.perf_counter()
            count, shipped = loader.drain(reader, list(range(len(paths))))
            totals[name][2] += time.perf_counter() - started
            totals[name][0] += count
            totals[name][1] += shipped
    loaders["feed"].feed.close()
    rate = {name: count / seconds / processes for name, (count, _, seconds) in totals.items()}
    shipped = {name: total / count for name, (count, total, _) in totals.items()}
    jpeg = sum(path.stat().st_size for path in paths) / len(paths)
    return {
        "jpeg_bytes_per_image": round(jpeg),
        "shipped_bytes_per_image": round(shipped["feed"]),
        "baseline_shipped_bytes_per_image": round(shipped["baseline"]),
        "per_process_img_per_s": round(rate["feed"]),
        "baseline_per_process_img_per_s": round(rate["baseline"]),
        "pass_through_ratio": round(rate["feed"] / rate["baseline"], 2),
        "loader_processes": processes,
        "files": len(paths),
        "rounds": rounds,
    }


def prepared_service(workdir: Path, shards: int, shard_size: int) -> tuple[Settings, str, int, Path]:
    """A SQLite service's data: a competition of small JPEGs (imported with `mad images import`) and a
    test_resnet classifier with a weights file, its predict jobs queued; a worker token."""
    settings = Settings(
        env="test", data_dir=workdir / "data", secret_key=SECRET_KEY, predict_shard_size=shard_size
    )
    settings.data_dir.mkdir(parents=True)
    upgrade(settings.sqlalchemy_url)
    corpus = workdir / "corpus"
    corpus.mkdir()
    make_jpegs(corpus, shards * shard_size, seed=1, sides=(64, 160))
    weights = workdir / "test_resnet.safetensors"
    torch.manual_seed(0)
    safetensors.torch.save_file(timm.create_model("test_resnet", num_classes=1000).state_dict(), str(weights))
    with database(settings) as session:
        create_competition(db_session=session, spec=CompetitionCreate(name="feed"))
        session.commit()
    command = [sys.executable, "-c", "from app.cli.main import app; app()", "images", "import", str(corpus)]
    subprocess.run(
        [*command, "-c", "feed"], env=service_env(settings, shard_size), check=True, capture_output=True
    )
    with database(settings) as session:
        competition = get_competition_by_name(db_session=session, name="feed")
        classifier = register(session, settings, competition, "tiny", weights)
        user = users_service.create_user(db_session=session, username="w", role=Role.worker, password=None)
        token = users_service.create_api_token(db_session=session, user=user, name="benchmark")
        session.commit()
        return settings, token, classifier.id, weights


@contextmanager
def database(settings: Settings) -> Iterator[Session]:
    """A session on the service's database."""
    engine = create_db_engine(settings.sqlalchemy_url)
    try:
        with create_sessionmaker(engine)() as session:
            yield session
    finally:
        engine.dispose()


def register(
    session: Session,
    settings: Settings,
    competition,
    name: str,
    weights: Path,
    architecture: str = "test_resnet",
) -> Classifier:
    """`architecture` with `weights` as a user's classifier, its predict jobs queued in the shards of
    `settings`."""
    classifier = classifiers_service.register_timm_weights(
        db_session=session,
        settings=settings,
        competition=competition,
        name=name,
        architecture=architecture,
        weights_file=weights,
        weights_filename=weights.name,
    )
    enqueue_classifier(db_session=session, settings=settings, classifier=classifier)
    return classifier


def service_env(settings: Settings, largest_shard: int) -> dict[str, str]:
    """The environment of the service's processes (uploads checked against the largest shard)."""
    return {
        **os.environ,
        "MAD_ENV": "test",
        "MAD_SECRET_KEY": SECRET_KEY,
        "MAD_DATA_DIR": str(settings.data_dir),
        "MAD_PREDICT_SHARD_SIZE": str(largest_shard),
    }


class TimedClassify:
    """workers.inference.classify, each call's start and end noted."""

    def __init__(self) -> None:
        self.classify = inference.classify
        self.calls: list[tuple[float, float]] = []

    def __call__(self, prepared, images):
        started = time.perf_counter()
        result = self.classify(prepared, images)
        self.calls.append((started, time.perf_counter()))
        return result


def between_shards(url: str, token: str, classifier_id: int, weights: Path, args, cache: Path) -> dict:
    """A Worker over the service's shards, each batch timed."""
    options = WorkerOptions(
        device="cpu", batch_size=args.batch_size, loader_workers=args.processes, cache_dir=cache
    )
    worker = Worker(ServiceClient(url, token), ServiceClient(url, token), "benchmark", options)
    worker.models[classifier_id] = load_weights_file("test_resnet", weights, 1000)
    timed = TimedClassify()
    inference.classify = timed  # the engine calls the module's classify
    try:
        started = time.perf_counter()
        done = worker.run(exit_when_idle=True)
        seconds = time.perf_counter() - started
    finally:
        inference.classify = timed.classify
    per_shard = -(-args.shard_size // args.batch_size)
    calls = timed.calls
    assert done == args.shards and len(calls) == args.shards * per_shard, (done, len(calls))
    boundaries = [calls[k * per_shard][0] - calls[k * per_shard - 1][1] for k in range(1, args.shards)]
    inside = [calls[i + 1][0] - calls[i][1] for i in range(len(calls) - 1) if (i + 1) % per_shard]
    return {
        "between_shards_ms": round(1000 * statistics.median(boundaries), 1),
        "between_shards_max_ms": round(1000 * max(boundaries), 1),
        "within_shard_gap_ms": round(1000 * statistics.median(inside), 1),
        "batch_ms": round(1000 * statistics.median(end - start for start, end in calls), 1),
        "worker_img_per_s": round(args.shards * args.shard_size / seconds),
        "shards": args.shards,
        "shard_size": args.shard_size,
        "batch_size": args.batch_size,
    }


def shard_costs(settings: Settings, url: str, token: str, weights: Path, sizes: list[int]) -> dict:
    """Claim and upload round trips of shards of each size (three each), and their share of a shard's time
    at RATE_FOR_SHARE img/s."""
    with database(settings) as session:
        competition = create_competition(db_session=session, spec=CompetitionCreate(name="costs"))
        _bulk_images(session, competition.id, "costs", 3 * max(sizes))
        for size in sizes:  # one classifier per size, queued in that order: claims take the oldest job
            register(
                session,
                settings.model_copy(update={"predict_shard_size": size}),
                competition,
                f"s{size}",
                weights,
            )
        session.commit()
    client = ServiceClient(url, token)
    costs: dict[int, list[tuple[float, float]]] = {}
    try:
        while True:
            started = time.perf_counter()
            claim = client.claim("costs")
            claimed = time.perf_counter()
            task = claim.jobs[0].predict if claim.jobs else None
            if task is None:  # done, or the pairs' selections
                break
            (job,) = claim.jobs
            size = len(task.images)
            predictions = Predictions.empty(size)
            predictions.top1[:], predictions.prob[:] = 7, 0.9
            uploading = time.perf_counter()
            client.complete_predict(job.id, job.lease_token, predictions)
            costs.setdefault(size, []).append((claimed - started, time.perf_counter() - uploading))
    finally:
        client.close()
    sizes_seen = sorted(costs)
    claim_ms = [1000 * statistics.median(c for c, _ in costs[size]) for size in sizes_seen]
    upload_ms = [1000 * statistics.median(u for _, u in costs[size]) for size in sizes_seen]
    (claim_per_image, claim_fixed), (upload_per_image, upload_fixed) = (
        np.polyfit(sizes_seen, ms, 1) for ms in (claim_ms, upload_ms)
    )
    fixed_ms = max(claim_fixed, 0) + max(upload_fixed, 0)
    default_shard = Settings.model_fields["predict_shard_size"].default
    return {
        "claim_ms_by_shard_size": dict(zip(sizes_seen, map(_rounded, claim_ms), strict=True)),
        "upload_ms_by_shard_size": dict(zip(sizes_seen, map(_rounded, upload_ms), strict=True)),
        "per_shard_cost_ms": _rounded(fixed_ms),
        "per_image_cost_us": _rounded(1000 * (claim_per_image + upload_per_image)),
        "default_shard_size": default_shard,
        "per_shard_cost_share_at_10k": round(fixed_ms / 1000 / (default_shard / RATE_FOR_SHARE), 3),
        "shard_size_for_5_percent_at_10k": int(fixed_ms / 1000 * RATE_FOR_SHARE / 0.05),
    }


def _rounded(value: float) -> float:
    """A figure to a tenth."""
    return round(float(value), 1)


def main() -> None:
    """Parse options, run both parts, print figures or JSON."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--images", type=int, default=2048, help="JPEG files for the pass-through (2048)")
    parser.add_argument("--processes", type=int, default=2, help="loader processes (2)")
    parser.add_argument("--rounds", type=int, default=3, help="alternating pass-through rounds (3)")
    parser.add_argument("--shards", type=int, default=6, help="shards the worker predicts (6)")
    parser.add_argument("--shard-size", type=int, default=512, help="images a shard (512)")
    parser.add_argument("--batch-size", type=int, default=64, help="the worker's batch size (64)")
    parser.add_argument(
        "--cost-sizes", default="1024,4096,16384", help="shard sizes whose service costs are measured"
    )
    args = parser.parse_args()
    sizes = [int(size) for size in args.cost_sizes.split(",")]
    torch.set_num_threads(1)  # the model's share of a machine whose other cores decode
    with tempfile.TemporaryDirectory(prefix="mad-gpu-feed-") as temporary:
        workdir = Path(temporary)
        (workdir / "files").mkdir()
        figures = pass_through(workdir / "files", args.images, args.processes, args.rounds)
        settings, token, classifier_id, weights = prepared_service(workdir, args.shards, args.shard_size)
        port = free_port()
        server = start_uvicorn(service_env(settings, max(sizes)), port, "--log-level", "warning")
        url = f"http://127.0.0.1:{port}"
        try:
            figures |= between_shards(url, token, classifier_id, weights, args, workdir / "cache")
            figures |= shard_costs(settings, url, token, weights, sizes)
        finally:
            stop_uvicorn(server)
    figures["targets"] = {
        "shipped_bytes_per_image": f"<= {figures['jpeg_bytes_per_image'] + 1024}",
        "pass_through_ratio": ">= 3",
        "between_shards_ms": "<= 50",
    }
    figures["within_targets"] = bool(
        figures["shipped_bytes_per_image"] <= figures["jpeg_bytes_per_image"] + 1024
        and figures["pass_through_ratio"] >= 3
        and figures["between_shards_ms"] <= 50
    )
    figures["load_average"] = round(os.getloadavg()[0], 1)
    if args.json:
        print(json.dumps(figures))
        return
    for name, value in figures.items():
        print(f"{name:>34}: {value}")


if __name__ == "__main__":
    main()
