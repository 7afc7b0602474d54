"""Inference throughput of workers/inference.py.

CPU (default): resnet18 at 224 px over JPEG files made here, the engine against a plain hand-written
timm loop (PIL open, timm transform, batched forward, no DataLoader workers) in the same run; target
ratio >= 1.0.
CUDA (--device cuda): resnet50 (or --model) in bf16 from pre-decoded uint8 tensors and from JPEG files;
targets on one H200: >= 20,000 img/s pre-decoded, >= 5,000 img/s from JPEG. Skips cleanly without CUDA.
Weights are random, saved to a file and loaded through app.classifiers.timm_source like a user's.

    .venv/bin/python benchmarks/inference.py [--images 2000] [--json]
    .venv/bin/python benchmarks/inference.py --device cuda [--compile] [--model NAME] [--json]
"""

import argparse
import copy
import json
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import timm
import torch
from PIL import Image
from safetensors.torch import save_file

from app.classifiers.timm_source import load_weights_file
from workers.inference import InferenceEngine, available_cpus, classify

NUM_CLASSES = 1000


@dataclass(frozen=True)
class CyclingFileReader:
    """read_bytes(ordinal) over a list of files, wrapping around so a few files can feed a long run."""

    paths: tuple[Path, ...]

    def __call__(self, ordinal: int) -> bytes:
        return self.paths[ordinal % len(self.paths)].read_bytes()


def make_jpegs(folder: Path, count: int, seed: int = 0, sides: tuple[int, int] = (240, 640)) -> list[Path]:
    """`count` JPEG files of 240-640 px sides (or `sides`): smooth random colour fields plus noise, quality
    75-95."""
    rng = np.random.default_rng(seed)
    paths = []
    for index in range(count):
        width, height = (int(side) for side in rng.integers(sides[0], sides[1] + 1, size=2))
        coarse = Image.fromarray(rng.integers(0, 256, (int(rng.integers(2, 12)),) * 2 + (3,), dtype=np.uint8))
        pixels = np.asarray(coarse.resize((width, height), Image.Resampling.BICUBIC), dtype=np.int16)
        pixels = (pixels + rng.integers(-25, 26, pixels.shape)).clip(0, 255).astype(np.uint8)
        paths.append(folder / f"{index:05d}.jpg")
        Image.fromarray(pixels).save(paths[-1], quality=int(rng.integers(75, 96)))
    return paths


def load_random_model(architecture: str, folder: Path) -> torch.nn.Module:
    """A random-init `architecture` saved as safetensors and loaded back through timm_source."""
    path = folder / f"{architecture}.safetensors"
    save_file(timm.create_model(architecture, num_classes=NUM_CLASSES).state_dict(), path)
    return load_weights_file(architecture, path, NUM_CLASSES)


def plain_loop_seconds(model: torch.nn.Module, paths: list[Path], batch_size: int) -> float:
    """Seconds of the obvious loop: PIL open, RGB, timm eval transform, stack, forward, batch by batch."""
    transform = timm.data.create_transform(**timm.data.resolve_model_data_config(model))
    start = time.perf_counter()
    with torch.inference_mode():
        for first in range(0, len(paths), batch_size):
            batch = [transform(Image.open(path).convert("RGB")) for path in paths[first : first + batch_size]]
            model(torch.stack(batch)).softmax(dim=1).argmax(dim=1)
    return time.perf_counter() - start


def engine_seconds(engine: InferenceEngine, paths: list[Path], count: int) -> float:
    """Seconds of InferenceEngine.predict over `count` ordinals cycling through `paths`."""
    start = time.perf_counter()
    engine.predict(range(count), CyclingFileReader(tuple(paths)))
    return time.perf_counter() - start


def predecoded_rate(engine: InferenceEngine, batch_size: int, batches: int) -> float:
    """Images/s of normalise + forward + top-5/entropy on uint8 batches already on the device."""
    prepared = engine.prepared[0]
    images = torch.randint(0, 256, (batch_size, 3, 224, 224), dtype=torch.uint8, device=engine.device)
    for _ in range(3):
        classify(prepared, images)
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(batches):
        classify(prepared, images)
    torch.cuda.synchronize()
    return batch_size * batches / (time.perf_counter() - start)


def run_cpu(images: int, batch_size: int, rounds: int, workdir: Path) -> dict:
    """resnet18 on CPU: the engine against the plain loop over the same JPEGs, both warmed up.

    The files are split into `rounds` parts timed alternately, so changing background load hits both alike.
    """
    paths = make_jpegs(workdir, images)
    model = load_random_model("resnet18", workdir)
    assert timm.data.resolve_model_data_config(model)["input_size"] == (3, 224, 224)
    plain_model = copy.deepcopy(model).eval()  # the engine converts its model to channels_last in place
    engine = InferenceEngine([model], device="cpu", batch_size=batch_size)
    plain_loop_seconds(plain_model, paths[:batch_size], batch_size)
    engine_seconds(engine, paths, batch_size)
    plain_total = engine_total = 0.0
    for part in np.array_split(np.arange(len(paths)), rounds):
        part_paths = [paths[index] for index in part]
        plain_total += plain_loop_seconds(plain_model, part_paths, batch_size)
        engine_total += engine_seconds(engine, part_paths, len(part_paths))
    ours, plain = len(paths) / engine_total, len(paths) / plain_total
    return {
        "device": "cpu",
        "model": "resnet18",
        "input_px": 224,
        "images": len(paths),
        "batch_size": batch_size,
        "rounds": rounds,
        "cpus": available_cpus(),
        "torch_threads": torch.get_num_threads(),
        "decode_workers": engine.num_workers,
        "engine_img_per_s": round(ours, 1),
        "plain_loop_img_per_s": round(plain, 1),
        "ratio": round(ours / plain, 3),
        "target_ratio": 1.0,
    }


def run_cuda(images: int, batch_size: int, compile_model: bool, architecture: str, workdir: Path) -> dict:
    """A model (resnet50) in bf16 on the GPU: from pre-decoded tensors, then from JPEG files decoded by the
    engine."""
    model = load_random_model(architecture, workdir)
    engine = InferenceEngine([model], device="cuda", batch_size=batch_size, compile=compile_model)
    predecoded = predecoded_rate(engine, batch_size, batches=50)
    paths = make_jpegs(workdir, images)
    passes = max(1, 20_000 // len(paths))
    engine_seconds(engine, paths, batch_size * (engine.num_workers + 1))
    from_jpeg = len(paths) * passes / engine_seconds(engine, paths, len(paths) * passes)
    return {
        "device": torch.cuda.get_device_name(),
        "model": architecture,
        "dtype": "bfloat16",
        "compile": compile_model,
        "batch_size": batch_size,
        "cpus": available_cpus(),
        "decode_workers": engine.num_workers,
        "predecoded_img_per_s": round(predecoded, 1),
        "jpeg_img_per_s": round(from_jpeg, 1),
        "jpeg_files": len(paths),
        "jpeg_images_run": len(paths) * passes,
        "target_predecoded_img_per_s": 20_000,
        "target_jpeg_img_per_s": 5_000,
    }


def main(argv: list[str] | None = None) -> None:
    """Parse options, run the chosen benchmark, print figures or JSON."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    parser.add_argument("--images", type=int, default=2000, help="JPEG files to make (default 2000)")
    parser.add_argument("--batch-size", type=int, help="default 64 on CPU, 256 on CUDA")
    parser.add_argument("--rounds", type=int, default=4, help="alternating timed parts on CPU (default 4)")
    parser.add_argument("--compile", action="store_true", help="torch.compile the model (CUDA only)")
    parser.add_argument("--model", default="resnet50", help="timm architecture on CUDA (default resnet50)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args(argv)
    if args.device == "cuda" and not torch.cuda.is_available():
        result = {"device": "cuda", "skipped": "CUDA is not available on this machine"}
    else:
        with tempfile.TemporaryDirectory(prefix="mad-bench-") as workdir:
            if args.device == "cpu":
                result = run_cpu(args.images, args.batch_size or 64, args.rounds, Path(workdir))
            else:
                result = run_cuda(
                    args.images, args.batch_size or 256, args.compile, args.model, Path(workdir)
                )
    if args.json:
        print(json.dumps(result))
    else:
        for name, value in result.items():
            print(f"{name:>28}: {value}")


if __name__ == "__main__":
    main()
