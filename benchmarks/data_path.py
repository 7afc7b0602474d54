"""How fast a remote worker gets a predict shard's images to its decode stage.

20,000 JPEG files of about 100 KB (made like benchmarks/inference.py makes its files: 1,000 drawn, the rest
copies made distinct by a JPEG comment) are imported into a service on this machine (SQLite and the local
blob store in --workdir, one uvicorn process). A worker configured as a remote one — the service URL and a
worker token, reading nothing from the store itself — claims each predict shard and pulls its images through
loader processes like the worker's (kept from shard to shard), up to the decode stage: the new path
asks for one streamed tar per batch (workers.image_readers.ShardArchiveReader); the baseline, measured in
the same run on the first --baseline-images of the first shard, makes one GET /images/{sha256} per image, as
workers did before. Targets on a 2-core machine: ratio >= 10 and images_per_s >= 3,000.

    .venv/bin/python benchmarks/data_path.py [--json] [--workdir DIR]

A --workdir is kept and reused: the files and the import (a re-run of the import skips what is done).
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
from inference import make_jpegs
from local_server import free_port, start_uvicorn, stop_uvicorn

from app.classifiers.service import register_timm_pretrained
from app.competitions.schemas import CompetitionCreate
from app.competitions.service import create_competition, get_competition_by_name
from app.db.engine import create_db_engine, create_sessionmaker
from app.errors import NotFound
from app.images.service import ImageLimits, import_entries
from app.images.sources import folder_entries
from app.images.store import ImageStore
from app.jobs.lifecycle import enqueue_classifier
from app.migrate import upgrade
from app.settings import Settings
from app.users import service as users_service
from app.users.models import Role
from workers.client import ServiceClient
from workers.feed import BatchFeed, read_many
from workers.image_readers import ShardArchiveReader

IMAGES, DRAWN = 20_000, 1_000
SIDES = (300, 720)  # about 100 KB a file with inference.py's recipe
SECRET_KEY = "data-path-benchmark-secret-key-" + "x" * 32
COMPETITION = "data-path"


class OneGetPerImage:
    """The old path: GET /images/{sha256} for each image; picklable, one client per process."""

    def __init__(self, base_url: str, sha256_by_ordinal: dict[int, str]) -> None:
        self.base_url = base_url
        self.sha256_by_ordinal = sha256_by_ordinal
        self._http: httpx.Client | None = None

    def __getstate__(self) -> dict:
        return {**self.__dict__, "_http": None}

    def __call__(self, ordinal: int) -> bytes:
        if self._http is None:
            self._http = httpx.Client(base_url=self.base_url, timeout=60)
        response = self._http.get(f"/images/{self.sha256_by_ordinal[ordinal]}")
        response.raise_for_status()
        return response.content


def bytes_at_decode_stage(reader, ordinals) -> list[int]:
    """What the worker's loader does before decoding: read a batch's bytes (in one go when it can)."""
    return [len(data) for data in read_many(reader, ordinals)]


class Puller:
    """Loader processes like the worker's (workers.feed.BatchFeed), kept from shard to shard."""

    def __init__(self, batch_size: int, loader_workers: int) -> None:
        self.batch_size = batch_size
        self.feed = BatchFeed(bytes_at_decode_stage, loader_workers)

    def pull(self, ordinals: list[int], reader) -> tuple[int, int]:
        """Images and bytes that reached the decode stage."""
        images = total = 0
        for sizes in self.feed.batches(self.feed.submit(reader, ordinals, self.batch_size)):
            images += len(sizes)
            total += sum(sizes)
        return images, total


def make_corpus(folder: Path, images: int = IMAGES) -> None:
    """DRAWN JPEGs from inference.py's recipe, and copies of them made distinct by a comment, `images` in
    all."""
    folder.mkdir(parents=True, exist_ok=True)
    if len(list(folder.glob("*.jpg"))) >= images:
        return
    drawn = make_jpegs(folder, min(DRAWN, images), seed=0, sides=SIDES)
    for index in range(DRAWN, images):
        data = drawn[index % DRAWN].read_bytes()
        comment = f"copy {index}".encode()
        marker = b"\xff\xfe" + (len(comment) + 2).to_bytes(2, "big") + comment  # COM segment after SOI
        (folder / f"{index:05d}.jpg").write_bytes(data[:2] + marker + data[2:])


def prepare(workdir: Path, threads: int) -> tuple[Settings, str]:
    """The corpus imported into a competition with one classifier's predict jobs queued; a worker token."""
    settings = Settings(env="test", data_dir=workdir / "data", secret_key=SECRET_KEY, predict_shard_size=4096)
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    make_corpus(workdir / "corpus")
    upgrade(settings.sqlalchemy_url)
    engine = create_db_engine(settings.sqlalchemy_url)
    try:
        with create_sessionmaker(engine)() as session, ThreadPoolExecutor(threads) as executor:
            try:
                competition = get_competition_by_name(db_session=session, name=COMPETITION)
            except NotFound:
                competition = create_competition(db_session=session, spec=CompetitionCreate(name=COMPETITION))
            started = time.perf_counter()
            report = import_entries(
                db_session=session,
                store=ImageStore(settings.blob_store),
                competition=competition,
                entries=folder_entries(workdir / "corpus", settings.max_image_bytes),
                limits=ImageLimits(
                    settings.max_image_bytes, settings.max_image_pixels, settings.thumbnail_size
                ),
                executor=executor,
                on_batch=lambda _: session.commit(),
                ahead=2 * threads,
            )
            print(
                f"import: {len(report.added)} added, {len(report.skipped)} skipped "
                f"in {time.perf_counter() - started:.0f} s",
                file=sys.stderr,
            )
            name = f"resnet18-{time.time_ns()}"  # a new classifier each run: fresh predict jobs to claim
            classifier = register_timm_pretrained(
                db_session=session,
                settings=settings,
                competition=competition,
                name=name,
                pretrained_tag="resnet18.a1_in1k",
            )
            enqueue_classifier(db_session=session, settings=settings, classifier=classifier)
            user = users_service.create_user(
                db_session=session, username=f"gpu-{time.time_ns()}", role=Role.worker, password=None
            )
            token = users_service.create_api_token(db_session=session, user=user, name="benchmark")
            session.commit()
    finally:
        engine.dispose()
    return settings, token


def serve(settings: Settings, port: int) -> subprocess.Popen:
    """One uvicorn process on the benchmark's database and store."""
    env = {
        **os.environ,
        "MAD_ENV": "test",
        "MAD_SECRET_KEY": SECRET_KEY,
        "MAD_DATA_DIR": str(settings.data_dir),
        "MAD_PREDICT_SHARD_SIZE": "4096",
    }
    return start_uvicorn(env, port, "--log-level", "warning")


def measure(url: str, token: str, args) -> dict:
    """Claim a corpus' worth of predict shards (each run's classifier adds as many; a shard measured is
    left leased) and pull each through the archives; the baseline on part of the first shard."""
    client = ServiceClient(url, token)
    puller = Puller(args.batch_size, args.loader_workers)
    new_images = new_bytes = 0
    new_seconds = baseline = 0.0
    baseline_images = 0
    try:
        while new_images < IMAGES and (claim := client.claim("benchmark")).jobs:
            job = claim.jobs[0]
            images = job.predict.images
            ordinals = [image.ordinal for image in images]
            archives = ShardArchiveReader(url, token, job.id, job.lease_token)
            if not baseline_images:
                puller.pull(ordinals[:1], archives)  # the loader processes start before either is timed
                subset = ordinals[: args.baseline_images]
                reader = OneGetPerImage(url, {image.ordinal: image.sha256 for image in images})
                started = time.perf_counter()
                baseline_images, _ = puller.pull(subset, reader)
                baseline = time.perf_counter() - started
            started = time.perf_counter()
            pulled, total = puller.pull(ordinals, archives)
            new_seconds += time.perf_counter() - started
            new_images += pulled
            new_bytes += total
    finally:
        client.close()
    images_per_s = new_images / new_seconds
    baseline_per_s = baseline_images / baseline
    return {
        "images_per_s": round(images_per_s),
        "baseline_images_per_s": round(baseline_per_s),
        "ratio": round(images_per_s / baseline_per_s, 1),
        "images": new_images,
        "baseline_images": baseline_images,
        "mean_kb": round(new_bytes / max(new_images, 1) / 1000, 1),
        "megabytes_per_s": round(new_bytes / new_seconds / 1e6),
        "batch_size": args.batch_size,
        "loader_workers": args.loader_workers,
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--json", action="store_true", help="Print one JSON line of figures.")
    parser.add_argument("--workdir", type=Path, help="Keep the corpus, database and store here (reused).")
    parser.add_argument("--batch-size", type=int, default=256, help="Images per loader batch (archive).")
    parser.add_argument("--loader-workers", type=int, default=2, help="Loader processes.")
    parser.add_argument("--baseline-images", type=int, default=2000, help="Images pulled one GET each.")
    parser.add_argument("--import-threads", type=int, default=2, help="Threads of the corpus import.")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="mad-data-path-") as temporary:
        workdir = args.workdir or Path(temporary)
        settings, token = prepare(workdir, args.import_threads)
        port = free_port()
        server = serve(settings, port)
        try:
            figures = measure(f"http://127.0.0.1:{port}", token, args)
        finally:
            stop_uvicorn(server)
    if args.json:
        print(json.dumps(figures))
        return
    for name, value in figures.items():
        print(f"{name:>22}: {value}")


if __name__ == "__main__":
    main()
