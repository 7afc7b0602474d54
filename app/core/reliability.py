"""Per-annotator reliability for Active MAD's early decisions, which nobody can certify for themselves.

An annotator a is a one-coin rater (Dawid & Skene 1979 with one accuracy r_a for both answers). Two sources
tell r_a (docs/architecture.md, Active sampling):

- gold answers, right g of G: a binomial observation of r_a;
- agreement with other annotators over the votes of each question that no stopping rule chose
  (`unbiased_votes`): a and b agree with chance q_ab = r_a·r_b + (1 − r_a)(1 − r_b), so their agreements
  say r̂_a = (q̂_ab − (1 − r_b)) / (2r_b − 1), worth n_ab·(2r_b − 1)²·r_a(1 − r_a) / (q_ab(1 − q_ab))
  direct observations (the ratio of the two estimates' variances). One partner counts for at most
  `PARTNER_CAP` pairs or `PARTNER_SHARE` of the annotator's pairs with everyone else, whichever is more, so
  that agreement with many different annotators is what vets someone, never agreement with one account.

Each annotator's prior is the crowd's pooled accuracy, worth a0 + b0 answers (empirical Bayes under a
Beta(`PRIOR`) hyperprior); the estimates are the fixed point of the pseudo-counts. An annotator is *vetted*
once their evidence is worth `MIN_EVIDENCE` direct observations, their accuracy is at least
`MIN_VETTED_ACCURACY`, and no partner agrees with them more than their reliabilities explain
(`colluding_pairs`: a one-sided test of their agreement against each one's reliability from the partners who
agree with them less, Bonferroni over the pairs tested): two or more accounts of one person, or people copying
one answer, lose their vetting together. Before the test has the pairs to tell, such accounts would vouch for
each other: their row is each one's strongest, and each one's estimate lifts the other's. So a row that is
both annotators' strongest while neither would be vetted without it counts for neither
(`self_certifying_pairs`): one of the two must stand on agreement with others first. Early decisions count
only the votes of vetted annotators (`vote_weight`); anything else goes to the paper's strict majority.

crowd-kit's OneCoinDawidSkene and DawidSkene fit the same model by EM over every vote, but with no prior and
no partner cap: two accounts that answer alone and agree are certified by their own agreement, which is the
attack this module exists to stop, and EM over every vote would also count the votes a stopping rule chose.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
from scipy.stats import beta, binom

PRIOR = (4.0, 1.0)
"""Beta(a0, b0) hyperprior on the crowd's pooled accuracy (mean 0.8, worth 5 answers)."""
PARTNER_CAP = 10
"""First-two-vote pairs with one partner that count towards an annotator's evidence, at most ..."""
PARTNER_SHARE = 1 / 2
"""... or half the annotator's pairs with everyone else, when that is more: one partner never counts for more
than half of all the others together, however small the crowd (five annotators, four partners each, are
not capped; an account voting only with one other is, at PARTNER_CAP)."""
MIN_EVIDENCE = 20.0
"""Direct observations' worth of evidence an annotator needs before their votes may decide early."""
MIN_VETTED_ACCURACY = 0.7
"""... and an accuracy at least this: a vote of a worse annotator says too little to decide anything early
(a spammer who always answers "no" comes out near 0.65, a coin-flipper near 0.5)."""
MIN_BASELINE = MIN_EVIDENCE / 4
"""Direct observations' worth the rows that agree less than a tested row must hold to be its baseline."""
MIN_PAIRS_TESTED = 10
"""Pairs two annotators need before their agreement is tested for collusion."""
COLLUSION_LEVEL = 0.01
"""Family-wise level of the collusion tests (Bonferroni over the pairs tested)."""
FIXED_POINT_ROUNDS = 30
TAIL_NODES = 48
"""Gauss–Legendre nodes per accuracy in `agreement_tail`."""


@dataclass(frozen=True)
class CrowdEvidence:
    """What the votes say about annotators 0 … A−1: gold per annotator, and one row per pair of annotators
    (a < b) that cast unbiased votes on the same questions: how many such questions, and how many agreed."""

    gold_right: np.ndarray
    gold_answered: np.ndarray
    pair_a: np.ndarray
    pair_b: np.ndarray
    pair_total: np.ndarray
    pair_agreeing: np.ndarray

    @property
    def annotators(self) -> int:
        """A, the number of annotators."""
        return len(self.gold_right)


@dataclass(frozen=True)
class AnnotatorReliability:
    """Per annotator: accuracy (posterior mean), evidence (direct observations' worth), vetted; and the pair
    rows found colluding."""

    accuracy: np.ndarray
    evidence: np.ndarray
    vetted: np.ndarray
    colluding: np.ndarray


def unbiased_votes(panel_size: int, early_eligible: bool, cast: int) -> int:
    """How many of a question's first votes no stopping rule chose: the first two always; the first
    ⌊P/2⌋ + 1 when its first two voters were not both vetted (no early decision could stop it, and a strict
    majority needs that many votes whatever they say). Their pairs are the agreement reliability counts."""
    return min(cast, 2 if early_eligible else max(2, panel_size // 2 + 1))


def agreement_chance(r_a: np.ndarray, r_b: np.ndarray | float) -> np.ndarray:
    """q = r_a·r_b + (1 − r_a)(1 − r_b): the chance that two one-coin raters agree."""
    return r_a * r_b + (1 - r_a) * (1 - r_b)


def pair_estimates(
    accuracy: np.ndarray, evidence: CrowdEvidence
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Per pair row: (r̂ of a from b, its worth, r̂ of b from a, its worth), each partner capped at
    max(PARTNER_CAP, PARTNER_SHARE × the annotator's pairs with the others) pairs (module docstring)."""
    total = evidence.pair_total.astype(float)
    observed = np.divide(evidence.pair_agreeing, total, out=np.zeros_like(total), where=total > 0)
    pairs_of = np.bincount(evidence.pair_a, total, evidence.annotators)
    pairs_of = pairs_of + np.bincount(evidence.pair_b, total, evidence.annotators)
    r_a, r_b = accuracy[evidence.pair_a], accuracy[evidence.pair_b]
    q = np.clip(agreement_chance(r_a, r_b), 1e-6, 1 - 1e-6)
    estimates, worths = [], []
    for own, partner, who in ((r_a, r_b, evidence.pair_a), (r_b, r_a, evidence.pair_b)):
        allowed = np.maximum(PARTNER_CAP, PARTNER_SHARE * (pairs_of[who] - total))
        cap = np.minimum(1.0, allowed / np.maximum(total, 1.0))
        lever = 2 * partner - 1
        informative = lever > 0.05
        estimate = np.clip((observed - (1 - partner)) / np.where(informative, lever, 1.0), 0.0, 1.0)
        worth = cap * total * lever**2 * own * (1 - own) / (q * (1 - q))
        estimates.append(np.where(informative, estimate, 0.0))
        worths.append(np.where(informative, worth, 0.0))
    return estimates[0], worths[0], estimates[1], worths[1]


@dataclass(frozen=True)
class _Fit:
    """The fixed point of `fit_accuracy` with its pseudo-counts, per annotator and per pair row."""

    pooled: float
    accuracy: np.ndarray
    right: np.ndarray
    worth: np.ndarray
    from_b: np.ndarray
    worth_a: np.ndarray
    from_a: np.ndarray
    worth_b: np.ndarray

    def accuracy_without(self, right: np.ndarray, worth: np.ndarray) -> np.ndarray:
        """(r̄·(a0 + b0) + right) / (a0 + b0 + worth): an accuracy from these pseudo-counts."""
        a0, b0 = PRIOR
        return np.clip((self.pooled * (a0 + b0) + right) / (a0 + b0 + worth), 0.5, 1 - 1e-6)

    def posterior(self, right: np.ndarray, worth: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(r̄·(a0 + b0) + right, (1 − r̄)·(a0 + b0) + worth − right): the Beta posterior of an accuracy from
        these pseudo-counts."""
        a0, b0 = PRIOR
        weight = a0 + b0
        return self.pooled * weight + np.maximum(right, 0.0), (1 - self.pooled) * weight + np.maximum(
            worth - right, 0.0
        )

    def without_rows(self, evidence: CrowdEvidence) -> tuple[tuple[np.ndarray, np.ndarray], ...]:
        """Per pair row, ((right, worth) of a, (right, worth) of b): their pseudo-counts less the row's."""
        a, b = evidence.pair_a, evidence.pair_b
        return (
            (self.right[a] - self.from_b * self.worth_a, self.worth[a] - self.worth_a),
            (self.right[b] - self.from_a * self.worth_b, self.worth[b] - self.worth_b),
        )


def fit_accuracy(evidence: CrowdEvidence, excluded: np.ndarray | None = None) -> _Fit:
    """r_a = (r̄·(a0 + b0) + g_a + Σ_b w_ab r̂_ab) / (a0 + b0 + G_a + Σ_b w_ab), with r̄ = (a0 + Σ right) /
    (a0 + b0 + Σ worth) the crowd's pooled accuracy (PRIOR = (a0, b0)), iterated to its fixed point from
    the hyperprior's mean; pair rows marked `excluded` count for nothing."""
    a0, b0 = PRIOR
    keep = np.ones(len(evidence.pair_a)) if excluded is None else (~excluded).astype(float)
    fit = _Fit(a0 / (a0 + b0), np.full(evidence.annotators, a0 / (a0 + b0)), *([np.zeros(0)] * 6))
    for _ in range(FIXED_POINT_ROUNDS):
        fit = _pseudo_counts(fit.accuracy, evidence, keep)
    return fit


def _pseudo_counts(accuracy: np.ndarray, evidence: CrowdEvidence, keep: np.ndarray) -> _Fit:
    """One step of `fit_accuracy`: the pseudo-counts at these accuracies, and the accuracies they give."""
    a0, b0 = PRIOR
    count = evidence.annotators
    from_b, worth_a, from_a, worth_b = pair_estimates(accuracy, evidence)
    worth_a, worth_b = worth_a * keep, worth_b * keep
    right = evidence.gold_right + np.bincount(evidence.pair_a, from_b * worth_a, count)
    right = right + np.bincount(evidence.pair_b, from_a * worth_b, count)
    worth = evidence.gold_answered + np.bincount(evidence.pair_a, worth_a, count)
    worth = worth + np.bincount(evidence.pair_b, worth_b, count)
    pooled = float((a0 + right.sum()) / (a0 + b0 + worth.sum()))
    fit = _Fit(pooled, accuracy, right, worth, from_b, worth_a, from_a, worth_b)
    return replace(fit, accuracy=fit.accuracy_without(right, worth))


def _information(accuracy: np.ndarray, partner: float) -> np.ndarray:
    """r(1 − r) / (q(1 − q)) with q = r·p + (1 − r)(1 − p): the factor of an agreement row's worth that
    depends on the annotator's own accuracy (`pair_estimates`), against a partner of accuracy p."""
    agreement = np.clip(agreement_chance(accuracy, partner), 1e-6, 1 - 1e-6)
    return accuracy * (1 - accuracy) / (agreement * (1 - agreement))


def without_as_close(evidence: CrowdEvidence, fit: _Fit) -> tuple[tuple[np.ndarray, np.ndarray], ...]:
    """Per pair row, ((right, worth) of a, (right, worth) of b): their pseudo-counts less those of every row
    of theirs that agrees at least as often as this one (the row itself included). Three accounts of one
    person agree perfectly on three rows: each account's accuracy without only the tested row still stands
    on its row with the third, so the test judges a row against each one's agreement with the partners who
    agree with them less. The rows left are worth what they would be at the accuracy they give (their worth
    scaled by `_information` at it against the annotator's accuracy with every row, partners at the crowd's
    pooled accuracy, to its fixed point): at an accuracy the close rows inflated towards 1 the rows with
    everyone else would count for a fifth of themselves."""
    rows = len(evidence.pair_a)
    total = evidence.pair_total.astype(float)
    rate = np.divide(evidence.pair_agreeing, total, out=np.zeros_like(total), where=total > 0)
    owner = np.r_[evidence.pair_a, evidence.pair_b]
    closeness = np.r_[rate, rate]
    right = np.r_[fit.from_b * fit.worth_a, fit.from_a * fit.worth_b]
    worth = np.r_[fit.worth_a, fit.worth_b]
    order = np.lexsort((-closeness, owner))
    keys, tie_group = np.unique(np.c_[owner[order], closeness[order]], axis=0, return_inverse=True)
    last_of_tie = np.zeros(len(keys), dtype=np.int64)
    np.maximum.at(last_of_tie, tie_group.ravel(), np.arange(len(order)))
    starts = np.r_[0, np.flatnonzero(np.diff(owner[order])) + 1]
    first_of_owner = np.repeat(starts, np.diff(np.r_[starts, len(order)]))
    sums = []
    for part in (right, worth):
        running = np.r_[0.0, np.cumsum(part[order])]
        closer = np.empty(len(order))
        closer[order] = running[last_of_tie[tie_group.ravel()] + 1] - running[first_of_owner]
        sums.append(closer)
    gold_right, gold_worth = evidence.gold_right[owner], evidence.gold_answered[owner]
    agreement_right = fit.right[owner] - gold_right - sums[0]
    agreement_worth = fit.worth[owner] - gold_worth - sums[1]
    with_every_row = _information(fit.accuracy[owner], fit.pooled)
    scale = np.ones(len(owner))
    for _ in range(FIXED_POINT_ROUNDS):
        accuracy = fit.accuracy_without(
            gold_right + scale * agreement_right, gold_worth + scale * agreement_worth
        )
        scale = _information(accuracy, fit.pooled) / with_every_row
    left_right, left_worth = gold_right + scale * agreement_right, gold_worth + scale * agreement_worth
    return (left_right[:rows], left_worth[:rows]), (left_right[rows:], left_worth[rows:])


def agreement_tail(agreeing: np.ndarray, total: np.ndarray, a: tuple, b: tuple) -> np.ndarray:
    """P(X ≥ agreeing) for X ~ Binomial(total, q), q = r_a·r_b + (1 − r_a)(1 − r_b), averaged over r_a ~
    Beta(a) and r_b ~ Beta(b) truncated to [½, 1] (the posterior predictive tail): Gauss–Legendre with
    TAIL_NODES nodes a side over each posterior's range from its 10⁻⁹ to its 1 − 10⁻¹² quantile."""
    nodes, weights = np.polynomial.legendre.leggauss(TAIL_NODES)
    grids = []
    for good, bad in (a, b):
        low = np.maximum(0.5, beta.ppf(1e-9, good, bad))[:, None]
        high = np.maximum(low + 1e-9, beta.ppf(1 - 1e-12, good, bad)[:, None])
        points = low + (high - low) * (nodes[None, :] + 1) / 2
        mass = weights[None, :] * beta.pdf(points, good[:, None], bad[:, None]) * (high - low) / 2
        grids.append((points, mass / np.maximum(mass.sum(axis=1, keepdims=True), 1e-300)))
    (r_a, w_a), (r_b, w_b) = grids
    q = agreement_chance(r_a[:, :, None], r_b[:, None, :])
    tail = binom.sf(agreeing[:, None, None] - 1, total[:, None, None], q)
    return np.einsum("rij,ri,rj->r", tail, w_a, w_b)


def colluding_pairs(evidence: CrowdEvidence, fit: _Fit) -> np.ndarray:
    """Pair rows whose agreement their accuracies elsewhere cannot explain, one-sided at α = COLLUSION_LEVEL /
    (pairs tested). Where both annotators' rows that agree less than this one are worth MIN_BASELINE
    (`without_as_close`), those are the baseline: flagged when the posterior predictive P(X ≥ agreeing) ≤ α
    (`agreement_tail`; it is at least ¼ of the binomial tail at both posterior medians, since both
    accuracies lie above their medians a quarter of the time and q grows with each above ½, so only rows
    where that is ≤ 4α are integrated). Otherwise (five careful annotators agree on everything: nothing is out
    of line, and the one-coin posterior of an accuracy near 1 has too thin a tail for a predictive test)
    each accuracy is taken without this row alone, at the 1 − α quantile of its posterior, and the row is
    flagged when P(X ≥ agreeing | n_ab, q_ab) ≤ α under the binomial. Two careful annotators agree nearly
    always, and so may two accounts of one careful person: only an agreement out of line is flagged."""
    tested = evidence.pair_total >= MIN_PAIRS_TESTED
    level = COLLUSION_LEVEL / max(1, int(tested.sum()))
    baselines, alone = without_as_close(evidence, fit), fit.without_rows(evidence)
    baseline = (baselines[0][1] >= MIN_BASELINE) & (baselines[1][1] >= MIN_BASELINE)
    (good_a, bad_a), (good_b, bad_b) = (
        fit.posterior(np.where(baseline, close[0], row[0]), np.where(baseline, close[1], row[1]))
        for close, row in zip(baselines, alone, strict=True)
    )
    flagged = np.zeros_like(tested)
    for rows, quantile, bound in (
        (np.flatnonzero(tested & ~baseline), 1 - level, level),
        (np.flatnonzero(tested & baseline), 0.5, 4 * level),
    ):
        r_a = np.clip(beta.ppf(quantile, good_a[rows], bad_a[rows]), 0.5, 1 - 1e-6)
        r_b = np.clip(beta.ppf(quantile, good_b[rows], bad_b[rows]), 0.5, 1 - 1e-6)
        tail = binom.sf(
            evidence.pair_agreeing[rows] - 1, evidence.pair_total[rows], agreement_chance(r_a, r_b)
        )
        flagged[rows] = tail <= bound
    rows = np.flatnonzero(flagged & baseline)
    flagged[rows] = (
        agreement_tail(
            evidence.pair_agreeing[rows],
            evidence.pair_total[rows],
            (good_a[rows], bad_a[rows]),
            (good_b[rows], bad_b[rows]),
        )
        <= level
    )
    return flagged


def self_certifying_pairs(evidence: CrowdEvidence, fit: _Fit) -> np.ndarray:
    """Pair rows that are both annotators' strongest, w_a(ab) = max_c w_a(ac) and w_b(ab) = max_c w_b(bc) (the
    worths of `pair_estimates`, > 0), while neither would be vetted without the row's pseudo-counts (worth
    under MIN_EVIDENCE or accuracy under MIN_VETTED_ACCURACY): two annotators who are each other's main
    support and stand on no one else vouch for neither (module docstring). A partner who stands without the
    row may vouch: annotators whose agreement is mostly with one established annotator stay vetted."""
    a, b = evidence.pair_a, evidence.pair_b
    strongest = np.zeros(evidence.annotators)
    np.maximum.at(strongest, a, fit.worth_a)
    np.maximum.at(strongest, b, fit.worth_b)
    mutual = (
        (fit.worth_a >= strongest[a]) & (fit.worth_b >= strongest[b]) & (fit.worth_a > 0) & (fit.worth_b > 0)
    )
    stands = [
        (worth >= MIN_EVIDENCE) & (fit.accuracy_without(right, worth) >= MIN_VETTED_ACCURACY)
        for right, worth in fit.without_rows(evidence)
    ]
    return mutual & ~stands[0] & ~stands[1]


def annotator_reliability(evidence: CrowdEvidence) -> AnnotatorReliability:
    """Accuracy and evidence per annotator (`fit_accuracy`, colluding and self-certifying pairs left out),
    vetted when the evidence reaches MIN_EVIDENCE, the accuracy MIN_VETTED_ACCURACY, and the annotator is in
    no colluding pair."""
    first = fit_accuracy(evidence)
    colluding = colluding_pairs(evidence, first)
    fit = fit_accuracy(evidence, excluded=colluding | self_certifying_pairs(evidence, first))
    suspect = np.zeros(evidence.annotators, dtype=bool)
    suspect[evidence.pair_a[colluding]] = True
    suspect[evidence.pair_b[colluding]] = True
    vetted = (fit.worth >= MIN_EVIDENCE) & (fit.accuracy >= MIN_VETTED_ACCURACY) & ~suspect
    return AnnotatorReliability(fit.accuracy, fit.worth, vetted, colluding)


def vote_weight(reliability: AnnotatorReliability) -> np.ndarray:
    """Per annotator, the log-likelihood ratio log(r / (1 − r)) their vote carries, NaN when not vetted."""
    accuracy = reliability.accuracy
    return np.where(reliability.vetted, np.log(accuracy / (1 - accuracy)), np.nan)


def base_rate(yes_decided: int, decided: int) -> float:
    """π = (1 + yes) / (2 + decided): the Beta(1, 1) posterior mean share of "yes" among decided questions."""
    return (1 + yes_decided) / (2 + decided)
