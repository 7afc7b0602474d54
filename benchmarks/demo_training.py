"""Benchmark the demo's training: each of its five timm classifiers on its own slice of the digits, on the
demo's one intra-op thread (app/demo/training.py, DEMO_THREADS) and, as the baseline in the same run, on
torch's default (one thread per core).

The figure is the seconds per model and in all on each thread count, and the ratio default / demo. The
models and batches are tiny (16 px, 32 images a step), so a second thread mostly waits at its barriers; how
much that costs depends on what else the machine runs: give the load average beside the figures.

    .venv/bin/python benchmarks/demo_training.py [--json] [--steps 60] [--rounds 2]
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path

import torch

from app.demo.corpus import write_corpus
from app.demo.run import DATA_CONFIG, DEMO_CLASSIFIERS, training_split
from app.demo.training import DEMO_THREADS, torch_threads, train_classifier


def run(steps: int, rounds: int) -> dict:
    """Train every demo model `rounds` times on each thread count, alternating; the best time of each."""
    default_threads = torch.get_num_threads()
    with tempfile.TemporaryDirectory() as folder:
        corpus = write_corpus(Path(folder))
        slices, _held_out = training_split(corpus)
        seconds: dict[int, dict[str, float]] = {DEMO_THREADS: {}, default_threads: {}}
        for _ in range(rounds):
            for threads in seconds:
                for seed, ((architecture, _share), indices) in enumerate(
                    zip(DEMO_CLASSIFIERS, slices, strict=True)
                ):
                    paths, digits = [corpus.paths[i] for i in indices], corpus.digits[indices]
                    with torch_threads(threads):
                        started = time.perf_counter()
                        train_classifier.__wrapped__(  # undecorated: on the threads set here
                            architecture, paths, digits, DATA_CONFIG, steps=steps, seed=seed
                        )
                        took = time.perf_counter() - started
                    best = seconds[threads].get(architecture, float("inf"))
                    seconds[threads][architecture] = min(best, took)
    demo, baseline = seconds[DEMO_THREADS], seconds[default_threads]
    return {
        "steps": steps,
        "rounds": rounds,
        "load_average": os.getloadavg(),
        "cores": os.cpu_count(),
        "demo_threads": DEMO_THREADS,
        "default_threads": default_threads,
        "seconds_demo": demo,
        "seconds_default": baseline,
        "total_demo": sum(demo.values()),
        "total_default": sum(baseline.values()),
        "ratio_default_to_demo": sum(baseline.values()) / sum(demo.values()),
    }


def main() -> None:
    """Parse the arguments, run, print."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--steps", type=int, default=60, help="mini-batches per model (the demo's default)")
    parser.add_argument(
        "--rounds", type=int, default=2, help="runs per model and thread count; the best counts"
    )
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args()
    result = run(args.steps, args.rounds)
    if args.json:
        print(json.dumps(result, indent=2))
        return
    for architecture in result["seconds_demo"]:
        print(
            f"{architecture:24s} {result['seconds_demo'][architecture]:7.2f} s on {DEMO_THREADS} thread, "
            f"{result['seconds_default'][architecture]:7.2f} s on {result['default_threads']}"
        )
    print(
        f"all five: {result['total_demo']:.1f} s on {DEMO_THREADS} thread, "
        f"{result['total_default']:.1f} s on {result['default_threads']} (torch's default): "
        f"{result['ratio_default_to_demo']:.1f}× "
        f"(load average {result['load_average'][0]:.1f} on {result['cores']} cores)"
    )


if __name__ == "__main__":
    main()
