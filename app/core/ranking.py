"""From human labels on each pair's images to a global ranking (paper Sec. 2.1, Eq. 1 and 5).

The method as implemented: docs/architecture.md, Ranking.

Input per pair (i, j): two aligned boolean arrays over the pair's labelled images, "f_i was right" and "f_j
was right". Everything downstream uses Laplace-smoothed accuracies, so no entry is 0 or 1, and every
result is finite: pairs without labels give b_ij = 1, a disconnected comparison graph still ranks, and a
classifier that is never right simply comes last. A classifier without any labelled image is not ranked:
the leaderboard's rankings (`rank_classifiers`, `scored_perron`, `scored_intervals`) rank the others among
themselves and give it NaN, as they give NaN for a_ij and b_ij of a pair without labels.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, replace

import numpy as np
from numpy.typing import ArrayLike
from scipy.stats import rankdata

PairOutcomes = Mapping[tuple[int, int], tuple[ArrayLike, ArrayLike]]

DEFAULT_ALPHA = 1.0
PERRON_TOLERANCE = 1e-12
PERRON_MAX_ITERATIONS = 10_000
SCORE_DECIMALS = 6
"""Scores are ranked rounded to 6 decimals: equal scores then tie whatever their float noise (1e-16 in
HodgeRank and Bradley–Terry without labels, 1e-12 from the Perron iteration's tolerance, 1e-8 from choix's),
and no score difference shown on a page (3 decimals) is lost."""


class ConvergenceError(RuntimeError):
    """The power iteration did not reach its tolerance within its iteration cap."""


@dataclass(frozen=True)
class PairCounts:
    """Tallies over each pair's labelled images S_ij (m×m): n[i,j] = n[j,i] images, correct[i,j] with f_i
    right, wins[i,j] with f_i right and f_j wrong (Case II won by f_i)."""

    n: np.ndarray
    correct: np.ndarray
    wins: np.ndarray

    @property
    def m(self) -> int:
        """Number of classifiers."""
        return len(self.n)

    @property
    def without_evidence(self) -> np.ndarray:
        """Classifiers with no labelled image in any of their pairs (Σ_j n_ij = 0): nothing ranks them."""
        return self.n.sum(axis=1) == 0

    def among(self, indices: np.ndarray) -> PairCounts:
        """The tallies of the classifiers at these indices alone, in that order."""
        grid = np.ix_(indices, indices)
        return PairCounts(self.n[grid], self.correct[grid], self.wins[grid])


def count_outcomes(outcomes: PairOutcomes, m: int) -> PairCounts:
    """n_ij, correct_ij (Σ 1[f_i right] over S_ij, Eq. 1) and Case II wins from per-image outcomes."""
    n = np.zeros((m, m), dtype=np.int64)
    correct = np.zeros((m, m), dtype=np.int64)
    wins = np.zeros((m, m), dtype=np.int64)
    seen: set[tuple[int, int]] = set()
    for (i, j), (right_i, right_j) in outcomes.items():
        right_i, right_j = np.asarray(right_i, dtype=bool), np.asarray(right_j, dtype=bool)
        if i > j:
            i, j, right_i, right_j = j, i, right_j, right_i
        if not 0 <= i < j < m:
            raise ValueError(f"pair {(i, j)} is not two distinct classifiers among {m}")
        if (i, j) in seen:
            raise ValueError(f"pair {(i, j)} is given twice")
        if right_i.shape != right_j.shape or right_i.ndim != 1:
            raise ValueError(f"pair {(i, j)}: the two outcome arrays must be 1-D and aligned")
        seen.add((i, j))
        n[i, j] = n[j, i] = len(right_i)
        correct[i, j], correct[j, i] = right_i.sum(), right_j.sum()
        wins[i, j], wins[j, i] = (right_i & ~right_j).sum(), (right_j & ~right_i).sum()
    return PairCounts(n, correct, wins)


def pairwise_accuracy(counts: PairCounts, alpha: float = DEFAULT_ALPHA) -> np.ndarray:
    """a_ij = (correct_ij + α) / (n_ij + 2α), smoothed accuracy of f_i on S_ij (Sec. 2.1); a_ii = ½."""
    return _smoothed_accuracy(counts.correct, counts.n, alpha)


def _smoothed_accuracy(correct: np.ndarray, n: np.ndarray, alpha: float) -> np.ndarray:
    """(correct + α) / (n + 2α), broadcast over leading axes."""
    if alpha <= 0:
        raise ValueError("alpha must be > 0: Laplace smoothing is what keeps every a_ij inside (0, 1)")
    return (correct + alpha) / (n + 2 * alpha)


def dominance_matrix(accuracy: np.ndarray) -> np.ndarray:
    """b_ij = a_ij / a_ji, so b_ii = 1 and b_ij = 1 for a pair without labels (Sec. 2.1, Algorithm 1)."""
    return accuracy / np.swapaxes(accuracy, -1, -2)


@dataclass(frozen=True)
class PerronRank:
    """Principal eigenvector r of B (positive, Σr = 1), its eigenvalue λmax and Saaty's consistency index."""

    scores: np.ndarray
    lambda_max: float
    consistency_index: float
    iterations: int


def consistency_index(lambda_max: float, m: int) -> float:
    """CI = (λmax − m) / (m − 1), 0 for a perfectly consistent B (Saaty); 0 when m = 1."""
    return (lambda_max - m) / (m - 1) if m > 1 else 0.0


def perron_rank(
    dominance: np.ndarray, tol: float = PERRON_TOLERANCE, max_iter: int = PERRON_MAX_ITERATIONS
) -> PerronRank:
    """r = lim_t (1/t) Σ_{α=1}^t B^α 1 / 1ᵀB^α 1 = Perron vector of B, by power iteration (Eq. 5)."""
    dominance = np.asarray(dominance, dtype=np.float64)
    vectors, eigenvalues, iterations = _perron_vectors(dominance[None], tol, max_iter)
    lambda_max = float(eigenvalues[0])
    return PerronRank(vectors[0], lambda_max, consistency_index(lambda_max, len(dominance)), iterations)


def _perron_vectors(dominance: np.ndarray, tol: float, max_iter: int) -> tuple[np.ndarray, np.ndarray, int]:
    """Power iteration r ← Br / 1ᵀBr on a batch of positive R×m×m matrices; λ = 1ᵀBr at the fixed point."""
    if dominance.ndim != 3 or dominance.shape[1] != dominance.shape[2]:
        raise ValueError(f"dominance must be square, got {dominance.shape[1:]}")
    if not np.all(np.isfinite(dominance)) or not np.all(dominance > 0):
        raise ValueError("dominance must be finite and positive (b_ij = a_ij / a_ji with smoothed a)")
    vectors = np.full(dominance.shape[:2], 1.0 / dominance.shape[1])
    for iteration in range(1, max_iter + 1):
        product = np.einsum("rij,rj->ri", dominance, vectors)
        eigenvalues = product.sum(axis=1)
        product /= eigenvalues[:, None]
        if np.max(np.abs(product - vectors)) < tol:
            return product, eigenvalues, iteration
        vectors = product
    raise ConvergenceError(f"power iteration did not reach {tol:g} in {max_iter} iterations")


def hodge_rank(counts: PairCounts, alpha: float = DEFAULT_ALPHA) -> np.ndarray:
    """s = argmin Σ_{i<j} n_ij (s_i − s_j − log b_ij)², minimum-norm (HodgeRank, Jiang et al. 2011).

    Solves the weighted graph Laplacian system L s = Σ_j n_ij log b_ij; each connected component of the
    comparison graph gets mean 0, a classifier without labels gets 0.
    """
    log_dominance = np.log(dominance_matrix(pairwise_accuracy(counts, alpha)))
    weights = counts.n.astype(np.float64)
    laplacian = np.diag(weights.sum(axis=1)) - weights
    divergence = (weights * log_dominance).sum(axis=1)
    scores, *_ = np.linalg.lstsq(laplacian, divergence, rcond=None)
    return scores


def bradley_terry(counts: PairCounts, regularization: float = 0.01) -> np.ndarray:
    """Bradley–Terry log-strengths θ, P(i beats j) = e^θi / (e^θi + e^θj), from Case II wins (choix ILSR).

    The regularization keeps θ finite for a classifier that never wins and for a disconnected graph.
    """
    import choix

    return choix.ilsr_pairwise_dense(counts.wins.astype(np.float64), alpha=regularization, max_iter=1000)


def win_rate(counts: PairCounts) -> np.ndarray:
    """Share of Case II images won: Σ_j wins_ij / Σ_j (wins_ij + wins_ji); NaN without any Case II image."""
    won, lost = counts.wins.sum(axis=1), counts.wins.sum(axis=0)
    decided = won + lost
    return np.divide(won, decided, out=np.full(counts.m, np.nan), where=decided > 0)


def ranks_from_scores(scores: ArrayLike, without_evidence: ArrayLike | None = None) -> np.ndarray:
    """Rank 1 = highest score rounded to SCORE_DECIMALS, along the last axis; tied scores share the better
    rank. Classifiers `without_evidence` come after all the others, tied: a score they owe only to b_ij = 1
    for their unlabelled pairs places them nowhere."""
    rounded = np.round(np.asarray(scores, dtype=np.float64), SCORE_DECIMALS)
    if without_evidence is not None:
        rounded = np.where(without_evidence, -np.inf, rounded)
    return rankdata(-rounded, method="min", axis=-1).astype(np.int64)


def ranks_of_known(scores: ArrayLike) -> np.ndarray:
    """ranks_from_scores among the finite scores (float ranks, 1 = best); NaN for the others: no score, no
    rank."""
    scores = np.asarray(scores, dtype=np.float64)
    known = np.isfinite(scores)
    ranks = np.full(len(scores), np.nan)
    ranks[known] = ranks_from_scores(scores[known])
    return ranks


def _spread(values: np.ndarray, scored: np.ndarray) -> np.ndarray:
    """Values of the scored classifiers at their places among all, NaN at the others'."""
    spread = np.full(len(scored), np.nan)
    spread[scored] = values
    return spread


def scored_perron(counts: PairCounts, alpha: float = DEFAULT_ALPHA) -> PerronRank:
    """The Perron rank (Eq. 5) of the classifiers with labelled images among themselves: B, λmax and CI over
    them alone; NaN scores for the others, and NaN λmax and CI when no pair has labels.

    A classifier without labels would enter B only through b_ij = 1, which still moves the others' scores
    and can reorder them (docs/architecture.md, Ranking).
    """
    scored = ~counts.without_evidence
    if not scored.any():
        return PerronRank(np.full(counts.m, np.nan), math.nan, math.nan, 0)
    perron = perron_rank(dominance_matrix(pairwise_accuracy(counts.among(np.flatnonzero(scored)), alpha)))
    return replace(perron, scores=_spread(perron.scores, scored))


@dataclass(frozen=True)
class Ranking:
    """All rankings of one competition side by side; `perron` is the MAD ranking. Only the classifiers with
    labelled images (`scored`) are ranked, among themselves: the others' scores are NaN, and `accuracy` and
    `dominance` are A and B where a pair has labelled images, NaN where it has none (diagonal included)."""

    accuracy: np.ndarray
    dominance: np.ndarray
    perron: PerronRank
    hodge: np.ndarray
    bradley_terry: np.ndarray
    win_rate: np.ndarray
    scored: np.ndarray

    @property
    def ranks(self) -> np.ndarray:
        """MAD ranks from the Perron scores, 1 = best; NaN for a classifier without labels."""
        return ranks_of_known(self.perron.scores)

    def ranks_of(self, scores: np.ndarray) -> np.ndarray:
        """Ranks by one of the scores (Perron, HodgeRank, Bradley–Terry, win rate) among the classifiers
        that have it; NaN for the others."""
        return ranks_of_known(scores)


def rank_classifiers(counts: PairCounts, alpha: float = DEFAULT_ALPHA) -> Ranking:
    """A and B where labelled; Perron rank with λmax and CI, HodgeRank, Bradley–Terry and win rate of the
    classifiers with labelled images, among themselves (`scored_perron`)."""
    scored = ~counts.without_evidence
    among = counts.among(np.flatnonzero(scored))
    accuracy = pairwise_accuracy(counts, alpha)
    labelled = counts.n > 0
    if scored.any():
        hodge, strengths = _spread(hodge_rank(among, alpha), scored), _spread(bradley_terry(among), scored)
    else:
        hodge, strengths = np.full(counts.m, np.nan), np.full(counts.m, np.nan)
    return Ranking(
        accuracy=np.where(labelled, accuracy, np.nan),
        dominance=np.where(labelled, dominance_matrix(accuracy), np.nan),
        perron=scored_perron(counts, alpha),
        hodge=hodge,
        bradley_terry=strengths,
        win_rate=win_rate(counts),
        scored=scored,
    )


@dataclass(frozen=True)
class BootstrapIntervals:
    """Percentile intervals of Perron scores, and rank confidence sets (`rank_confidence_sets`), from
    bootstrap resamples of each pair's images."""

    score_low: np.ndarray
    score_high: np.ndarray
    rank_low: np.ndarray
    rank_high: np.ndarray
    level: float
    n_resamples: int


def bootstrap_perron(
    counts: PairCounts,
    alpha: float = DEFAULT_ALPHA,
    n_resamples: int = 1000,
    level: float = 0.95,
    seed: int = 0,
) -> BootstrapIntervals:
    """Resample each pair's n_ij labelled images with replacement: percentile intervals of the scores, and
    rank intervals from step-down simultaneous tests of score differences (`rank_confidence_sets`).

    Percentile intervals of the bootstrap ranks themselves undercover in simulation (93% at 11 classifiers,
    misses on near-ties; docs/architecture.md, Ranking): a rank interval must hold the rank of each
    classifier with 95% confidence, which is a statement about all its differences at once.

    Drawing n_ij images with replacement is a multinomial draw over the pair's four outcomes (both right,
    only f_i, only f_j, neither), so each replicate is built from counts without touching images. A
    classifier without evidence (no labelled image) could stand anywhere: its interval spans every rank,
    1 to m, and every score, 0 to 1, whatever the resamples give it.
    """
    m = counts.m
    scores = bootstrap_scores(counts, alpha, n_resamples, seed)
    unknown = counts.without_evidence
    point = perron_rank(dominance_matrix(pairwise_accuracy(counts, alpha))).scores
    rank_low, rank_high = rank_confidence_sets(point, scores, level, unknown)
    tail = (1 - level) / 2
    return BootstrapIntervals(
        score_low=np.where(unknown, 0.0, np.quantile(scores, tail, axis=0)),
        score_high=np.where(unknown, 1.0, np.quantile(scores, 1 - tail, axis=0)),
        rank_low=np.where(unknown, 1, rank_low),
        rank_high=np.where(unknown, m, rank_high),
        level=level,
        n_resamples=n_resamples,
    )


def scored_intervals(
    counts: PairCounts,
    alpha: float = DEFAULT_ALPHA,
    n_resamples: int = 1000,
    level: float = 0.95,
    seed: int = 0,
) -> BootstrapIntervals:
    """bootstrap_perron of the classifiers with labelled images among themselves (as `scored_perron` ranks
    them); NaN scores and ranks for the others."""
    scored = ~counts.without_evidence
    if not scored.any():
        unknown = np.full(counts.m, np.nan)
        return BootstrapIntervals(unknown, unknown, unknown, unknown, level, n_resamples)
    among = bootstrap_perron(counts.among(np.flatnonzero(scored)), alpha, n_resamples, level, seed)
    return BootstrapIntervals(
        score_low=_spread(among.score_low, scored),
        score_high=_spread(among.score_high, scored),
        rank_low=_spread(among.rank_low, scored),
        rank_high=_spread(among.rank_high, scored),
        level=level,
        n_resamples=n_resamples,
    )


def rank_confidence_sets(
    point: np.ndarray, samples: np.ndarray, level: float, unknown: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Rank interval of each classifier i from simultaneous tests of its score differences d_ij = r_i − r_j
    (Mogstad, Romano, Shaikh & Wilhelm 2024, "Inference for ranks", marginal confidence set, step-down).

    H_ij: d_ij = 0 is rejected when |d̂_ij| / σ_ij > c_i, σ_ij the bootstrap standard deviation and c_i the
    `level` quantile over resamples of max_j |d*_ij − d̂_ij| / σ_ij over the j not yet rejected, repeated
    until nothing more is rejected (Romano & Wolf 2005). rank_low = 1 + #{j surely better}, rank_high =
    1 + #{j not surely worse}; a difference without spread is known: exactly tied scores share the better
    rank as in `ranks_from_scores`. Classifiers `unknown` (without evidence) come after all others.
    """
    m = len(point)
    others = ~np.asarray(unknown, dtype=bool)[None, :] & ~np.eye(m, dtype=bool)
    estimate = np.round(point[:, None] - point[None, :], SCORE_DECIMALS)
    draws = samples[:, :, None] - samples[:, None, :]
    spread = draws.std(axis=0)
    exact = spread < 10.0**-SCORE_DECIMALS
    safe = np.where(exact, 1.0, spread)
    observed = np.where(exact, np.where(estimate == 0, 0.0, np.inf), np.abs(estimate) / safe)
    deviations = np.where(exact, 0.0, np.abs(draws - estimate) / safe)
    rejected = others & exact & (estimate != 0)
    tested = others & ~exact
    while True:
        still = tested & ~rejected
        critical = np.quantile(np.where(still, deviations, 0.0).max(axis=2), level, axis=0)
        newly = still & (observed > critical[:, None])
        if not newly.any():
            break
        rejected |= newly
    surely_better = rejected & (estimate < 0)
    maybe_better = others & ~(rejected & (estimate > 0)) & ~(exact & (estimate == 0))
    return 1 + surely_better.sum(axis=1), 1 + maybe_better.sum(axis=1)


def bootstrap_scores(counts: PairCounts, alpha: float, n_resamples: int, seed: int) -> np.ndarray:
    """R×m Perron scores, each from a multinomial resample of every pair's four outcome counts."""
    rng = np.random.default_rng(seed)
    m = counts.m
    correct = np.zeros((n_resamples, m, m))
    for i, j in zip(*np.triu_indices(m, k=1), strict=True):
        size = int(counts.n[i, j])
        if size == 0:
            continue
        only_i, only_j = counts.wins[i, j], counts.wins[j, i]
        both = counts.correct[i, j] - only_i
        outcome_counts = np.array([both, only_i, only_j, size - both - only_i - only_j])
        draws = rng.multinomial(size, outcome_counts / size, size=n_resamples)
        correct[:, i, j] = draws[:, 0] + draws[:, 1]
        correct[:, j, i] = draws[:, 0] + draws[:, 2]
    dominance = dominance_matrix(_smoothed_accuracy(correct, counts.n, alpha))
    scores, _, _ = _perron_vectors(dominance, PERRON_TOLERANCE, PERRON_MAX_ITERATIONS)
    return scores
