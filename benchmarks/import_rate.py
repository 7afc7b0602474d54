"""Images per second of `mad images import` with one and with two checking processes, on the same files.

The files are distinct photo-like JPEGs (a smooth random colour field with fine noise, 640 × 480 at quality
90, ~100 KB, like a web photo corpus). Each run imports the folder into a fresh SQLite database in a
temporary data dir through the CLI in this process (so interpreter start-up is not timed; the checking
processes' start is), with `--processes 1` or `--processes 2`; runs alternate 1, 2, 1, 2 … so that other
load on the machine falls on both alike. Figures are the median of each, with every run listed, the CPU
milliseconds an image cost the importing process and its checking processes (medians over the runs), and the
load average before and after (on a shared machine the rate measures the share of the CPU it was given: with
Linux's autogroup scheduling, every process of one session shares that session's share).

    .venv/bin/python benchmarks/import_rate.py [--images 1000] [--repeats 3] [--json]
"""

import argparse
import io
import json
import os
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from PIL import Image
from typer.testing import CliRunner

REPOSITORY = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPOSITORY))

from app.cli.main import app as cli  # noqa: E402
from app.migrate import upgrade  # noqa: E402

WIDTH, HEIGHT = 640, 480


def photo_jpeg(seed: int) -> bytes:
    """A photo-like JPEG: an 8 × 8 random colour field scaled up smoothly, with fine noise on top."""
    rng = np.random.default_rng(seed)
    field = Image.fromarray(rng.integers(0, 256, (8, 8, 3), dtype=np.uint8)).resize(
        (WIDTH, HEIGHT), Image.Resampling.BICUBIC
    )
    noisy = np.asarray(field, dtype=np.int16) + rng.integers(-12, 13, (HEIGHT, WIDTH, 3))
    buffer = io.BytesIO()
    Image.fromarray(noisy.clip(0, 255).astype(np.uint8)).save(buffer, format="JPEG", quality=90)
    return buffer.getvalue()


def cpu_seconds(who: int) -> float:
    """User and system CPU seconds of this process (RUSAGE_SELF) or of its ended children."""
    usage = resource.getrusage(who)
    return usage.ru_utime + usage.ru_stime


def import_seconds(folder: Path, workdir: Path, processes: int) -> tuple[float, float, float]:
    """Seconds the CLI takes to import the folder into a fresh database with this many processes, and the
    CPU seconds of the importing process and of its checking processes meanwhile."""
    data_dir = workdir / f"data-{processes}-{time.monotonic_ns()}"
    data_dir.mkdir()
    env = {"MAD_DATA_DIR": str(data_dir), "MAD_DATABASE_URL": "", "MAD_ENV": "development"}
    upgrade(f"sqlite:///{data_dir / 'mad.sqlite3'}")
    runner = CliRunner()
    created = runner.invoke(cli, ["competitions", "create", "corpus"], env=env)
    assert created.exit_code == 0, created.output
    args = ["images", "import", str(folder), "-c", "corpus", "--processes", str(processes)]
    own, children = cpu_seconds(resource.RUSAGE_SELF), cpu_seconds(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    result = runner.invoke(cli, args, env=env)
    seconds = time.perf_counter() - started
    assert result.exit_code == 0 and f"{len(list(folder.iterdir()))} added" in result.output, result.output
    own, children = cpu_seconds(resource.RUSAGE_SELF) - own, cpu_seconds(resource.RUSAGE_CHILDREN) - children
    return seconds, own, children


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--images", type=int, default=1000, help="Distinct JPEGs to import (default 1000).")
    parser.add_argument("--repeats", type=int, default=3, help="Runs with each process count (default 3).")
    parser.add_argument("--json", action="store_true", help="Print one JSON line of figures.")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="import-rate-") as temporary:
        workdir = Path(temporary)
        folder = workdir / "photos"
        folder.mkdir()
        total_bytes = 0
        for index in range(args.images):
            data = photo_jpeg(index)
            total_bytes += len(data)
            (folder / f"{index:06d}.jpg").write_bytes(data)
        runs: dict[int, list[float]] = {1: [], 2: []}
        cpu: dict[str, list[float]] = {"importer": [], "checkers": []}
        load_before = os.getloadavg()[0]
        for _ in range(args.repeats):
            for processes in (1, 2):
                seconds, own, children = import_seconds(folder, workdir, processes)
                runs[processes].append(args.images / seconds)
                cpu["importer"].append(own * 1000 / args.images)
                cpu["checkers"].append(children * 1000 / args.images)
    figures = {
        "images": args.images,
        "mean_jpeg_bytes": round(total_bytes / args.images),
        "load_average_before": load_before,
        "load_average_after": os.getloadavg()[0],
        "importer_cpu_ms_per_image": round(statistics.median(cpu["importer"]), 2),
        "checkers_cpu_ms_per_image": round(statistics.median(cpu["checkers"]), 2),
        "img_per_s_1": round(statistics.median(runs[1]), 1),
        "img_per_s_2": round(statistics.median(runs[2]), 1),
        "runs_img_per_s_1": [round(rate, 1) for rate in runs[1]],
        "runs_img_per_s_2": [round(rate, 1) for rate in runs[2]],
    }
    figures["ratio"] = round(figures["img_per_s_2"] / figures["img_per_s_1"], 2)
    if args.json:
        print(json.dumps(figures))
        return
    print(f"{args.images} JPEGs of {figures['mean_jpeg_bytes']:,} bytes on average")
    for processes in (1, 2):
        rates = ", ".join(f"{rate:,.0f}" for rate in runs[processes])
        print(f"  {processes} process{'es' if processes > 1 else ''}: {rates} img/s")
    print(f"ratio of medians 2 / 1: {figures['ratio']:.2f}")
    print(
        f"CPU per image: importer {figures['importer_cpu_ms_per_image']} ms, checking processes "
        f"{figures['checkers_cpu_ms_per_image']} ms; load average "
        f"{figures['load_average_before']:.1f} before, {figures['load_average_after']:.1f} after"
    )


if __name__ == "__main__":
    main()
