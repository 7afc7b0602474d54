"""Active MAD's pure rules: dynamic panels, the full-MAD forecast, priorities and the stop rule."""

import numpy as np
import pytest

from app.core.active import (
    LOWEST_LEVEL,
    UNRANKED_PRIORITY,
    active_policy,
    decided_early,
    forecast_full_mad,
    image_priorities,
    kept_levels,
    neighbour_flips,
    priority_levels,
    refresh_interval,
    score_gradient,
)
from app.core.ranking import (
    PairCounts,
    count_outcomes,
    dominance_matrix,
    pairwise_accuracy,
    perron_rank,
)

LOG_ODDS_095 = float(np.log(0.95 / 0.05))


@pytest.mark.parametrize("evidence", [np.nan, 0.0, 2.0, 10.0])
@pytest.mark.parametrize("panel", [3, 5, 7])
def test_decided_early_never_decides_on_disagreement_nor_on_one_vote(evidence, panel):
    for yes in range(panel + 1):
        for no in range(panel + 1 - yes):
            answer = decided_early(yes, no, panel, evidence, 0.35)
            if yes + no < 2 or (yes and no):
                assert answer is None, (yes, no)
            if answer is not None:
                assert answer == (yes > 0)


def test_two_agreeing_vetted_votes_decide_with_the_base_rate_of_yes():
    # "no": odds (0.65 / 0.35)·19² = 670 ≥ 99; "yes": (0.35 / 0.65)·19² = 194 ≥ 99.
    assert decided_early(0, 2, 5, 2 * LOG_ODDS_095, 0.35) is False
    assert decided_early(2, 0, 5, 2 * LOG_ODDS_095, 0.35) is True
    # Accuracy 0.92: "no" (0.65 / 0.35)·(0.92 / 0.08)² = 245.6 decides, "yes" 71.2 does not (posterior 0.986).
    evidence_092 = 2 * float(np.log(0.92 / 0.08))
    assert decided_early(0, 2, 5, evidence_092, 0.35) is False
    assert decided_early(2, 0, 5, evidence_092, 0.35) is None
    # An unvetted voter (no evidence) sends the question to the majority; so does a useless base rate.
    assert decided_early(2, 0, 5, np.nan, 0.35) is None
    assert decided_early(2, 0, 5, 2 * LOG_ODDS_095, 0.0) is None
    assert decided_early(2, 0, 5, 2 * LOG_ODDS_095, 0.35, confidence=0.999) is None


def test_a_unanimous_strict_majority_is_the_papers_own_rule():
    assert decided_early(3, 0, 5, np.nan, 0.35) is True
    assert decided_early(0, 2, 3, np.nan, 0.35) is False
    assert decided_early(3, 1, 5, np.nan, 0.35) is None  # not unanimous: the caller counts the majority


def counts_of(m: int, n: int, share_of_better: float, open_images: int = 0) -> tuple[PairCounts, np.ndarray]:
    """Every pair (i < j) with n labelled images, all Case II, f_i right on round(n·share_of_better) of
    them; and `open_images` still open in every pair."""
    outcomes = {}
    for i in range(m):
        for j in range(i + 1, m):
            won = int(round(n * share_of_better))
            outcomes[(i, j)] = (np.arange(n) < won, np.arange(n) >= won)
    still_open = np.full((m, m), open_images)
    np.fill_diagonal(still_open, 0)
    return count_outcomes(outcomes, m), still_open


def test_a_fully_labelled_pair_has_nothing_left_to_forecast():
    counts, still_open = counts_of(3, 20, 0.7, open_images=0)
    forecast = forecast_full_mad(counts, still_open, alpha=1.0)
    assert np.all(forecast.variance == 0) and np.all(forecast.covariance == 0)
    assert forecast.accuracy == pytest.approx(pairwise_accuracy(counts, 1.0))
    decision = active_policy(counts, still_open)
    assert decision.settled and decision.expected_swaps == 0 and not decision.priority.any()


def test_open_images_widen_the_forecast_and_more_labels_narrow_it():
    few, few_open = counts_of(3, 5, 0.7, open_images=25)
    many, many_open = counts_of(3, 25, 0.7, open_images=5)
    narrow = forecast_full_mad(many, many_open, 1.0).variance
    wide = forecast_full_mad(few, few_open, 1.0).variance
    off = ~np.eye(3, dtype=bool)
    assert np.all(wide[off] > narrow[off]) and np.all(narrow[off] > 0)


def test_score_gradient_matches_a_perron_rerun():
    accuracy = pairwise_accuracy(counts_of(4, 20, 0.65)[0], 1.0)
    gradient = score_gradient(accuracy)
    nudged = accuracy.copy()
    nudged[0, 2] += 1e-4
    moved = perron_rank(dominance_matrix(nudged)).scores - perron_rank(dominance_matrix(accuracy)).scores
    assert moved == pytest.approx(gradient[0, 2] * 1e-4, abs=1e-8)
    assert gradient[0, 2, 0] > 0 > gradient[0, 2, 2]  # a better a_02 lifts f_0 and lowers f_2


def test_score_gradient_equals_central_differences_in_every_entry():
    accuracy = np.random.default_rng(7).uniform(0.1, 0.9, (6, 6))
    np.fill_diagonal(accuracy, 0.5)
    step = 1e-6
    for i, j in zip(*np.nonzero(~np.eye(6, dtype=bool)), strict=True):
        up, down = accuracy.copy(), accuracy.copy()
        up[i, j] += step
        down[i, j] -= step
        central = (
            perron_rank(dominance_matrix(up), tol=1e-15).scores
            - perron_rank(dominance_matrix(down), tol=1e-15).scores
        ) / (2 * step)
        assert score_gradient(accuracy)[i, j] == pytest.approx(central, abs=1e-7)


def test_a_clear_ranking_settles_early_and_a_near_tie_is_labelled_out():
    clear, clear_open = counts_of(4, 10, 0.9, open_images=20)
    assert active_policy(clear, clear_open).settled
    tied, tied_open = counts_of(4, 10, 0.5, open_images=20)
    decision = active_policy(tied, tied_open)
    assert not decision.settled and decision.neighbour_flips.max() > 0.25
    upper = np.triu_indices(4, k=1)
    assert np.all(decision.priority[upper] > 0) and len(decision.informative_pairs) == 6
    # Labelled to the end, the same tie stops: there is nothing left that could reorder it.
    labelled_out, nothing_open = counts_of(4, 30, 0.5, open_images=0)
    assert active_policy(labelled_out, nothing_open).settled


def test_neighbour_flips_bound_the_chance_that_full_mad_reorders():
    rng = np.random.default_rng(3)
    m, labelled, still = 4, 12, 18
    truth = np.array([0.8, 0.6, 0.55, 0.3])
    reversed_ = []
    flips = []
    for _ in range(200):
        outcomes = {}
        full = {}
        for i in range(m):
            for j in range(i + 1, m):
                wins_i = rng.random(labelled + still) < 0.5 + (truth[i] - truth[j]) / 2
                outcomes[(i, j)] = (wins_i[:labelled], ~wins_i[:labelled])
                full[(i, j)] = (wins_i, ~wins_i)
        counts = count_outcomes(outcomes, m)
        open_images = np.full((m, m), still)
        np.fill_diagonal(open_images, 0)
        reported = perron_rank(dominance_matrix(pairwise_accuracy(counts))).scores
        risk = neighbour_flips(reported, forecast_full_mad(counts, open_images, 1.0))
        final = perron_rank(dominance_matrix(pairwise_accuracy(count_outcomes(full, m)))).scores
        reversed_.append(int(np.sum(final[risk.upper] < final[risk.lower])))
        flips.append(float(risk.flip.sum()))
    # Σ F is the expected number of neighbours full MAD reverses: calibrated within sampling error.
    assert np.mean(flips) == pytest.approx(np.mean(reversed_), abs=0.15)


def test_an_image_is_worth_the_sum_of_its_pairs():
    priority = np.array([[0.0, 0.2, 0.1], [0.2, 0.0, 0.0], [0.1, 0.0, 0.0]])
    # image 0 serves pairs (0, 1) and (0, 2), image 1 pair (1, 2) only, image 2 none
    pair_of_row, image_of_row = np.array([[0, 1], [0, 2], [1, 2]]), np.array([0, 0, 1])
    worth = image_priorities(priority, pair_of_row, image_of_row, images=3)
    assert worth == pytest.approx([0.3, 0.0, 0.0])
    empty = image_priorities(priority, np.zeros((0, 2), dtype=int), np.zeros(0, dtype=int), 2)
    assert empty.tolist() == [0, 0]


def test_the_policy_reruns_every_20_decisions_or_every_hundredth_of_the_questions():
    assert [refresh_interval(q) for q in (0, 950, 2000, 2001, 100_000)] == [20, 20, 20, 21, 1000]
    assert refresh_interval(500, every=5) == 5


def test_priority_levels_are_steps_of_the_square_root_of_two_below_the_worthiest_item():
    worth = np.array([3.0, 2.0, 1.6, 1.4, 1.0, 0.3, 1e-9, 0.0])
    levels = priority_levels(worth)
    top = 2**1.5  # ⌊2·log2 3⌋ = 3 steps
    expected = np.array([2**1.5, 2.0, 2**0.5, 1.0, 1.0, 2**-2, 0.0, 0.0]) / top
    expected[6] = 2.0**LOWEST_LEVEL
    assert levels == pytest.approx(expected)
    above_the_floor = worth > 1e-4
    assert (worth[above_the_floor] / 2**0.5 < levels[above_the_floor] * top).all()
    assert (levels[above_the_floor] * top <= worth[above_the_floor] * (1 + 1e-12)).all()


def test_priority_levels_do_not_move_when_every_worth_shrinks_alike():
    worth = np.random.default_rng(0).lognormal(-6, 2, size=500)
    levels = priority_levels(worth)
    assert (priority_levels(worth / 2**3.5) == levels).all()
    shrunk = priority_levels(worth / 3.0)
    assert (np.abs(2 * np.log2(shrunk / levels)) <= 1 + 1e-9).all()
    assert (shrunk != levels).any()


def test_a_rerun_keeps_the_stored_level_within_one_step_and_rewrites_the_rest():
    stored = np.array([1.0, 1.0, 1.0, 1.0, 0.5, 0.0, 0.25])
    new = np.array([1.0, 2**-0.5, 2**0.5, 0.5, 2**-0.5, 2**-0.5, 0.0])
    kept = kept_levels(stored, new, fold=len(new), shuffle=np.arange(len(new)))
    assert kept.tolist() == [1.0, 1.0, 1.0, 0.5, 0.5, 2**-0.5, 0.0]


def test_below_the_fold_a_rerun_keeps_the_stored_levels_and_above_it_writes_them():
    stored = np.array([2**-3, 1.0, 2**-4, 2**-4, 1.0, 2**-2, 2**-7])
    new = np.array([1.0, 2**-3, 2**-1, 2**-5, 2**-6, 0.0, 2**-4])
    shuffle = np.arange(len(new))
    # By `new`, the fold of 2 is items 0 and 2, its lowest level 2**-1.
    assert kept_levels(stored, new, fold=2, shuffle=shuffle).tolist() == [
        1.0,
        2**-3,
        2**-1,
        2**-4,
        2**-6,
        0.0,
        2**-7,
    ]
    # Items 3 and 6 lay and lie below it: kept, the queue reaches neither before the next rerun; items 1 and
    # 4 fell from above it and item 5 is parked: written. With the fold at every item, all are written.
    assert (kept_levels(stored, new, fold=len(new), shuffle=shuffle) == new).all()


def test_from_unranked_a_rerun_lifts_the_fold_in_the_queues_order_and_leaves_the_rest():
    stored = np.full(8, UNRANKED_PRIORITY)
    new = np.array([1.0, 0.5, 0.5, 0.5, 0.5, 0.25, 0.0, 1.0])
    shuffle = np.array([7, 3, 6, 1, 5, 0, 2, 4])
    # The queue's first 4 by `new`: items 7 and 0 (level 1), then 3 and 1 of the four at 0.5 (by shuffle).
    kept = kept_levels(stored, new, fold=4, shuffle=shuffle)
    assert kept.tolist() == [1.0, 0.5, UNRANKED_PRIORITY, 0.5, UNRANKED_PRIORITY, UNRANKED_PRIORITY, 0.0, 1.0]
    # Nothing the queue reaches before the next rerun is out of order: the fold comes first, as it would have.
    order = np.lexsort((shuffle, -kept))
    assert order[:4].tolist() == np.lexsort((shuffle, -new))[:4].tolist()
    # Every level equal (no labels yet): the fold is lifted, and the queue's order is its shuffle either way.
    equal = kept_levels(stored, np.ones(8), fold=4, shuffle=shuffle)
    assert (equal == 1.0).sum() == 4
    assert np.lexsort((shuffle, -equal))[:4].tolist() == np.argsort(shuffle)[:4].tolist()
