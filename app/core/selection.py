"""Top-k maximum-discrepancy image selection for pairs of classifiers (paper Algorithm 1, Sec. 3.1).

Inputs are per-classifier arrays aligned by image ordinal: the top-1 label (int, -1 = no prediction) and its
probability. For a pair (i, j) an image is a candidate when both labels exist and differ, p_i ≥ c_i and
p_j ≥ c_j, and the image is not excluded. The cutoff c_i comes from the competition's threshold rule:
`absolute`, c_i = T for every classifier (the paper's min(p_i, p_j) ≥ T); or `quantile`, c_i = the T-quantile
of classifier i's own top-1 probabilities over the corpus (the images it predicts that are not excluded), so
that each classifier's most confident share 1 − T passes whatever its calibration. Candidates are ordered
by d(f_i(x), f_j(x)) descending, ties broken by the higher min(p_i, p_j), then by the lower ordinal. A greedy
pass in that order accepts an image while fewer than `max_per_label` accepted images share its f_i label
(counted over f_i's labels) and fewer than `max_per_label` share its f_j label (counted over f_j's labels).
The first k accepted images are the selection; the pass goes on for `reserve_size` more, the ordered
reserve that replaces discarded images, so the per-label cap holds over selection and reserve together.

`fill` takes the candidates of `absolute` first, in the same order (so where they are enough it selects
exactly what `absolute` selects), then every other disagreement of the pair in the same order (distance
descending, then the higher min(p_i, p_j), then the lower ordinal), the greedy pass and its cap running on
over both: a pair with at least k disagreements gets k images (the cap permitting), and
`PairSelection.passed` marks which passed T.

A pair's diagnosis (`diagnose_pair`) says how its selection went: its disagreements, how many pass the
threshold, and how many would pass others (`app/core/shortfall.py` says it in words).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from itertools import combinations
from typing import Any

import numpy as np

from app.core.threshold_rule import ThresholdRule

DEFAULT_K = 30
DEFAULT_THRESHOLD = 0.8
DEFAULT_MAX_PER_LABEL = 3
_POOL_FACTOR = 8  # first candidate pool: this many times the images needed; ×4 while the cap rejects more


DIAGNOSED_THRESHOLDS = (
    (ThresholdRule.absolute, (0.3, 0.5, 0.7, 0.8, 0.9)),
    (ThresholdRule.quantile, (0.5, 0.7, 0.8, 0.9)),
)
"""The thresholds a pair's diagnosis counts its surviving disagreements at, besides its own."""
Quantiles = Mapping[float, np.floating]
"""A classifier's own top-1 probability quantile Q(q) by level q."""


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
    passed: np.ndarray
    """Whether each image passed the threshold (every image but those a `fill` selection added below T)."""

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
    """Images one classifier can contribute: label ≥ 0, p ≥ its cutoff c, not excluded (Sec. 3.1)."""
    mask = (labels >= 0) & (probs >= threshold)
    if excluded is not None:
        mask &= ~excluded
    return mask


def own_quantiles(
    labels: np.ndarray, probs: np.ndarray, levels: Iterable[float], excluded: np.ndarray | None
) -> np.ndarray:
    """Q_i(q) for each level q: numpy's (linear) quantile of one classifier's top-1 probabilities over the
    images it predicts that are not excluded; 1 at every level when there is no such image."""
    levels = np.asarray(list(levels), dtype=np.float64)
    if ((levels < 0) | (levels > 1)).any():
        raise ValueError("a quantile threshold lies in [0, 1]")
    own = labels >= 0
    if excluded is not None:
        own &= ~excluded
    return np.quantile(probs[own], levels) if own.any() else np.ones_like(levels)


def confidence_cutoffs(
    labels: np.ndarray,
    probs: np.ndarray,
    threshold: float,
    rule: ThresholdRule,
    excluded: np.ndarray | None = None,
    quantiles: Sequence[Quantiles] | None = None,
) -> np.ndarray:
    """c_i of each row of m×n labels and probabilities: T (absolute, fill) or Q_i(T) (quantile), read from
    the rows' `quantiles` when the caller keeps them."""
    if rule != ThresholdRule.quantile:
        return np.full(len(labels), float(threshold))
    if quantiles is not None:
        return np.array([own[float(threshold)] for own in quantiles])
    return np.array(
        [own_quantiles(row, p, [threshold], excluded)[0] for row, p in zip(labels, probs, strict=True)]
    )


def diagnosis_quantiles(
    labels: np.ndarray, probs: np.ndarray, threshold: float, excluded: np.ndarray | None
) -> Quantiles:
    """Q(q) of one classifier at T and at each diagnosed quantile level: all that its pairs' selections and
    diagnoses need, computed once per classifier (a partition of the corpus) instead of once per pair."""
    levels = sorted({*dict(DIAGNOSED_THRESHOLDS)[ThresholdRule.quantile], float(threshold)})
    return dict(zip(levels, own_quantiles(labels, probs, levels, excluded), strict=True))


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
    rule: ThresholdRule = ThresholdRule.absolute,
    quantiles: tuple[Quantiles, Quantiles] | None = None,
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
        rule=rule,
        quantiles=quantiles,
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
    rule: ThresholdRule = ThresholdRule.absolute,
    quantiles: Sequence[Quantiles] | None = None,
) -> dict[tuple[int, int], PairSelection]:
    """Algorithm 1 for every pair i < j of m×n label and probability arrays, or for `pairs` (Algorithm 2);
    each row's `quantiles` (diagnosis_quantiles) spare computing its quantile cutoff again."""
    labels, probs, distance = _checked_inputs(labels, probs, distance, excluded)
    if k < 0 or max_per_label < 1:
        raise ValueError("k must be ≥ 0 and max_per_label ≥ 1")
    need = k + (k if reserve_size is None else reserve_size)
    pair_list = list(combinations(range(len(labels)), 2) if pairs is None else pairs)
    if any(not 0 <= i < j < len(labels) for i, j in pair_list):
        raise ValueError(f"pairs must be (i, j) with 0 ≤ i < j < {len(labels)}")
    used = sorted({index for pair in pair_list for index in pair})
    own = None if quantiles is None else [quantiles[index] for index in used]
    cutoffs = confidence_cutoffs(labels[used], probs[used], threshold, rule, excluded, own)
    masks = {
        index: eligible(labels[index], probs[index], cutoff, excluded)
        for index, cutoff in zip(used, cutoffs, strict=True)
    }
    predicted = {index: eligible(labels[index], probs[index], -np.inf, excluded) for index in used}
    flat_distance = np.ascontiguousarray(distance).ravel()

    return {
        (i, j): _select(
            labels[i],
            probs[i],
            labels[j],
            probs[j],
            (predicted[i] & predicted[j]) if rule == ThresholdRule.fill else (masks[i] & masks[j]),
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
    candidates: np.ndarray,
    passing: np.ndarray,
    flat_distance: np.ndarray,
    n_classes: int,
    need: int,
    k: int,
    max_per_label: int,
) -> PairSelection:
    """The capped greedy pass over a pair's candidates that pass the threshold, then (`fill`: when the
    candidates include others) over the rest, the per-label counts running on."""
    ordinals = np.flatnonzero(candidates)
    label_i, label_j = labels_i[ordinals], labels_j[ordinals]
    differ = label_i != label_j
    ordinals, label_i, label_j = ordinals[differ], label_i[differ], label_j[differ]
    min_prob = np.minimum(probs_i[ordinals], probs_j[ordinals])
    distances = flat_distance[label_i.astype(np.int64) * n_classes + label_j]
    passed = passing[ordinals]
    used = (np.zeros(n_classes, dtype=np.int64), np.zeros(n_classes, dtype=np.int64))
    accepted = np.empty(0, dtype=np.int64)
    for tier in (np.flatnonzero(passed), np.flatnonzero(~passed)):
        if len(tier) and len(accepted) < need:
            taken = tier[
                _accept(
                    label_i[tier],
                    label_j[tier],
                    distances[tier],
                    min_prob[tier],
                    used,
                    need - len(accepted),
                    max_per_label,
                )
            ]
            accepted = np.concatenate([accepted, taken])
    return PairSelection(
        ordinals=ordinals[accepted],
        distances=distances[accepted],
        labels_i=label_i[accepted],
        labels_j=label_j[accepted],
        probs_i=probs_i[ordinals[accepted]],
        probs_j=probs_j[ordinals[accepted]],
        n_selected=min(k, len(accepted)),
        passed=passed[accepted],
    )


def _accept(
    label_i: np.ndarray,
    label_j: np.ndarray,
    distances: np.ndarray,
    min_prob: np.ndarray,
    used: tuple[np.ndarray, np.ndarray],
    need: int,
    cap: int,
) -> np.ndarray:
    """Positions the capped greedy pass accepts, in key order, sorting only a pool of the best candidates
    that grows ×4 while the cap rejects; `used` (labels already accepted) is updated."""
    pool_size = _POOL_FACTOR * max(need, 8)
    while True:
        order = _top_in_key_order(distances, min_prob, pool_size)
        accepted = order[_capped_greedy(label_i[order], label_j[order], used, cap, need)]
        if len(accepted) == need or len(order) == len(distances):
            break
        pool_size *= 4
    np.add.at(used[0], label_i[accepted], 1)
    np.add.at(used[1], label_j[accepted], 1)
    return accepted


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
    label_i: np.ndarray, label_j: np.ndarray, used: tuple[np.ndarray, np.ndarray], cap: int, need: int
) -> np.ndarray:
    """Positions accepted by the in-order greedy pass with ≤ cap per f_i label and ≤ cap per f_j label,
    counting the `used` labels accepted before (left unchanged).

    Vectorised in rounds: drop images whose label is full, rank the rest by earlier occurrences of their
    labels, accept the prefix before the first image that would overflow (those counts are exact), reject
    that image (its label is now full). Each round fills a label, so there are at most 2·need/cap rounds.
    """
    used_i, used_j = used[0].copy(), used[1].copy()
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


@dataclass(frozen=True)
class Survivors:
    """How many of a pair's disagreements pass one threshold."""

    rule: ThresholdRule
    threshold: float
    images: int


@dataclass(frozen=True)
class PairDiagnosis:
    """How a pair's selection went. `disagreements`: images both classifiers predict, with different labels,
    not excluded; `confident`: those that pass the threshold the pair was selected under (cutoffs c_i, c_j),
    Algorithm 1's candidates; `most_confident`: the largest min(p_i, p_j) over the disagreements;
    `selected`: the images Algorithm 1 selected (≤ k); `survivors`: those passing DIAGNOSED_THRESHOLDS."""

    rule: ThresholdRule
    threshold: float
    cutoffs: tuple[float, float]
    disagreements: int
    confident: int
    most_confident: float | None
    selected: int
    survivors: tuple[Survivors, ...]

    def as_dict(self) -> dict[str, Any]:
        """The diagnosis in plain JSON values, as it is sent and stored."""
        data = asdict(self)
        data["rule"], data["cutoffs"] = self.rule.value, list(self.cutoffs)
        data["survivors"] = [dict(item, rule=item["rule"].value) for item in data["survivors"]]
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> PairDiagnosis:
        """The diagnosis from its JSON values (as_dict)."""
        most_confident = data["most_confident"]
        return cls(
            rule=ThresholdRule(data["rule"]),
            threshold=float(data["threshold"]),
            cutoffs=(float(data["cutoffs"][0]), float(data["cutoffs"][1])),
            disagreements=int(data["disagreements"]),
            confident=int(data["confident"]),
            most_confident=None if most_confident is None else float(most_confident),
            selected=int(data["selected"]),
            survivors=tuple(
                Survivors(ThresholdRule(item["rule"]), float(item["threshold"]), int(item["images"]))
                for item in data["survivors"]
            ),
        )


def diagnose_pair(
    labels_i: np.ndarray,
    probs_i: np.ndarray,
    labels_j: np.ndarray,
    probs_j: np.ndarray,
    *,
    selected: int,
    threshold: float = DEFAULT_THRESHOLD,
    rule: ThresholdRule = ThresholdRule.absolute,
    excluded: np.ndarray | None = None,
    quantiles: tuple[Quantiles, Quantiles] | None = None,
) -> PairDiagnosis:
    """Count a pair's disagreements, those passing its own threshold and those passing each of
    DIAGNOSED_THRESHOLDS: an image passes (rule, T) when p_i ≥ c_i and p_j ≥ c_j (confidence_cutoffs, with
    the same number types, so that `confident` counts exactly Algorithm 1's candidates). `quantiles`: both
    classifiers' diagnosis_quantiles, when the caller keeps them."""
    labels_i, labels_j = np.asarray(labels_i), np.asarray(labels_j)
    dtype = np.result_type(probs_i, probs_j)
    dtype = dtype if np.issubdtype(dtype, np.floating) else np.dtype(np.float64)
    probs_i, probs_j = np.asarray(probs_i, dtype=dtype), np.asarray(probs_j, dtype=dtype)
    if not labels_i.shape == labels_j.shape == probs_i.shape == probs_j.shape or labels_i.ndim != 1:
        raise ValueError("labels and probabilities must be equally long 1-D arrays")
    differ = (labels_i >= 0) & (labels_j >= 0) & (labels_i != labels_j)
    if excluded is not None:
        differ &= ~excluded
    disagreeing = np.flatnonzero(differ)  # a gather after one scan: indexing by the mask twice costs ~10×
    p_i, p_j = probs_i[disagreeing], probs_j[disagreeing]
    if quantiles is None:
        quantiles = (
            diagnosis_quantiles(labels_i, probs_i, threshold, excluded),
            diagnosis_quantiles(labels_j, probs_j, threshold, excluded),
        )

    def cutoffs_of(rule_: ThresholdRule, level: float) -> tuple[np.floating, np.floating]:
        """(c_i, c_j) under one threshold."""
        if rule_ != ThresholdRule.quantile:
            return np.float64(level), np.float64(level)
        return quantiles[0][level], quantiles[1][level]

    weakest = np.minimum(p_i, p_j)

    def passing(cutoffs: tuple[np.floating, np.floating]) -> int:
        """Disagreements with p_i ≥ c_i and p_j ≥ c_j (min(p_i, p_j) ≥ c when both cutoffs are c)."""
        if cutoffs[0] == cutoffs[1]:
            return int(np.count_nonzero(weakest >= cutoffs[0]))
        return int(np.count_nonzero((p_i >= cutoffs[0]) & (p_j >= cutoffs[1])))

    own = cutoffs_of(rule, threshold)
    return PairDiagnosis(
        rule=rule,
        threshold=float(threshold),
        cutoffs=(float(own[0]), float(own[1])),
        disagreements=len(p_i),
        confident=passing(own),
        most_confident=float(weakest.max()) if len(p_i) else None,
        selected=selected,
        survivors=tuple(
            Survivors(rule_, level, passing(cutoffs_of(rule_, level)))
            for rule_, rule_levels in DIAGNOSED_THRESHOLDS
            for level in rule_levels
        ),
    )
