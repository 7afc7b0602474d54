"""Top-k maximum-discrepancy image selection for pairs of classifiers (paper Algorithm 1, Sec. 3.1).

Inputs are per-classifier arrays aligned by image ordinal: the top-1 label (int, -1 = no prediction) and its
probability. For a pair (i, j) an image is a candidate when both labels exist and differ, min(p_i, p_j) ≥ T
and the image is not excluded. Candidates are ordered by d(f_i(x), f_j(x)) descending, ties broken by the
higher min(p_i, p_j), then by the lower ordinal. A greedy pass in that order accepts an image while fewer
than `max_per_label` accepted images share its f_i label (counted over f_i's labels) and fewer than
`max_per_label` share its f_j label (counted over f_j's labels). The first k accepted images are the
selection; the pass goes on for `reserve_size` more, the ordered reserve that replaces discarded images,
so the per-label cap holds over selection and reserve together.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from itertools import combinations

import numpy as np

DEFAULT_K = 30
DEFAULT_THRESHOLD = 0.8
DEFAULT_MAX_PER_LABEL = 3
_POOL_FACTOR = 8  # first candidate pool: this many times the images needed; ×4 while the cap rejects more


@dataclass(frozen=True)
class PairSelection:
    """Accepted images of one pair in greedy order: the first `n_selected` are S_ij, the rest its reserve."""

    ordinals: np.ndarray
    distances: np.ndarray
    labels_i: np.ndarray
    labels_j: np.ndarray
    probs_i: np.ndarray
    probs_j: np.ndarray
    n_selected: int

    @property
    def selected(self) -> np.ndarray:
        """Ordinals of the k selected images, by decreasing discrepancy."""
        return self.ordinals[: self.n_selected]

    @property
    def reserve(self) -> np.ndarray:
        """Ordinals of the reserve, in the order they replace discarded images."""
        return self.ordinals[self.n_selected :]


def eligible(
    labels: np.ndarray, probs: np.ndarray, threshold: float, excluded: np.ndarray | None
) -> np.ndarray:
    """Images one classifier can contribute: label ≥ 0, p ≥ T, not excluded (Sec. 3.1)."""
    mask = (labels >= 0) & (probs >= threshold)
    if excluded is not None:
        mask &= ~excluded
    return mask


def select_pair(
    labels_i: np.ndarray,
    probs_i: np.ndarray,
    labels_j: np.ndarray,
    probs_j: np.ndarray,
    distance: np.ndarray,
    *,
    k: int = DEFAULT_K,
    threshold: float = DEFAULT_THRESHOLD,
    max_per_label: int = DEFAULT_MAX_PER_LABEL,
    reserve_size: int | None = None,
    excluded: np.ndarray | None = None,
) -> PairSelection:
    """S_ij = greedy top-k by d(f_i(x), f_j(x)) with a per-label cap, then the reserve (Algorithm 1)."""
    labels = np.stack([np.asarray(labels_i), np.asarray(labels_j)])
    probs = np.stack([np.asarray(probs_i), np.asarray(probs_j)])
    return select_all_pairs(
        labels,
        probs,
        distance,
        pairs=[(0, 1)],
        k=k,
        threshold=threshold,
        max_per_label=max_per_label,
        reserve_size=reserve_size,
        excluded=excluded,
    )[(0, 1)]


def select_all_pairs(
    labels: np.ndarray,
    probs: np.ndarray,
    distance: np.ndarray,
    *,
    pairs: Iterable[tuple[int, int]] | None = None,
    k: int = DEFAULT_K,
    threshold: float = DEFAULT_THRESHOLD,
    max_per_label: int = DEFAULT_MAX_PER_LABEL,
    reserve_size: int | None = None,
    excluded: np.ndarray | None = None,
) -> dict[tuple[int, int], PairSelection]:
    """Algorithm 1 for every pair i < j of m×n label and probability arrays, or for `pairs` (Algorithm 2)."""
    labels, probs, distance = _checked_inputs(labels, probs, distance, excluded)
    if k < 0 or max_per_label < 1:
        raise ValueError("k must be ≥ 0 and max_per_label ≥ 1")
    need = k + (k if reserve_size is None else reserve_size)
    pair_list = list(combinations(range(len(labels)), 2) if pairs is None else pairs)
    if any(not 0 <= i < j < len(labels) for i, j in pair_list):
        raise ValueError(f"pairs must be (i, j) with 0 ≤ i < j < {len(labels)}")
    used = sorted({index for pair in pair_list for index in pair})
    masks = {index: eligible(labels[index], probs[index], threshold, excluded) for index in used}
    flat_distance = np.ascontiguousarray(distance).ravel()

    return {
        (i, j): _select(
            labels[i],
            probs[i],
            labels[j],
            probs[j],
            masks[i] & masks[j],
            flat_distance,
            len(distance),
            need,
            k,
            max_per_label,
        )
        for i, j in pair_list
    }


def _checked_inputs(
    labels: np.ndarray, probs: np.ndarray, distance: np.ndarray, excluded: np.ndarray | None
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Validate shapes and label range; labels as int arrays, probabilities as floats."""
    labels, probs, distance = np.asarray(labels), np.asarray(probs), np.asarray(distance, dtype=np.float64)
    if labels.ndim != 2 or labels.shape != probs.shape:
        raise ValueError(f"labels and probs must both be m×n, got {labels.shape} and {probs.shape}")
    if distance.ndim != 2 or distance.shape[0] != distance.shape[1]:
        raise ValueError(f"distance must be a square C×C matrix, got {distance.shape}")
    if not np.issubdtype(labels.dtype, np.integer):
        raise ValueError(f"labels must be integers, got {labels.dtype}")
    if labels.size and (labels.max() >= len(distance) or labels.min() < -1):
        raise ValueError(f"labels must lie in [-1, {len(distance) - 1}]")
    if excluded is not None and (excluded.dtype != bool or excluded.shape != labels.shape[1:]):
        raise ValueError(f"excluded must be a boolean mask of shape ({labels.shape[1]},)")
    if not np.issubdtype(probs.dtype, np.floating):
        probs = probs.astype(np.float64)
    return labels, probs, distance


def _select(
    labels_i: np.ndarray,
    probs_i: np.ndarray,
    labels_j: np.ndarray,
    probs_j: np.ndarray,
    both_eligible: np.ndarray,
    flat_distance: np.ndarray,
    n_classes: int,
    need: int,
    k: int,
    max_per_label: int,
) -> PairSelection:
    """Candidates of one pair, their exact key order over a growing pool, then the capped greedy pass."""
    ordinals = np.flatnonzero(both_eligible)
    label_i, label_j = labels_i[ordinals], labels_j[ordinals]
    differ = label_i != label_j
    ordinals, label_i, label_j = ordinals[differ], label_i[differ], label_j[differ]
    min_prob = np.minimum(probs_i[ordinals], probs_j[ordinals])
    distances = flat_distance[label_i.astype(np.int64) * n_classes + label_j]
    pool_size = _POOL_FACTOR * max(need, 8)
    while True:
        order = _top_in_key_order(distances, min_prob, pool_size)
        accepted = order[_capped_greedy(label_i[order], label_j[order], n_classes, max_per_label, need)]
        if len(accepted) == need or len(order) == len(ordinals):
            break
        pool_size *= 4
    return PairSelection(
        ordinals=ordinals[accepted],
        distances=distances[accepted],
        labels_i=label_i[accepted],
        labels_j=label_j[accepted],
        probs_i=probs_i[ordinals[accepted]],
        probs_j=probs_j[ordinals[accepted]],
        n_selected=min(k, len(accepted)),
    )


def _top_in_key_order(distances: np.ndarray, min_prob: np.ndarray, size: int) -> np.ndarray:
    """Indices of the first `size` candidates by (d desc, min p desc, ordinal asc), in that order.

    Candidates come in ascending ordinal order, so index order is ordinal order. Two partitions find the
    exact boundary (distance, then min p among distance ties) without sorting every candidate.
    """
    count = len(distances)
    if size >= count:
        pool = np.arange(count)
    else:
        cut = np.partition(distances, count - size)[count - size]
        above = np.flatnonzero(distances > cut)
        tied = np.flatnonzero(distances == cut)
        room = size - len(above)
        tied_prob = min_prob[tied]
        prob_cut = np.partition(tied_prob, len(tied) - room)[len(tied) - room]
        tied_above = tied[tied_prob > prob_cut]
        tied_at = tied[tied_prob == prob_cut][: room - len(tied_above)]
        pool = np.concatenate([above, tied_above, tied_at])
    return pool[np.lexsort((pool, -min_prob[pool], -distances[pool]))]


def _occurrence_rank(values: np.ndarray) -> np.ndarray:
    """For each element, how many earlier elements hold the same value (0 for the first occurrence)."""
    order = np.argsort(values, kind="stable")
    sorted_values = values[order]
    group_start = np.flatnonzero(np.r_[True, sorted_values[1:] != sorted_values[:-1]])
    group_sizes = np.diff(np.r_[group_start, len(values)])
    rank = np.empty(len(values), dtype=np.int64)
    rank[order] = np.arange(len(values)) - np.repeat(group_start, group_sizes)
    return rank


def _capped_greedy(
    label_i: np.ndarray, label_j: np.ndarray, n_classes: int, cap: int, need: int
) -> np.ndarray:
    """Positions accepted by the in-order greedy pass with ≤ cap per f_i label and ≤ cap per f_j label.

    Vectorised in rounds: drop images whose label is full, rank the rest by earlier occurrences of their
    labels, accept the prefix before the first image that would overflow (those counts are exact), reject
    that image (its label is now full). Each round fills a label, so there are at most 2·need/cap rounds.
    """
    used_i = np.zeros(n_classes, dtype=np.int64)
    used_j = np.zeros(n_classes, dtype=np.int64)
    remaining = np.arange(len(label_i))
    accepted: list[np.ndarray] = []
    total = 0
    while total < need and len(remaining):
        a, b = label_i[remaining], label_j[remaining]
        room_i, room_j = cap - used_i[a], cap - used_j[b]
        open_ = (room_i > 0) & (room_j > 0)
        remaining, a, b, room_i, room_j = remaining[open_], a[open_], b[open_], room_i[open_], room_j[open_]
        fits = (_occurrence_rank(a) < room_i) & (_occurrence_rank(b) < room_j)
        first_overflow = len(fits) if fits.all() else int(np.argmin(fits))
        take = remaining[: min(first_overflow, need - total)]
        accepted.append(take)
        total += len(take)
        np.add.at(used_i, label_i[take], 1)
        np.add.at(used_j, label_j[take], 1)
        remaining = remaining[first_overflow + 1 :]
    return np.concatenate(accepted) if accepted else np.empty(0, dtype=np.int64)
