"""Active MAD: which pair to label next, when a question needs no more votes, when the ranking is settled.

Three pure rules the labelling queue and `mad simulate --policy active` share (issue 24; the design is
docs/architecture.md, Active sampling):

- Dynamic panels (Toloka's dynamic overlap; the one-coin model of Dawid & Skene 1979): a question is decided
  by its first ≥ 2 votes when they agree and the posterior of their answer reaches a confidence; any
  disagreement sends it on to the paper's strict majority of the full panel.
- Annotator reliability: the one-coin accuracy implied by how often the first two votes of a question agree
  (a Beta posterior on that agreement), which the stopping rule cannot touch.
- Pair priorities and stop rules (Heckel, Shah, Ramchandran & Wainwright 2018, "Active ranking from pairwise
  comparisons and when parametric assumptions do not help": stop comparing an item once its confidence
  interval decides its place; Mohankumar & Khapra 2022, "Active Evaluation": spend judgements only on the
  comparisons that can still change the ranking): the bootstrap of the Perron scores gives, for each pair,
  the probability that its order flips; a pair stops once that probability is small after a minimum number
  of images, once labelling the rest of its images could not make it small (futility), or when it has no
  open image; the competition is settled once every pair has stopped.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.special import ndtr, ndtri

from app.core.ranking import (
    SCORE_DECIMALS,
    PairCounts,
    bootstrap_scores,
    dominance_matrix,
    pairwise_accuracy,
    perron_rank,
)

DEFAULT_REFRESH_EVERY = 20
"""Decided questions between two policy refreshes in the service (and in the simulation), at least."""
REFRESH_PARTS = 100
"""... or a hundredth of the competition's questions, when that is more (refresh_interval)."""
LOWEST_LEVEL = -16
"""An item's priority is a power of √2, 2^-16 at least (or 0, parked): priority_levels. One image's worth
is at least 1/R/(k+1) per open pair (2^-12.6 for R = 200, k = 30)."""
DEFAULT_UNIFORM_FLOOR = 0.1
"""Share of next-item picks that ignore the priorities (uniform order), so that no open pair starves."""
DEFAULT_EARLY_CONFIDENCE = 0.99
"""Posterior an answer needs to be decided before a full majority."""
DEFAULT_MIN_IMAGES = 15
"""Labelled images a pair needs before its bootstrap may stop it (a floor against early luck): the
leaderboard's STABLE_K (paper Fig. 5: rankings settle once k > 15), so a stopped pair is never provisional
for want of images."""
DEFAULT_FLIP_LEVEL = 0.05
"""A pair stops once its order flips in at most this share of bootstrap fits (decided one-sided at 95%)."""
DEFAULT_FUTILITY_LEVEL = 0.2
"""A pair stops once, labelled to the end, it would still flip in more than this share of fits (futility)."""
RELIABILITY_PRIOR = (3.4, 1.6)
"""Beta(a0, b0) prior on the agreement q of a question's first two votes: mean 0.68 = 0.8² + 0.2², an
accuracy of 0.8, worth 5 pairs, so that 2 agreeing votes decide nothing until the pairs have shown the
annotators to be better than that."""


def decided_early(
    yes_votes: int,
    no_votes: int,
    panel_size: int,
    reliability: float,
    confidence: float = DEFAULT_EARLY_CONFIDENCE,
) -> bool | None:
    """The answer once a ≥ 2 unanimous votes give it posterior r^a / (r^a + (1 − r)^a) ≥ `confidence`.

    One-coin model (Dawid & Skene 1979 with one accuracy r for every annotator and both answers, prior ½):
    after a agreeing votes and none against, P(answer) = r^a / (r^a + (1 − r)^a). None on any disagreement,
    with fewer than 2 votes, with r ≤ ½, or below the confidence: the strict majority of `panel_size`
    then decides, as in the paper. A unanimous strict majority of the panel is always decided.
    """
    votes = yes_votes + no_votes
    if min(yes_votes, no_votes) > 0 or votes < 2 or not 0.5 < reliability <= 1.0:
        return None
    if 2 * votes > panel_size:
        return yes_votes > 0
    odds = (reliability / (1.0 - reliability)) ** votes if reliability < 1.0 else np.inf
    return yes_votes > 0 if odds / (1.0 + odds) >= confidence else None


def reliability_from_pairs(agreeing_pairs: int, disagreeing_pairs: int) -> float:
    """a = ½ + ½·√max(0, 2q − 1), q = (a0 + agreeing) / (a0 + b0 + agreeing + disagreeing) the Beta(a0, b0) =
    RELIABILITY_PRIOR posterior mean of the agreement of two votes; under the one-coin model (Dawid & Skene
    1979) two independent votes agree with probability q = a² + (1 − a)² (inter-annotator agreement).

    Counted over each question's first two votes, which no stopping rule chooses (the rule only stops after
    them), decided or still open: votes against the decided outcomes would agree by construction
    with a question that 2 agreeing votes decided, so that estimate drifts up once early decisions start.
    """
    if agreeing_pairs < 0 or disagreeing_pairs < 0:
        raise ValueError("pair counts cannot be negative")
    a0, b0 = RELIABILITY_PRIOR
    agree, disagree = a0 + agreeing_pairs, b0 + disagreeing_pairs
    return 0.5 + 0.5 * float(np.sqrt(max(0.0, (agree - disagree) / (agree + disagree))))


@dataclass(frozen=True)
class PolicyDecision:
    """Where one more labelled image is worth most, and what needs none."""

    priority: np.ndarray
    """m×m symmetric float ≥ 0: value of one more image of pair (i, j); 0 = stop."""
    pair_settled: np.ndarray
    """m×m bool symmetric: the pair needs no more images (diagonal True)."""
    settled: bool
    """The whole ranking is settled: every pair has stopped."""
    informative_pairs: tuple[tuple[int, int], ...]
    """i < j pairs still worth asking, best first."""


def flip_probability(point: np.ndarray, samples: np.ndarray) -> np.ndarray:
    """f_ij = share of bootstrap fits whose order of (i, j) differs from the point fit's, ties counting ½;
    ½ for a pair the point fit ties (scores compared at SCORE_DECIMALS, as ranks are)."""
    point = np.round(point, SCORE_DECIMALS)
    samples = np.round(samples, SCORE_DECIMALS)
    point_sign = np.sign(point[:, None] - point[None, :])
    sample_sign = np.sign(samples[:, :, None] - samples[:, None, :])
    agree = (sample_sign == point_sign).mean(axis=0)
    tied = (sample_sign == 0).mean(axis=0)
    flips = np.where(point_sign == 0, 0.5, 1.0 - agree - tied / 2)
    np.fill_diagonal(flips, 0.0)
    return flips


def adjacent_flip(point: np.ndarray, flips: np.ndarray) -> np.ndarray:
    """Per classifier, the larger flip probability with its neighbours in the point ranking (0 for m = 1)."""
    order = np.argsort(-point, kind="stable")
    neighbour = np.zeros(len(point))
    steps = flips[order[:-1], order[1:]]
    neighbour[order[:-1]] = steps
    neighbour[order[1:]] = np.maximum(neighbour[order[1:]], steps)
    return neighbour


def projected_flip(flips: np.ndarray, labelled: np.ndarray, still_open: np.ndarray) -> np.ndarray:
    """Φ(−z·√((n + o) / n)) with z = −Φ⁻¹(f): the flip probability once the o open images are labelled, if
    the separation z keeps its size and its standard error shrinks as 1/√n (a futility bound)."""
    z = -ndtri(np.clip(flips, 1e-9, 0.5))
    return ndtr(-z * np.sqrt((labelled + np.maximum(still_open, 0)) / np.maximum(labelled, 1)))


def active_policy(
    counts: PairCounts,
    open_images: np.ndarray,
    *,
    alpha: float = 1.0,
    n_resamples: int = 200,
    seed: int = 0,
    min_images: int = DEFAULT_MIN_IMAGES,
    flip_level: float = DEFAULT_FLIP_LEVEL,
    futility_level: float = DEFAULT_FUTILITY_LEVEL,
) -> PolicyDecision:
    """Stop pair (i, j) when no image of it is open; once n_ij ≥ `min_images` and f_ij ≤ `flip_level` (its
    order is decided, Heckel et al. 2018); or for futility, once n_ij ≥ max(`min_images`, open_ij) (half
    its images labelled, the usual interim look of group-sequential designs) and `projected_flip` >
    `futility_level`. Else priority_ij = max(f_ij, f_i, f_j, 1/R) / (n_ij + 1), f_i the adjacent flip of i.

    f from `flip_probability` over R bootstrap fits of the Perron scores (ranking.bootstrap_scores): the
    chance that the pair's order or an adjacent rank flips (issue 24, item 1), scaled by the share 1/(n + 1)
    by which one more image shrinks the variance of the pair's accuracies. The 1/R floor keeps every open,
    unstopped pair above 0 so that the queue never parks a pair the stop rule still waits for. The ranking
    is settled when every pair has stopped.
    """
    open_images = np.asarray(open_images)
    if open_images.shape != counts.n.shape:
        raise ValueError(f"open_images must be {counts.n.shape}, got {open_images.shape}")
    point = perron_rank(dominance_matrix(pairwise_accuracy(counts, alpha))).scores
    flips = flip_probability(point, bootstrap_scores(counts, alpha, n_resamples, seed))
    enough = counts.n >= min_images
    decided = enough & (flips <= flip_level)
    futile = (counts.n >= np.maximum(min_images, open_images)) & (
        projected_flip(flips, counts.n, open_images) > futility_level
    )
    pair_settled = (open_images <= 0) | decided | futile
    np.fill_diagonal(pair_settled, True)
    adjacent = adjacent_flip(point, flips)
    value = np.maximum(np.maximum(flips, 1.0 / n_resamples), np.maximum.outer(adjacent, adjacent))
    priority = np.where(pair_settled, 0.0, value / (counts.n + 1))
    upper = np.triu_indices(counts.m, k=1)
    ranked = np.argsort(-priority[upper], kind="stable")
    informative = tuple(
        (int(upper[0][index]), int(upper[1][index])) for index in ranked if priority[upper][index] > 0
    )
    return PolicyDecision(priority, pair_settled, bool(pair_settled.all()), informative)


def image_priorities(
    priority: np.ndarray, pair_of_row: np.ndarray, image_of_row: np.ndarray, images: int
) -> np.ndarray:
    """Each image's worth, Σ over its open pairs (i, j) of priority[i, j], given one row per (image, open
    pair): pair_of_row (r × 2 classifier indices) and image_of_row (r image indices, < images). One label item
    decides its questions for every pair that selected it, so its worth is the sum of theirs (0 parks it: all
    its pairs have stopped)."""
    worth = priority[pair_of_row[:, 0], pair_of_row[:, 1]] if len(pair_of_row) else np.zeros(0)
    return np.bincount(image_of_row, weights=worth, minlength=images).astype(float)


def refresh_interval(questions: int, every: int = DEFAULT_REFRESH_EVERY) -> int:
    """Decided questions between two policy runs: max(every, ⌈questions / REFRESH_PARTS⌉). A run reads every
    open item and rewrites those whose priority moved, so its cost per decided question stays bounded as a
    competition grows (100,000 questions: a run per 1,000 decisions; the paper's 11 classifiers: per 20)."""
    return max(every, -(-questions // REFRESH_PARTS))


def priority_levels(worth: np.ndarray) -> np.ndarray:
    """The queue's priority of items worth `worth` (image_priorities): √2^ℓ with ℓ = max(2·LOWEST_LEVEL,
    ⌊2·log2 worth⌋), 0 (parked) for no worth. Steps of √2 so that a rerun rewrites only the items whose worth
    crossed one, and so that each step holds items of many pairs: the images the queue hands out between two
    reruns spread over the pairs that are worth about as much (in `mad simulate`, the steps of 2^(1/4) and
    exact worths spent more votes, steps of 2 as many and rewrote fewer items); within a step the queue keeps
    its uniform order."""
    positive = worth > 0
    steps = np.maximum(2 * LOWEST_LEVEL, np.floor(2 * np.log2(np.where(positive, worth, 1.0))))
    return np.where(positive, np.exp2(steps / 2), 0.0)
