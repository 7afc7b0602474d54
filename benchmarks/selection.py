"""Benchmark MAD selection (Algorithm 1): 20 classifiers (190 pairs) × 1,000,000 images × 1,000 classes.

Synthetic top-1 predictions over the ImageNet-1k distance matrix. Prints the seconds for all pairs, the peak
memory (tracemalloc during selection, and the process's max RSS), and the speed ratio against a per-row
Python implementation run in this process on a subsample and scaled to the full size; checks that both give
identical selections on that subsample. Then what select jobs add to it: the same pairs under the quantile
threshold rule (ratio to the absolute rule's), and every pair's diagnosis (each classifier's quantiles
computed once, as a worker keeps them) as a ratio to selecting the pairs one at a time, as select jobs do.

    .venv/bin/python benchmarks/selection.py [--json] [--classifiers 20] [--images 1000000]
"""

from __future__ import annotations

import argparse
import json
import resource
import time
import tracemalloc
from itertools import combinations

import numpy as np

from app.core.selection import (
    DEFAULT_K,
    DEFAULT_MAX_PER_LABEL,
    DEFAULT_THRESHOLD,
    ThresholdRule,
    diagnose_pair,
    diagnosis_quantiles,
    select_all_pairs,
    select_pair,
)
from app.core.taxonomy_sources import imagenet_1k


def synthetic_predictions(n_classifiers: int, n_images: int, n_classes: int, seed: int):
    """Top-1 labels (int16) and probabilities (float32): accuracy 85% → 70%, wrong labels uniform."""
    rng = np.random.default_rng(seed)
    truth = rng.integers(0, n_classes, n_images)
    accuracy = np.linspace(0.85, 0.70, n_classifiers)[:, None]
    right = rng.random((n_classifiers, n_images)) < accuracy
    labels = np.where(right, truth, rng.integers(0, n_classes, (n_classifiers, n_images))).astype(np.int16)
    probs = np.where(right, rng.beta(5, 1, right.shape), rng.beta(2, 2, right.shape)).astype(np.float32)
    return labels, probs


def per_row_selection(labels_i, probs_i, labels_j, probs_j, distance, k, threshold, cap):
    """Algorithm 1 written plainly: one Python loop over images, a sort, a greedy loop; k + k reserve."""
    rows = []
    for x, (a, b, p, q) in enumerate(zip(labels_i, labels_j, probs_i, probs_j, strict=True)):
        if a >= 0 and b >= 0 and a != b and min(p, q) >= threshold:
            rows.append((-distance[a][b], -min(p, q), x, a, b))
    rows.sort()
    used_i: dict[int, int] = {}
    used_j: dict[int, int] = {}
    accepted = []
    for _, _, x, a, b in rows:
        if len(accepted) == 2 * k:
            break
        if used_i.get(a, 0) < cap and used_j.get(b, 0) < cap:
            accepted.append(x)
            used_i[a] = used_i.get(a, 0) + 1
            used_j[b] = used_j.get(b, 0) + 1
    return accepted


def run(n_classifiers: int, n_images: int, subsample: int, reference_pairs: int, seed: int) -> dict:
    """Time the vectorised selection, trace its memory, time the per-row version on a subsample."""
    started = time.perf_counter()
    distance = imagenet_1k().distance_matrix()
    matrix_seconds = time.perf_counter() - started
    labels, probs = synthetic_predictions(n_classifiers, n_images, len(distance), seed)
    n_pairs = n_classifiers * (n_classifiers - 1) // 2

    started = time.perf_counter()
    selections = select_all_pairs(labels, probs, distance)
    vectorised_seconds = time.perf_counter() - started

    tracemalloc.start()
    select_all_pairs(labels, probs, distance)
    _, traced_peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()

    started = time.perf_counter()
    select_all_pairs(labels, probs, distance, rule=ThresholdRule.quantile)
    quantile_seconds = time.perf_counter() - started
    started = time.perf_counter()  # as select jobs run it: one pair at a time
    for i, j in selections:
        select_pair(labels[i], probs[i], labels[j], probs[j], distance)
    per_job_seconds = time.perf_counter() - started
    started = time.perf_counter()  # as a worker runs them: each classifier's quantiles once, then each pair
    kept = [diagnosis_quantiles(labels[i], probs[i], DEFAULT_THRESHOLD, None) for i in range(n_classifiers)]
    for (i, j), selection in selections.items():
        found = (labels[i], probs[i], labels[j], probs[j])
        diagnose_pair(*found, selected=selection.n_selected, quantiles=(kept[i], kept[j]))
    diagnosis_seconds = time.perf_counter() - started

    pairs = list(combinations(range(n_classifiers), 2))[:reference_pairs]
    sub_labels, sub_probs = labels[:, :subsample], probs[:, :subsample]
    sub_vectorised = select_all_pairs(sub_labels, sub_probs, distance, pairs=pairs)
    distance_rows = distance.tolist()
    started = time.perf_counter()
    identical = True
    for i, j in pairs:
        plain = per_row_selection(
            sub_labels[i].tolist(),
            sub_probs[i].tolist(),
            sub_labels[j].tolist(),
            sub_probs[j].tolist(),
            distance_rows,
            DEFAULT_K,
            DEFAULT_THRESHOLD,
            DEFAULT_MAX_PER_LABEL,
        )
        identical &= plain == sub_vectorised[(i, j)].ordinals.tolist()
    per_row_seconds = time.perf_counter() - started
    per_row_scaled = per_row_seconds * (n_pairs / len(pairs)) * (n_images / subsample)
    return {
        "classifiers": n_classifiers,
        "pairs": n_pairs,
        "images": n_images,
        "classes": len(distance),
        "distance_matrix_seconds": round(matrix_seconds, 3),
        "selection_seconds": round(vectorised_seconds, 3),
        "selected_per_pair_min": min(len(selection.selected) for selection in selections.values()),
        "traced_peak_mib": round(traced_peak / 2**20, 1),
        "max_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        "per_row_subsample": {"images": subsample, "pairs": len(pairs), "seconds": round(per_row_seconds, 3)},
        "per_row_scaled_seconds": round(per_row_scaled, 1),
        "speedup": round(per_row_scaled / vectorised_seconds, 1),
        "identical_on_subsample": identical,
        "quantile_selection_seconds": round(quantile_seconds, 3),
        "quantile_ratio": round(quantile_seconds / vectorised_seconds, 2),
        "per_pair_selection_seconds": round(per_job_seconds, 3),
        "diagnosis_seconds": round(diagnosis_seconds, 3),
        "diagnosis_ratio": round(diagnosis_seconds / per_job_seconds, 2),
    }


def print_table(result: dict) -> None:
    """A readable summary of one benchmark run."""
    from rich.console import Console
    from rich.table import Table

    table = Table(title="MAD selection benchmark (Algorithm 1)")
    table.add_column("measure")
    table.add_column("value", justify="right")
    sub = result["per_row_subsample"]
    rows = [
        ("size", f"{result['pairs']} pairs × {result['images']:,} images × {result['classes']} classes"),
        ("distance matrix build", f"{result['distance_matrix_seconds']} s"),
        ("selection, all pairs", f"{result['selection_seconds']} s"),
        ("peak traced memory during selection", f"{result['traced_peak_mib']} MiB"),
        ("process max RSS", f"{result['max_rss_mib']} MiB"),
        ("per-row Python on subsample", f"{sub['seconds']} s ({sub['pairs']} pairs × {sub['images']:,} img)"),
        ("per-row Python scaled to full size", f"{result['per_row_scaled_seconds']} s"),
        ("speedup", f"{result['speedup']}×"),
        ("identical selections on subsample", str(result["identical_on_subsample"])),
        (
            "selection, quantile rule",
            f"{result['quantile_selection_seconds']} s ({result['quantile_ratio']}×)",
        ),
        ("selection one pair at a time (select jobs)", f"{result['per_pair_selection_seconds']} s"),
        ("diagnoses, all pairs", f"{result['diagnosis_seconds']} s ({result['diagnosis_ratio']}× the above)"),
    ]
    for row in rows:
        table.add_row(*row)
    Console().print(table)


def main() -> None:
    parser = argparse.ArgumentParser(description="Benchmark MAD top-k selection over all classifier pairs.")
    parser.add_argument("--classifiers", type=int, default=20)
    parser.add_argument("--images", type=int, default=1_000_000)
    parser.add_argument("--subsample", type=int, default=20_000, help="images for the per-row comparison")
    parser.add_argument("--reference-pairs", type=int, default=5, help="pairs for the per-row comparison")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    args = parser.parse_args()
    result = run(args.classifiers, args.images, args.subsample, args.reference_pairs, args.seed)
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print_table(result)
    if not result["identical_on_subsample"]:
        raise SystemExit("vectorised and per-row selections differ")


if __name__ == "__main__":
    main()
