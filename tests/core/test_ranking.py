"""Pairwise accuracies, dominance, Perron rank (Eq. 5) and the rankings beside it."""

import math

import numpy as np
import pytest

from app.core.ranking import (
    ConvergenceError,
    bootstrap_perron,
    bradley_terry,
    count_outcomes,
    dominance_matrix,
    hodge_rank,
    pairwise_accuracy,
    perron_rank,
    rank_classifiers,
    rank_confidence_sets,
    ranks_from_scores,
    scored_intervals,
    scored_perron,
    win_rate,
)


def outcomes_from_cases(both: int, only_i: int, only_j: int, neither: int):
    """Per-image (f_i right, f_j right) arrays with the given Case I / II / III counts."""
    right_i = [True] * both + [True] * only_i + [False] * only_j + [False] * neither
    right_j = [True] * both + [False] * only_i + [True] * only_j + [False] * neither
    return np.array(right_i), np.array(right_j)


def random_outcomes(m: int, k: int, seed: int):
    rng = np.random.default_rng(seed)
    skill = np.linspace(0.8, 0.4, m)
    pairs = [(i, j) for i in range(m) for j in range(i + 1, m)]
    return {(i, j): (rng.random(k) < skill[i], rng.random(k) < skill[j]) for i, j in pairs}


def test_counts_accuracy_and_dominance_by_hand():
    counts = count_outcomes({(0, 1): outcomes_from_cases(2, 5, 1, 2)}, m=2)
    assert counts.n.tolist() == [[0, 10], [10, 0]]
    assert counts.correct.tolist() == [[0, 7], [3, 0]]
    assert counts.wins.tolist() == [[0, 5], [1, 0]]
    accuracy = pairwise_accuracy(counts)
    assert accuracy[0, 1] == 8 / 12 and accuracy[1, 0] == 4 / 12 and accuracy[0, 0] == 0.5
    dominance = dominance_matrix(accuracy)
    assert dominance[0, 1] == pytest.approx(2.0) and dominance[1, 0] == pytest.approx(0.5)
    assert dominance[0, 0] == 1.0
    assert pairwise_accuracy(counts, alpha=0.5)[0, 1] == 7.5 / 11


def test_reversed_pair_key_is_normalised():
    forward = count_outcomes({(0, 1): outcomes_from_cases(1, 3, 0, 1)}, m=2)
    backward = count_outcomes({(1, 0): tuple(reversed(outcomes_from_cases(1, 3, 0, 1)))}, m=2)
    assert np.array_equal(forward.correct, backward.correct) and np.array_equal(forward.wins, backward.wins)


def test_perron_two_classifiers_by_hand():
    # B = [[1, 2], [1/2, 1]]: eigenvalues 0 and 2, eigenvector (2, 1) / 3.
    result = perron_rank(np.array([[1.0, 2.0], [0.5, 1.0]]))
    assert result.scores == pytest.approx([2 / 3, 1 / 3], abs=1e-12)
    assert result.lambda_max == pytest.approx(2.0, abs=1e-12)
    assert result.consistency_index == pytest.approx(0.0, abs=1e-12)


def test_perron_consistent_matrix_recovers_weights():
    weights = np.array([4.0, 2.0, 1.0, 0.5])
    result = perron_rank(weights[:, None] / weights[None, :])
    assert result.scores == pytest.approx(weights / weights.sum(), abs=1e-12)
    assert result.lambda_max == pytest.approx(4.0, abs=1e-12)


def test_perron_cyclic_matrix_consistency_index():
    # Each beats the next 2:1: rows sum to 3.5, so λmax = 3.5 and CI = (3.5 - 3) / 2.
    result = perron_rank(np.array([[1, 2, 0.5], [0.5, 1, 2], [2, 0.5, 1]]))
    assert result.scores == pytest.approx([1 / 3] * 3, abs=1e-12)
    assert result.lambda_max == pytest.approx(3.5) and result.consistency_index == pytest.approx(0.25)


def test_perron_equals_the_limit_form_of_equation_5():
    counts = count_outcomes(random_outcomes(m=11, k=30, seed=4), m=11)
    dominance = dominance_matrix(pairwise_accuracy(counts))
    result = perron_rank(dominance)
    ones = np.ones(11)

    def cesaro_mean(t: int) -> np.ndarray:
        terms = [np.linalg.matrix_power(dominance, a) @ ones for a in range(1, t + 1)]
        return sum(term / (ones @ term) for term in terms) / t

    error_50 = np.abs(cesaro_mean(50) - result.scores).max()
    error_150 = np.abs(cesaro_mean(150) - result.scores).max()
    assert error_150 < 1e-4 and error_150 < error_50 / 2  # the (1/t) Σ converges like 1/t
    eigenvalues, eigenvectors = np.linalg.eig(dominance)
    top = np.argmax(eigenvalues.real)
    vector = np.abs(eigenvectors[:, top].real)
    assert result.scores == pytest.approx(vector / vector.sum(), abs=1e-10)
    assert result.lambda_max == pytest.approx(eigenvalues[top].real, abs=1e-9)
    assert np.all(result.scores > 0) and result.scores.sum() == pytest.approx(1.0)


def test_non_convergence_is_raised_not_hidden():
    with pytest.raises(ConvergenceError):
        perron_rank(np.array([[1, 2, 0.5], [0.5, 1, 3], [2, 1 / 3, 1]]), max_iter=2)


def test_no_labels_at_all_ranks_nobody():
    ranking = rank_classifiers(count_outcomes({}, m=3))
    for values in (ranking.perron.scores, ranking.hodge, ranking.bradley_terry, ranking.win_rate):
        assert np.isnan(values).all()
    assert math.isnan(ranking.perron.lambda_max) and math.isnan(ranking.perron.consistency_index)
    assert np.isnan(ranking.ranks).all() and np.isnan(ranking.accuracy).all()
    assert np.isnan(ranking.dominance).all() and not ranking.scored.any()


def test_disconnected_graph_and_unlabelled_pairs_stay_finite():
    outcomes = {(0, 1): outcomes_from_cases(0, 6, 1, 0), (2, 3): outcomes_from_cases(0, 1, 5, 0)}
    counts = count_outcomes(outcomes, m=5)
    ranking = rank_classifiers(counts)
    for values in (ranking.perron.scores, ranking.hodge, ranking.bradley_terry, ranking.win_rate):
        assert np.all(np.isfinite(values[:4])) and np.isnan(values[4])
    scores = ranking.perron.scores
    assert scores[0] > scores[1] and scores[3] > scores[2]
    # each connected component is centred: HodgeRank of {0, 1} is ±log(b_01)/2 with a_01 = 7/9, a_10 = 2/9
    half_log_b01 = math.log((7 / 9) / (2 / 9)) / 2
    assert ranking.hodge[:2] == pytest.approx([half_log_b01, -half_log_b01])
    labelled = counts.n > 0  # A and B only where a pair has labels: (0, 1) and (2, 3)
    assert np.array_equal(np.isfinite(ranking.accuracy), labelled)
    assert np.array_equal(np.isfinite(ranking.dominance), labelled)
    assert ranking.accuracy[0, 1] == pytest.approx(7 / 9) and ranking.dominance[3, 2] == pytest.approx(3.0)


def test_classifier_that_is_never_right_comes_last_and_finite():
    outcomes = {(i, j): outcomes_from_cases(3, 4, 2, 1) for i in range(1, 4) for j in range(i + 1, 4)}
    outcomes.update({(0, j): outcomes_from_cases(0, 0, 8, 2) for j in range(1, 4)})
    counts = count_outcomes(outcomes, m=4)
    assert counts.correct[0].sum() == 0
    ranking = rank_classifiers(counts)
    assert np.all(np.isfinite(ranking.perron.scores)) and np.all(ranking.perron.scores > 0)
    assert ranking.ranks[0] == 4
    assert np.argmin(ranking.hodge) == 0 and np.argmin(ranking.bradley_terry) == 0
    assert ranking.win_rate[0] == 0


def test_hodge_rank_on_a_path_fits_exactly():
    outcomes = {(0, 1): outcomes_from_cases(1, 4, 1, 2), (1, 2): outcomes_from_cases(0, 3, 0, 0)}
    scores = hodge_rank(count_outcomes(outcomes, m=3))
    # a_01 = 6/10, a_10 = 3/10; a_12 = 4/5, a_21 = 1/5
    assert scores[0] - scores[1] == pytest.approx(math.log(2.0))
    assert scores[1] - scores[2] == pytest.approx(math.log(4.0))
    assert scores.sum() == pytest.approx(0.0, abs=1e-12)


def test_bradley_terry_two_players_is_the_log_odds():
    counts = count_outcomes({(0, 1): outcomes_from_cases(5, 3, 1, 5)}, m=2)
    strengths = bradley_terry(counts, regularization=1e-6)
    assert strengths[0] - strengths[1] == pytest.approx(math.log(3.0), rel=1e-3)


def test_win_rate_counts_case_two_only():
    outcomes = {(0, 1): outcomes_from_cases(5, 3, 1, 5), (0, 2): outcomes_from_cases(9, 0, 0, 0)}
    counts = count_outcomes(outcomes, m=3)
    rates = win_rate(counts)  # classifier 2 has no Case II image: no win rate, not ½
    assert rates[:2].tolist() == [0.75, 0.25] and math.isnan(rates[2])


def test_ranks_from_scores_ties_share_the_better_rank():
    assert ranks_from_scores(np.array([0.2, 0.5, 0.2, 0.1])).tolist() == [2, 1, 2, 4]


def test_ties_come_from_scores_rounded_to_six_decimals_not_from_float_noise():
    assert ranks_from_scores([1.33e-16, -8.9e-17, 0.5]).tolist() == [2, 2, 1]
    assert ranks_from_scores([0.2000004, 0.2000001, 0.200001]).tolist() == [2, 2, 1]
    outcomes = {(i, j): outcomes_from_cases(2, 3, 3, 2) for i in range(5) for j in range(i + 1, 5)}
    ranking = rank_classifiers(count_outcomes(outcomes, m=5))  # every pair even: float noise alone differs
    for scores in (ranking.perron.scores, ranking.hodge, ranking.bradley_terry, ranking.win_rate):
        assert ranking.ranks_of(scores).tolist() == [1] * 5


def test_a_classifier_without_labels_has_no_rank_and_the_others_rank_among_themselves():
    """A classifier added later: its pairs have no labels. It gets no score, rank or interval, and the
    others' numbers are those of the four alone."""
    outcomes = {(i, j): outcomes_from_cases(2, 6 - i, 1 + i, 1) for i in range(4) for j in range(i + 1, 4)}
    counts = count_outcomes(outcomes, m=5)
    ranking = rank_classifiers(counts)
    alone = rank_classifiers(count_outcomes(outcomes, m=4))
    assert ranking.scored.tolist() == [True] * 4 + [False]
    assert np.isnan(ranking.ranks[4]) and ranking.ranks[:4].tolist() == [1, 2, 3, 4]
    for mine, theirs in zip(
        (ranking.perron.scores, ranking.hodge, ranking.bradley_terry, ranking.win_rate),
        (alone.perron.scores, alone.hodge, alone.bradley_terry, alone.win_rate),
        strict=True,
    ):
        assert np.isnan(mine[4]) and mine[:4] == pytest.approx(theirs) and np.isnan(ranking.ranks_of(mine)[4])
    assert ranking.perron.lambda_max == pytest.approx(alone.perron.lambda_max)
    assert ranking.perron.consistency_index == pytest.approx(alone.perron.consistency_index)
    intervals = scored_intervals(counts, n_resamples=200)
    among = bootstrap_perron(count_outcomes(outcomes, m=4), n_resamples=200)
    for mine, theirs in zip(
        (intervals.score_low, intervals.score_high, intervals.rank_low, intervals.rank_high),
        (among.score_low, among.score_high, among.rank_low, among.rank_high),
        strict=True,
    ):
        assert np.isnan(mine[4]) and mine[:4].tolist() == theirs.tolist()


def test_a_classifier_without_labels_would_reorder_the_others_through_b_equal_to_one():
    """Why the unlabelled are left out of B: b = 1 for their pairs moves the others' scores, here enough to
    swap classifiers 1 and 2 (docs/architecture.md, Ranking)."""
    outcomes = {
        (0, 1): outcomes_from_cases(0, 2, 0, 0),
        (0, 2): outcomes_from_cases(2, 0, 0, 3),
        (1, 2): outcomes_from_cases(5, 4, 0, 0),
    }
    with_a_fourth = count_outcomes(outcomes, m=4)
    kept_in_b = perron_rank(dominance_matrix(pairwise_accuracy(with_a_fourth))).scores[:3]
    assert ranks_from_scores(kept_in_b).tolist() == [1, 2, 3]
    assert ranks_from_scores(scored_perron(with_a_fourth).scores[:3]).tolist() == [1, 3, 2]
    assert ranks_from_scores(
        perron_rank(dominance_matrix(pairwise_accuracy(count_outcomes(outcomes, 3)))).scores
    ).tolist() == [1, 3, 2]


def test_without_any_label_the_leaderboard_intervals_are_empty():
    intervals = scored_intervals(count_outcomes({}, m=4), n_resamples=50)
    for values in (intervals.score_low, intervals.score_high, intervals.rank_low, intervals.rank_high):
        assert np.isnan(values).all()


def test_without_any_label_every_interval_spans_every_rank():
    intervals = bootstrap_perron(count_outcomes({}, m=4), n_resamples=50)
    assert intervals.rank_low.tolist() == [1] * 4 and intervals.rank_high.tolist() == [4] * 4


def test_bootstrap_is_seeded_and_brackets_the_estimate():
    counts = count_outcomes(random_outcomes(m=6, k=30, seed=1), m=6)
    first = bootstrap_perron(counts, n_resamples=400, seed=11)
    again = bootstrap_perron(counts, n_resamples=400, seed=11)
    other = bootstrap_perron(counts, n_resamples=400, seed=12)
    assert np.array_equal(first.score_low, again.score_low)
    assert np.array_equal(first.rank_high, again.rank_high)
    assert not np.array_equal(first.score_low, other.score_low)
    point = rank_classifiers(counts)
    assert np.all(first.score_low <= point.perron.scores) and np.all(point.perron.scores <= first.score_high)
    assert np.all(first.rank_low <= first.rank_high)
    assert first.rank_low.min() >= 1 and first.rank_high.max() <= 6


def test_bootstrap_of_unanimous_pairs_has_no_spread():
    # Resampling images that all have the same outcome cannot change the counts.
    outcomes = {(0, 1): outcomes_from_cases(0, 20, 0, 0), (0, 2): outcomes_from_cases(0, 20, 0, 0)}
    counts = count_outcomes(outcomes, m=3)
    intervals = bootstrap_perron(counts, n_resamples=50)
    scores = rank_classifiers(counts).perron.scores
    assert intervals.score_low == pytest.approx(scores, abs=1e-12)
    assert intervals.score_high == pytest.approx(scores, abs=1e-12)
    assert intervals.rank_low.tolist() == intervals.rank_high.tolist() == [1, 2, 2]


def test_rank_intervals_separate_what_the_differences_separate():
    # Four classifiers far apart, except 1 and 2 whose pairs with everyone are identical (a tie).
    gaps = {(0, 1): (2, 25, 1, 2), (0, 2): (2, 25, 1, 2), (0, 3): (2, 28, 0, 0), (1, 2): (5, 10, 10, 5)}
    gaps |= {(1, 3): (2, 25, 1, 2), (2, 3): (2, 25, 1, 2)}
    counts = count_outcomes({pair: outcomes_from_cases(*cases) for pair, cases in gaps.items()}, m=4)
    intervals = bootstrap_perron(counts, n_resamples=400)
    assert intervals.rank_low.tolist() == [1, 2, 2, 4] and intervals.rank_high.tolist() == [1, 3, 3, 4]


def test_rank_confidence_sets_by_hand():
    rng = np.random.default_rng(0)
    point = np.array([0.4, 0.3, 0.2, 0.1])
    # Bootstrap spread 0.01 per score: neighbours 0.1 apart are 7 standard deviations apart.
    samples = point + 0.01 * rng.standard_normal((500, 4))
    low, high = rank_confidence_sets(point, samples, 0.95, np.zeros(4, dtype=bool))
    assert low.tolist() == [1, 2, 3, 4] and high.tolist() == [1, 2, 3, 4]
    wide = point + 0.2 * rng.standard_normal((500, 4))
    low, high = rank_confidence_sets(point, wide, 0.95, np.zeros(4, dtype=bool))
    assert low.tolist() == [1, 1, 1, 1] and high.tolist() == [4, 4, 4, 4]
    # A classifier without evidence is ranked after all others, whatever its scores.
    low, high = rank_confidence_sets(point, samples, 0.95, np.array([True, False, False, False]))
    assert low[1:].tolist() == [1, 2, 3] and high[1:].tolist() == [1, 2, 3]


def test_rank_intervals_step_down_over_each_classifiers_own_differences():
    rng = np.random.default_rng(1)
    point = np.array([0.3, 0.27, 0.25, 0.18])
    samples = point + 0.01 * rng.standard_normal((2000, 4))
    low, high = rank_confidence_sets(point, samples, 0.95, np.zeros(4, dtype=bool))
    # t(0, 1) = 0.03 / (0.01·√2) = 2.1, t(1, 2) = 1.4, the others ≥ 3.5. Classifier 0 rejects 2 and 3 at
    # c ≈ 2.4 (max of three |t|), then 1 at c = 1.96 (one left): rank 1. Classifier 1 rejects only 3: its
    # family {0, 2} keeps c ≈ 2.2 > 2.1, so it may still stand first. Both intervals are honest.
    assert low.tolist() == [1, 1, 2, 4] and high.tolist() == [1, 3, 3, 4]


def test_invalid_inputs():
    with pytest.raises(ValueError, match="alpha must be > 0"):
        pairwise_accuracy(count_outcomes({}, m=2), alpha=0)
    with pytest.raises(ValueError, match="given twice"):
        one_image = outcomes_from_cases(1, 0, 0, 0)
        count_outcomes({(0, 1): one_image, (1, 0): one_image}, m=2)
    with pytest.raises(ValueError, match="positive"):
        perron_rank(np.array([[1.0, 0.0], [0.0, 1.0]]))
