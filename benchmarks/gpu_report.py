"""What a GPU machine should be checked for, in one run meant to fit one 10-minute call on a GPU machine:
benchmarks/inference.py eager and compiled (resnet50, 1,000 JPEG files) and eager for ViT-B/16, the CUDA
tests of tests/workers, and `mad worker` end to end over --images distinct JPEGs with the GPU's utilisation
(nvidia-smi every 100 ms) over the predict stage (the first predict job's start to the last one's finish, as
the database records them), with py-spy's samples of that run where py-spy is on the PATH (--profile).
The worker runs first, the compiled model last. Figures go to --out as one JSON object, rewritten after each
step so that a run stopped at its limit keeps what it measured, and on a CUDA device by default to
benchmarks/results/gpu.json; a run on the CPU (--device cpu, to try the script) writes nothing unless --out
is given, and never that file.

On the GPU machine (python3 there holds torch; the project's other packages travel as wheels in .whl, made
here by scripts/gpu_wheels.sh; carry [".whl"]):

    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \\
        .whl/*.whl && export PYTHONPATH=/tmp/site:. PYTHONUNBUFFERED=1 && \\
        python3 benchmarks/gpu_report.py --images 50000 --out $OUT/gpu.json --profile $OUT/worker.folded

Here, to try it:

    .venv/bin/python benchmarks/gpu_report.py --device cpu --images 256 --worker-model test_resnet
"""

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from datetime import UTC, datetime
from pathlib import Path

import safetensors.torch
import timm
import torch
from data_path import make_corpus
from gpu_feed import SECRET_KEY, database, register
from sqlalchemy import func, select

from app.competitions.schemas import CompetitionCreate
from app.competitions.service import create_competition, get_competition_by_name
from app.jobs.enums import JobKind
from app.jobs.models import Job
from app.migrate import upgrade
from app.settings import Settings

BENCHMARKS = Path(__file__).resolve().parent
RESULTS = BENCHMARKS / "results" / "gpu.json"
MAD = [sys.executable, "-c", "from app.cli.main import app; app()"]


def run_json(command: list[str], timeout_s: int) -> dict:
    """The JSON object a benchmark prints last, with the command that printed it."""
    started = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, timeout=timeout_s, cwd=BENCHMARKS.parent)
    if done.returncode != 0:
        return {"command": " ".join(command[1:]), "failed": done.stderr[-2000:]}
    result = json.loads(done.stdout.strip().splitlines()[-1])
    return result | {"command": " ".join(command[1:]), "seconds": round(time.perf_counter() - started)}


def cuda_tests(timeout_s: int) -> dict:
    """tests/workers' tests that need CUDA (they skip without it), with pytest's last line."""
    command = [
        sys.executable,
        "-m",
        "pytest",
        "-q",
        "-p",
        "no:cacheprovider",
        "tests/workers",
        "-k",
        "cuda or gpu",
    ]
    done = subprocess.run(command, capture_output=True, text=True, timeout=timeout_s, cwd=BENCHMARKS.parent)
    return {
        "command": " ".join(command[1:]),
        "passed": done.returncode == 0,
        "summary": done.stdout.strip().splitlines()[-1] if done.stdout.strip() else "",
        "failures": done.stdout[-4000:] if done.returncode else "",
    }


class Utilisation:
    """nvidia-smi's GPU utilisation every 100 ms, each sample with the UTC time it was read."""

    def __init__(self) -> None:
        self.samples: list[tuple[datetime, int]] = []
        query = ["nvidia-smi", "--query-gpu=utilization.gpu", "--format=csv,noheader,nounits", "-lms", "100"]
        self.process = subprocess.Popen(query, stdout=subprocess.PIPE, text=True)
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            if line.strip().isdigit():
                self.samples.append((datetime.now(UTC), int(line)))

    def share_busy(self, start: datetime, end: datetime) -> float | None:
        """Mean utilisation between two times, as a share; None without samples there."""
        self.process.terminate()
        self.thread.join()
        start, end = (when if when.tzinfo else when.replace(tzinfo=UTC) for when in (start, end))  # naive=UTC
        inside = [value for when, value in self.samples if start <= when <= end]
        return round(statistics.mean(inside) / 100, 3) if inside else None


def py_spy(pid: int, folded: Path | None) -> subprocess.Popen | None:
    """py-spy sampling a process and its loader processes until it exits (attached by pid, without pausing
    it: a failing sampler leaves the run alone), idle threads too, as folded stacks; None without py-spy."""
    if folded is None or shutil.which("py-spy") is None:
        return None
    command = ["py-spy", "record", "--pid", str(pid), "--subprocesses", "--idle", "--threads"]
    command += ["--nonblocking", "--rate", "50", "--format", "raw", "--output", str(folded)]
    return subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def worker_end_to_end(workdir: Path, args) -> dict:
    """`mad worker` over a SQLite service's corpus of distinct JPEGs with one random-weights classifier."""
    settings = Settings(env="test", data_dir=workdir / "data", secret_key=SECRET_KEY)
    settings.data_dir.mkdir(parents=True)
    env = {
        **os.environ,
        "MAD_ENV": "development",
        "MAD_SECRET_KEY": SECRET_KEY,
        "MAD_DATA_DIR": str(settings.data_dir),
    }
    upgrade(settings.sqlalchemy_url)
    make_corpus(workdir / "corpus", args.images)
    weights = workdir / f"{args.worker_model}.safetensors"
    safetensors.torch.save_file(timm.create_model(args.worker_model).state_dict(), str(weights))
    with database(settings) as session:
        create_competition(db_session=session, spec=CompetitionCreate(name="gpu"))
        session.commit()
    started = time.perf_counter()
    command = [
        *MAD,
        "images",
        "import",
        str(workdir / "corpus"),
        "-c",
        "gpu",
        "--threads",
        str(os.cpu_count()),
    ]
    subprocess.run(command, env=env, check=True, capture_output=True, timeout=args.timeout_s)
    import_seconds = time.perf_counter() - started
    with database(settings) as session:
        competition = get_competition_by_name(db_session=session, name="gpu")
        register(session, settings, competition, "model", weights, architecture=args.worker_model)
        session.commit()
    utilisation = Utilisation() if args.device == "cuda" else None
    worker = [
        *MAD,
        "worker",
        "--device",
        args.device,
        "--batch-size",
        str(args.batch_size),
        "--exit-when-idle",
    ]
    running = subprocess.Popen(worker, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    sampler = py_spy(running.pid, args.profile)
    _, errors = running.communicate(timeout=args.timeout_s)
    if running.returncode != 0:
        raise subprocess.CalledProcessError(running.returncode, worker, stderr=errors)
    profile = sampler.communicate(timeout=60)[1][-2000:] if sampler else "py-spy is not on the PATH"
    with database(settings) as session:
        start, end, images = session.execute(
            select(
                func.min(Job.started_at), func.max(Job.finished_at), func.sum(Job.shard_end - Job.shard_start)
            ).where(Job.kind == JobKind.predict)
        ).one()
    seconds = (end - start).total_seconds()
    return {
        "worker_command": " ".join(["mad", *worker[3:]]),
        "worker_model": args.worker_model,
        "worker_images": images,
        "worker_predict_stage_s": round(seconds, 2),
        "worker_end_to_end_img_per_s": round(images / seconds, 1),
        "gpu_busy_share": utilisation.share_busy(start, end) if utilisation else None,
        "import_img_per_s": round(args.images / import_seconds, 1),
        "worker_profile": f"{args.profile}: {profile}" if args.profile else None,
    }


def main() -> None:
    """Run every step, writing the figures where asked after each; print them."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    parser.add_argument("--images", type=int, default=16_384, help="distinct JPEGs for the worker (16384)")
    parser.add_argument("--batch-size", type=int, default=256, help="the worker's batch size (256)")
    parser.add_argument("--worker-model", default="resnet50", help="the worker's architecture (resnet50)")
    parser.add_argument("--out", type=Path, help="where the JSON goes (on CUDA by default the results file)")
    parser.add_argument("--profile", type=Path, help="py-spy's folded stacks of the worker run go here")
    parser.add_argument("--timeout-s", type=int, default=400, help="limit of each step (400)")
    args = parser.parse_args()
    on_gpu = args.device == "cuda" and torch.cuda.is_available()
    if args.device == "cuda" and not on_gpu:
        raise SystemExit("no CUDA device here: try the script with --device cpu")
    out = args.out or (RESULTS if on_gpu else None)
    if out is not None and not on_gpu and out.resolve() == RESULTS:
        raise SystemExit(f"a CPU trial never writes {RESULTS}")
    report: dict = {
        "command": " ".join(["python3", *sys.argv]),
        "device": torch.cuda.get_device_name() if on_gpu else "cpu",
        "torch": torch.__version__,
    }

    def save() -> None:
        if out is not None:
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_text(json.dumps(report, indent=1) + "\n")

    with tempfile.TemporaryDirectory(prefix="mad-gpu-report-") as workdir:
        report |= worker_end_to_end(Path(workdir), args)
    save()
    inference = [sys.executable, "benchmarks/inference.py", "--device", args.device, "--json"]
    inference += ["--images", "1000"] if on_gpu else ["--images", "64", "--rounds", "1"]  # CPU: a trial
    report["inference_eager"] = run_json(inference, args.timeout_s)
    if on_gpu:
        report["resnet50_predecoded_img_per_s"] = report["inference_eager"].get("predecoded_img_per_s")
        report["resnet50_from_jpeg_img_per_s"] = report["inference_eager"].get("jpeg_img_per_s")
        save()
        report["vit_b16_eager"] = run_json([*inference, "--model", "vit_base_patch16_224"], args.timeout_s)
        report["vit_b16_predecoded_img_per_s"] = report["vit_b16_eager"].get("predecoded_img_per_s")
    save()
    report["cuda_tests"] = cuda_tests(args.timeout_s)
    save()
    if on_gpu:
        report["inference_compiled"] = run_json([*inference, "--compile"], args.timeout_s)
        report["resnet50_compiled_from_jpeg_img_per_s"] = report["inference_compiled"].get("jpeg_img_per_s")
        save()
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
