"""What a MAD competition reveals beyond its ranking.

Rank correlations and the stability of the ranking versus k (paper Sec. 3.2, Fig. 5); the shares of Case
I/II/III images (Sec. 3.1); C- and X-perplexity per image (Zhang et al., "Example Perplexity", Sec. 2);
worst-class precision and the worst WordNet superclass per classifier, measured on MAD labels (Bitterwolf
et al., "Classifiers Should Do Well Even on Their Worst Classes", Sec. 2).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike
from scipy.stats import kendalltau, spearmanr

from app.core.ranking import (
    DEFAULT_ALPHA,
    PairCounts,
    PairOutcomes,
    count_outcomes,
    scored_perron,
)
from app.core.taxonomy import Taxonomy


def srcc(x: ArrayLike, y: ArrayLike) -> float:
    """Spearman's ρ between two scorings or rankings of the same classifiers (NaN if one is constant)."""
    return float(spearmanr(x, y).statistic) if _varies(x) and _varies(y) else math.nan


def krcc(x: ArrayLike, y: ArrayLike) -> float:
    """Kendall's τ-b between two scorings or rankings of the same classifiers (NaN if one is constant)."""
    return float(kendalltau(x, y).statistic) if _varies(x) and _varies(y) else math.nan


def _varies(values: ArrayLike) -> bool:
    """Whether a ranking separates at least two classifiers (a correlation is defined)."""
    values = np.asarray(values, dtype=np.float64)
    return values.size > 1 and bool(np.ptp(values) > 0)


@dataclass(frozen=True)
class StabilityCurve:
    """SRCC between the top-k reference ranking and the ranking from each pair's first k' images."""

    k: int
    k_prime: np.ndarray
    srcc: np.ndarray


def ranking_stability(
    outcomes: PairOutcomes, m: int, k: int | None = None, alpha: float = DEFAULT_ALPHA
) -> StabilityCurve:
    """SRCC(r_k, r_k') for k' = 1..k−1, r from each pair's first k (k') labelled images (paper Fig. 5).

    Outcome arrays must be in selection order (replacements in the place of the images they replaced);
    k defaults to the longest pair. Both rankings are of the classifiers with labelled images
    (`scored_perron`), the same ones at every k' ≥ 1: a pair with a labelled image keeps one.
    """
    k = max((np.size(right_i) for right_i, _ in outcomes.values()), default=0) if k is None else k
    reference = _perron_scores(outcomes, m, k, alpha)
    k_prime = np.arange(1, k)
    return StabilityCurve(
        k=k,
        k_prime=k_prime,
        srcc=np.array([srcc(reference, _perron_scores(outcomes, m, int(kp), alpha)) for kp in k_prime]),
    )


def _perron_scores(outcomes: PairOutcomes, m: int, first: int, alpha: float) -> np.ndarray:
    """Perron scores of the classifiers with labelled images from each pair's first `first` of them."""
    truncated = {
        pair: (np.asarray(right_i)[:first], np.asarray(right_j)[:first])
        for pair, (right_i, right_j) in outcomes.items()
    }
    scores = scored_perron(count_outcomes(truncated, m), alpha).scores
    return scores[np.isfinite(scores)]


@dataclass(frozen=True)
class CaseShares:
    """Fractions of labelled pair images in Case I (both right), II (exactly one), III (neither)."""

    case_i: float
    case_ii: float
    case_iii: float
    images: int


def case_shares(counts: PairCounts) -> CaseShares:
    """Case I = Σ_{i<j} (correct_ij − wins_ij), II = Σ (wins_ij + wins_ji), III = the rest (Sec. 2.1, 3.1).

    An image selected by two pairs counts once per pair, as each pair labels it; all zero without labels.
    """
    upper = np.triu(np.ones_like(counts.n, dtype=bool), k=1)
    images = int(counts.n[upper].sum())
    both = int((counts.correct - counts.wins)[upper].sum())
    exactly_one = int((counts.wins + counts.wins.T)[upper].sum())
    if images == 0:
        return CaseShares(0.0, 0.0, 0.0, 0)
    return CaseShares(both / images, exactly_one / images, (images - both - exactly_one) / images, images)


def entropy_bits(probs: ArrayLike, axis: int = -1) -> np.ndarray:
    """H(P) = −Σ_y P(y) log2 P(y), with 0·log 0 = 0 (Example Perplexity, Sec. 2)."""
    probs = np.asarray(probs, dtype=np.float64)
    logs = np.log2(probs, out=np.zeros_like(probs), where=probs > 0)
    return -(probs * logs).sum(axis=axis)


def c_perplexity(entropies_bits: ArrayLike) -> np.ndarray:
    """Φ_C(x) = [Π_i 2^H(P_i(·|x))]^(1/N) = 2^(mean_i H_i) over classifiers (axis 0), per image.

    NaN entropies (no prediction for that image) are left out of the mean; NaN where none is known.
    """
    entropies = np.asarray(entropies_bits, dtype=np.float64)
    known = np.isfinite(entropies)
    total, count = np.where(known, entropies, 0.0).sum(axis=0), known.sum(axis=0)
    mean = np.divide(total, count, out=np.full(total.shape, np.nan), where=count > 0)
    return np.exp2(mean)


def x_perplexity(correct: ArrayLike, judged: ArrayLike) -> np.ndarray:
    """Φ_X(x) = fraction of judged classifiers whose top-1 is wrong (Example Perplexity, Sec. 2), per image.

    On MAD labels a classifier is judged on x when the question "does x contain f_i(x)?" was decided;
    `correct` and `judged` are N×n booleans. NaN for an image no classifier was judged on.
    """
    correct, judged = np.asarray(correct, dtype=bool), np.asarray(judged, dtype=bool)
    n_judged = judged.sum(axis=0)
    n_wrong = (judged & ~correct).sum(axis=0)
    return np.divide(n_wrong, n_judged, out=np.full(n_judged.shape, np.nan), where=n_judged > 0)


def class_precision(
    predicted: ArrayLike, correct: ArrayLike, n_classes: int
) -> tuple[np.ndarray, np.ndarray]:
    """Per class c: precision_c = #{yes} / #{decided questions where the classifier predicted c}, support.

    The worst-class-precision denominator of Bitterwolf et al. (Eq. 3), on MAD labels: `predicted` holds the
    classifier's top-1 class on each image whose question "does x contain it?" was decided, `correct` the
    decision. Precision is NaN for a class without support.
    """
    hits, support = _tallies(predicted, correct, n_classes)
    return np.divide(hits, support, out=np.full(n_classes, np.nan), where=support > 0), support


def _tallies(predicted: ArrayLike, correct: ArrayLike, n_classes: int) -> tuple[np.ndarray, np.ndarray]:
    """Per class: decided questions answered yes, and all decided questions, where it was predicted."""
    predicted, correct = np.asarray(predicted, dtype=np.int64), np.asarray(correct, dtype=bool)
    if predicted.shape != correct.shape:
        raise ValueError("predicted and correct must be aligned")
    support = np.bincount(predicted, minlength=n_classes)
    return np.bincount(predicted[correct], minlength=n_classes), support


@dataclass(frozen=True)
class GroupPrecision:
    """Precision of one classifier on the MAD-labelled images it assigned to a class or superclass."""

    key: str
    name: str
    precision: float
    support: int


def worst_classes(
    taxonomy: Taxonomy, predicted: ArrayLike, correct: ArrayLike, min_support: int = 3, count: int = 1
) -> list[GroupPrecision]:
    """The `count` classes of lowest precision_c with support ≥ min_support, worst first: the first is the
    worst-class precision WCP = min_c precision_c (Bitterwolf et al. Eq. 3, on MAD labels).

    Ties go to the class with more support, then the lower index.
    """
    precision, support = class_precision(predicted, correct, len(taxonomy.classes))
    return [
        GroupPrecision(taxonomy.classes[i], taxonomy.names[i], float(precision[i]), int(support[i]))
        for i in _worst(precision, support, min_support)[:count]
    ]


def worst_superclasses(
    taxonomy: Taxonomy, predicted: ArrayLike, correct: ArrayLike, min_support: int = 10, count: int = 1
) -> list[GroupPrecision]:
    """The `count` superclasses s of lowest Σ_{c∈s} yes_c / Σ_{c∈s} support_c with support ≥ min_support,
    worst first (ties: more support, then the lower index).

    Superclasses are the taxonomy's non-root nodes above at least two classes (WordNet synsets for
    ImageNet); precision as in `class_precision`, pooled over the classes below s. The analogue of
    Bitterwolf et al.'s worst-superclass metrics (Eq. 4, 5) when only yes/no answers are known.
    """
    hits, support = _tallies(predicted, correct, len(taxonomy.classes))
    nodes, membership = taxonomy.superclasses()
    group_support = membership.astype(np.int64) @ support
    group_hits = membership.astype(np.int64) @ hits
    group_precision = np.divide(
        group_hits, group_support, out=np.full(len(nodes), np.nan), where=group_support > 0
    )
    return [
        GroupPrecision(
            nodes[i], taxonomy.node_names[nodes[i]], float(group_precision[i]), int(group_support[i])
        )
        for i in _worst(group_precision, group_support, min_support)[:count]
    ]


def _worst(precision: np.ndarray, support: np.ndarray, min_support: int) -> list[int]:
    """Indices with support ≥ min_support, lowest precision first; ties: more support, then lower index."""
    candidates = np.flatnonzero(support >= max(min_support, 1))
    order = np.lexsort((candidates, -support[candidates], precision[candidates]))
    return [int(index) for index in candidates[order]]
