"""Active MAD: which pair to label next, when a question needs no more votes, when the ranking is settled.

Pure rules the labelling queue and `mad simulate --policy active` share (issues 24 and 33; the design is
docs/architecture.md, Active sampling):

- Dynamic panels (Toloka's dynamic overlap; the one-coin model of Dawid & Skene 1979 per annotator): a
  question is decided by its first ≥ 2 votes when they agree, every voter is vetted on their own
  (app/core/reliability.py) and the posterior of their answer, with the base rate of "yes", reaches a
  confidence; anything else goes on to the paper's strict majority of the full panel.
- The target is full MAD, the ranking from every selected image labelled: each pair's open images are
  forecast from its labels so far, partially pooled through the classifiers' Bradley–Terry strengths
  (`forecast_full_mad`), and the forecast's variance is carried through the Perron scores to the chance that
  full MAD orders two neighbours of the ranking otherwise (`neighbour_flips`). One more image of a pair is
  worth what it takes off those chances (the knowledge-gradient idea: Frazier, Powell & Dayanik 2008; spend
  judgements only on comparisons that can still change the ranking: Heckel, Shah, Ramchandran &
  Wainwright 2018, Mohankumar & Khapra 2022), and labelling stops once full MAD is expected to reverse few
  neighbours and none is a near coin flip: a near-tie is labelled out, not stopped.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.special import ndtr

from app.core.ranking import (
    SCORE_DECIMALS,
    PairCounts,
    bradley_terry,
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
UNRANKED_PRIORITY = 2.0**LOWEST_LEVEL
"""An item's priority until a rerun ranks it: the lowest level, so that a rerun lifts only the items the
queue will reach before the next (kept_levels) instead of lowering all the others from the top."""
FOLD_REFRESHES = 4
"""A rerun keeps exact the levels of the items the queue may reach before the next: the worthiest
FOLD_REFRESHES × refresh_interval (in items, against refresh_interval questions decided between reruns, of
one or more per item: kept_levels)."""
DEFAULT_UNIFORM_FLOOR = 0.05
"""Share of next-item picks that ignore the priorities (uniform order), so that no open pair starves."""
DEFAULT_GOLD_RATE = 0.02
"""Share of the images handed out that are gold under active sampling, where the competition has gold: what
vets annotators on their own (app/core/reliability.py)."""
DEFAULT_EARLY_CONFIDENCE = 0.99
"""Posterior an answer needs to be decided before a full majority."""
DEFAULT_EXPECTED_SWAPS = 0.5
"""The ranking is settled once full MAD is expected to reverse at most this many pairs of neighbours."""
DEFAULT_MAX_FLIP = 0.25
"""... and no pair of neighbours has a larger chance than this of being reversed."""
POOLING_STRENGTH = 4.0
"""κ: images' worth of the pooled prior on a pair's outcome shares (pooled_outcome_prior)."""
DEFAULT_MIN_IMAGES = 10
"""Labelled images every pair with open ones needs before the ranking may settle: the rank intervals'
bootstrap resamples a pair's labelled images, and below ten it reads three alike as certainty."""
MIN_PRIORITY = 1e-12
"""An open pair of an unsettled ranking is never parked: its priority is at least this."""


def decided_early(
    yes_votes: int,
    no_votes: int,
    panel_size: int,
    vetted_evidence: float,
    base_rate: float,
    confidence: float = DEFAULT_EARLY_CONFIDENCE,
) -> bool | None:
    """The answer once a ≥ 2 unanimous votes of vetted annotators give it posterior ≥ `confidence`.

    Per-annotator one-coin model (app/core/reliability.py) with the base rate π of "yes": after agreeing
    votes of accuracies r_1 … r_a, the odds of "yes" are π/(1 − π)·Π r/(1 − r) = π/(1 − π)·e^E, with
    E = Σ log(r/(1 − r)) the `vetted_evidence` (NaN when any voter is not vetted); of "no" (1 − π)/π·e^E.
    None on any disagreement, with fewer than 2 votes, without vetted evidence, or below the confidence:
    the strict majority of `panel_size` then decides, as in the paper. A unanimous strict majority of the
    panel is always decided.
    """
    votes = yes_votes + no_votes
    if min(yes_votes, no_votes) > 0 or votes < 2:
        return None
    if 2 * votes > panel_size:
        return yes_votes > 0
    if not np.isfinite(vetted_evidence) or not 0.0 < base_rate < 1.0:
        return None
    prior = base_rate / (1 - base_rate) if yes_votes else (1 - base_rate) / base_rate
    log_odds = np.log(prior) + vetted_evidence
    return yes_votes > 0 if log_odds >= np.log(confidence / (1 - confidence)) else None


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
    neighbour_flips: np.ndarray
    """Per pair of neighbours in the ranking (best first), the chance that full MAD orders them otherwise."""
    expected_swaps: float
    """Σ of neighbour_flips: the neighbours full MAD is expected to order otherwise."""


def pooled_outcome_prior(counts: PairCounts) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Prior shares (both right, only f_i, only f_j, neither) for every pair (i, j): Case I and Case III at
    their shares over all labelled images (+1 smoothed), Case II split as Bradley–Terry strengths fitted to
    every pair's wins predict, e^θi / (e^θi + e^θj) (ranking.bradley_terry). The classifiers' strengths are
    shared by all their pairs, so a pair with few labels borrows from the others (partial pooling)."""
    upper = np.triu_indices(counts.m, k=1)
    labelled = counts.n[upper].sum()
    both = counts.correct - counts.wins
    neither = counts.n - both - counts.wins - counts.wins.T
    share_both = (both[upper].sum() + 1) / (labelled + 4)
    share_neither = (neither[upper].sum() + 1) / (labelled + 4)
    theta = bradley_terry(counts)
    beats = 1 / (1 + np.exp(theta[None, :] - theta[:, None]))
    case_ii = 1 - share_both - share_neither
    return (
        np.full_like(beats, share_both),
        case_ii * beats,
        case_ii * beats.T,
        np.full_like(beats, share_neither),
    )


@dataclass(frozen=True)
class FullMadForecast:
    """What full MAD (every selected image labelled) will say of each pair, given the labels so far: the
    expected final accuracies, and the predictive variance and covariance of a_ij and a_ji."""

    accuracy: np.ndarray
    variance: np.ndarray
    covariance: np.ndarray
    prior_images: np.ndarray
    """n_ij + κ: the images' worth of what is known of the pair's outcome shares."""


def forecast_full_mad(
    counts: PairCounts, open_images: np.ndarray, alpha: float, strength: float = POOLING_STRENGTH
) -> FullMadForecast:
    """Each pair's o open images drawn from its outcome shares p ~ Dirichlet(c + κ·p₀) (c its labelled
    outcome counts, p₀ the `pooled_outcome_prior`, κ = `strength`): the final count of f_i right is c_i + X,
    E X = o·p_i, Var X = o·p_i(1 − p_i)·(N + o)/(N + 1), Cov(X_i, X_j) = o·(p_both − p_i·p_j)·(N + o)/(N + 1)
    with N = n + κ (Dirichlet-multinomial), and a = (correct + α) / (n + o + 2α) as the ranking smooths it."""
    still_open = np.maximum(np.asarray(open_images, dtype=float), 0.0)
    np.fill_diagonal(still_open, 0.0)
    prior_both, prior_i, prior_j, _ = pooled_outcome_prior(counts)
    prior_images = counts.n + strength
    both = (counts.correct - counts.wins + strength * prior_both) / prior_images
    right_i = both + (counts.wins + strength * prior_i) / prior_images
    right_j = both + (counts.wins.T + strength * prior_j) / prior_images
    final_n = counts.n + still_open
    spread = still_open * (prior_images + still_open) / (prior_images + 1) / (final_n + 2 * alpha) ** 2
    accuracy = (counts.correct + still_open * right_i + alpha) / (final_n + 2 * alpha)
    np.fill_diagonal(accuracy, 0.5)
    return FullMadForecast(
        accuracy=accuracy,
        variance=spread * right_i * (1 - right_i),
        covariance=spread * (both - right_i * right_j),
        prior_images=prior_images,
    )


def score_gradient(accuracy: np.ndarray) -> np.ndarray:
    """m×m×m: ∂r/∂a_ij of the Perron scores r of B(A) (Eq. 5), exactly: from B r = λ r and 1ᵀr = 1,
    [[B − λI, −r], [1ᵀ, 0]] [dr; dλ] = [−dB r; 0], where a_ij moves b_ij by 1/a_ji and b_ji by −a_ji/a_ij²
    (the derivative of a simple eigenvector: Magnus 1985, Theorem 1)."""
    m = len(accuracy)
    perron = perron_rank(dominance_matrix(accuracy), tol=1e-14)
    scores, eigenvalue = perron.scores, perron.lambda_max
    bordered = np.zeros((m + 1, m + 1))
    bordered[:m, :m] = dominance_matrix(accuracy) - eigenvalue * np.eye(m)
    bordered[:m, m] = -scores
    bordered[m, :m] = 1.0
    response = np.linalg.inv(bordered)[:m, :m]
    transposed = accuracy.T
    row_weight = -scores[None, :] / transposed
    column_weight = transposed * scores[:, None] / accuracy**2
    gradient = (
        row_weight[:, :, None] * response.T[:, None, :] + column_weight[:, :, None] * response.T[None, :, :]
    )
    gradient[np.arange(m), np.arange(m)] = 0.0
    return gradient


@dataclass(frozen=True)
class GapRisk:
    """For each pair of neighbours (u, v) in the reported ranking: the chance that full MAD orders them the
    other way, and each classifier pair's share of the variance of their final score gap."""

    upper: np.ndarray
    lower: np.ndarray
    flip: np.ndarray
    variance_by_pair: np.ndarray
    """(m−1)×m×m: pair (i < j)'s part of Var(r_u − r_v), upper triangle."""
    gap: np.ndarray


def neighbour_flips(reported: np.ndarray, forecast: FullMadForecast) -> GapRisk:
    """F_uv = Φ(−E[g] / sd(g)) for the final gap g = r_u − r_v of each pair of neighbours u above v in the
    reported ranking, linearised: Var g = Σ_(i<j) ∇ᵀ Σ_ij ∇ over each pair's (a_ij, a_ji) with their
    forecast covariance Σ_ij and ∇ the gradient of g (`score_gradient`). If every pair of neighbours keeps
    its order the whole ranking does, so Σ F_uv bounds the chance that full MAD's ranking differs and is the
    expected number of neighbours it reverses."""
    order = np.argsort(-np.round(reported, SCORE_DECIMALS), kind="stable")
    upper, lower = order[:-1], order[1:]
    gradient = score_gradient(forecast.accuracy)
    expected = perron_rank(dominance_matrix(forecast.accuracy)).scores
    along = gradient[:, :, upper] - gradient[:, :, lower]
    along = np.moveaxis(along, 2, 0)
    parts = (
        along**2 * forecast.variance
        + np.swapaxes(along, 1, 2) ** 2 * forecast.variance.T
        + 2 * along * np.swapaxes(along, 1, 2) * forecast.covariance
    )
    parts = np.triu(parts, k=1)
    deviation = np.sqrt(parts.sum(axis=(1, 2)))
    gap = np.round(expected[upper] - expected[lower], SCORE_DECIMALS)
    known = deviation < 10.0**-SCORE_DECIMALS
    flip = np.where(known, (gap < 0) * 1.0, ndtr(-gap / np.where(known, 1.0, deviation)))
    return GapRisk(upper, lower, flip, parts, gap)


def active_policy(
    counts: PairCounts,
    open_images: np.ndarray,
    *,
    alpha: float = 1.0,
    expected_swaps: float = DEFAULT_EXPECTED_SWAPS,
    max_flip: float = DEFAULT_MAX_FLIP,
    min_images: int = DEFAULT_MIN_IMAGES,
) -> PolicyDecision:
    """Settled once full MAD is expected to reverse at most `expected_swaps` neighbours of the ranking
    (Σ F_uv, `neighbour_flips`) and none with a chance above `max_flip` (a near-tie is labelled out rather
    than stopped on a coin flip); a pair stops when it has no open image or the ranking is settled.

    An open pair's priority is what one more of its images is worth: the drop it brings to Σ F_uv,
    Σ_uv φ(z)·z / (2 Var g) · ΔVar_ij, with ΔVar_ij = its part of Var g × (o + N + 1) / (o (N + 2)) (one
    image fewer to draw and one more labelled: the Dirichlet-multinomial variance at o − 1, n + 1). These are
    posterior predictive quantities of the forecast, so looking at them after every refresh does not inflate
    them the way a test repeated at every look does, as far as the forecast's model holds
    (docs/architecture.md, Active sampling: Stop rule).
    """
    open_images = np.asarray(open_images)
    if open_images.shape != counts.n.shape:
        raise ValueError(f"open_images must be {counts.n.shape}, got {open_images.shape}")
    reported = perron_rank(dominance_matrix(pairwise_accuracy(counts, alpha))).scores
    forecast = forecast_full_mad(counts, open_images, alpha)
    risk = neighbour_flips(reported, forecast)
    still_open = np.maximum(open_images, 0)
    short = (still_open > 0) & (counts.n < min_images)
    np.fill_diagonal(short, False)
    settled = bool(
        risk.flip.sum() <= expected_swaps and risk.flip.max(initial=0.0) <= max_flip and not short.any()
    )
    pair_settled = (still_open <= 0) | settled
    np.fill_diagonal(pair_settled, True)
    variance = risk.variance_by_pair.sum(axis=(1, 2))
    uncertain = variance > 0
    safe = np.where(uncertain, variance, 1.0)
    z = risk.gap / np.sqrt(safe)
    sensitivity = np.where(uncertain, np.exp(-(z**2) / 2) / np.sqrt(2 * np.pi) * np.abs(z) / (2 * safe), 0.0)
    per_image = np.where(
        still_open > 0,
        (still_open + forecast.prior_images + 1) / (np.maximum(still_open, 1) * (forecast.prior_images + 2)),
        0.0,
    )
    value = np.einsum("g,gij->ij", sensitivity, risk.variance_by_pair) * per_image
    value = value + value.T
    priority = np.where(pair_settled, 0.0, np.maximum(value, MIN_PRIORITY))
    upper = np.triu_indices(counts.m, k=1)
    ranked = np.argsort(-priority[upper], kind="stable")
    informative = tuple(
        (int(upper[0][index]), int(upper[1][index])) for index in ranked if priority[upper][index] > 0
    )
    return PolicyDecision(priority, pair_settled, settled, informative, risk.flip, float(risk.flip.sum()))


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
    """The queue's priority of items worth `worth` (image_priorities): √2^(ℓ − ℓ_top) with ℓ = ⌊2·log2 worth⌋
    and ℓ_top the worthiest item's, at least √2^(2·LOWEST_LEVEL), 0 (parked) for no worth. Steps of √2 so
    that each step holds items of many pairs: the images the queue hands out between two reruns spread over
    the pairs that are worth about as much (in `mad simulate`, the steps of 2^(1/4) and exact worths spent
    more votes, steps of 2 as many); within a step the queue keeps its uniform order. Relative to the
    worthiest item, because every worth shrinks as labels come in and the queue needs only their order: the
    levels do not drift with the scale, so a rerun need not rewrite items whose place did not change."""
    positive = worth > 0
    steps = np.floor(2 * np.log2(np.where(positive, worth, 1.0)))
    top = steps[positive].max() if positive.any() else 0.0
    steps = np.maximum(2 * LOWEST_LEVEL, steps - top)
    return np.where(positive, np.exp2(steps / 2), 0.0)


def kept_levels(stored: np.ndarray, new: np.ndarray, fold: int, shuffle: np.ndarray) -> np.ndarray:
    """The priorities a rerun leaves stored: `new` where it moved more than one step of √2 from `stored`
    (parking and unparking always), except outside the fold, the first `fold` items in the queue's order by
    `new` (highest level first, then by `shuffle`, the queue's tie-break), where it is stored below the fold's
    lowest level: the queue hands out the fold first and reruns before it gets further. Between two reruns
    of a 10,000-question competition a quarter of the items' worths moved a step or more
    (benchmarks/labelling.py), while the queue handed out a few hundred; each write leaves a dead tuple in
    the queue's index, which its next scans step over. Items start at UNRANKED_PRIORITY, below every level a
    rerun lifts, so the first rerun with labels writes about a fold of items, not all of them (from a start
    at the top level it rewrote 49,000 of 50,000 at 100,000 questions)."""
    both = (stored > 0) & (new > 0)
    steps = 2 * np.log2(np.where(both, new, 1.0) / np.where(both, stored, 1.0))
    moved = ~both | (np.abs(steps) >= 1.5)
    if fold < len(new):
        first = np.lexsort((shuffle, -new))[:fold]
        in_fold = np.zeros(len(new), dtype=bool)
        in_fold[first] = True
        moved &= ~(both & ~in_fold & (stored < new[first].min()))
    return np.where(moved, new, stored)
