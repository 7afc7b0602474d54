"""Active MAD's pure rules: dynamic panels, annotator reliability, pair priorities and the stop rule."""

import numpy as np
import pytest

from app.core.active import (
    DEFAULT_MIN_IMAGES,
    LOWEST_LEVEL,
    active_policy,
    adjacent_flip,
    decided_early,
    flip_probability,
    image_priorities,
    priority_levels,
    projected_flip,
    refresh_interval,
    reliability_from_pairs,
)
from app.core.ranking import PairCounts, count_outcomes
from app.core.simulate_labelling import decide_stream, vote_streams


@pytest.mark.parametrize("reliability", [0.6, 0.9, 0.95, 0.999, 1.0])
@pytest.mark.parametrize("panel", [3, 5, 7])
def test_decided_early_never_decides_on_disagreement_nor_on_one_vote(reliability, panel):
    for yes in range(panel + 1):
        for no in range(panel + 1 - yes):
            answer = decided_early(yes, no, panel, reliability)
            if yes + no < 2 or (yes and no):
                assert answer is None, (yes, no)
            if answer is not None:
                assert answer == (yes > 0)


def test_two_agreeing_votes_decide_only_for_reliable_annotators():
    # 0.95² / (0.95² + 0.05²) = 0.99723 ≥ 0.99; 0.9² / (0.9² + 0.1²) = 0.98780 < 0.99.
    assert decided_early(2, 0, 5, 0.95) is True
    assert decided_early(0, 2, 5, 0.95) is False
    assert decided_early(2, 0, 5, 0.9) is None
    assert decided_early(3, 0, 9, 0.9) is True  # 0.9³ / (0.9³ + 0.1³) = 0.99863
    assert decided_early(2, 0, 5, 0.95, confidence=0.999) is None
    assert decided_early(2, 0, 5, 0.5) is None and decided_early(4, 0, 9, 0.3) is None
    assert decided_early(3, 0, 5, 0.6) is True  # a unanimous strict majority is the paper's own rule


def test_reliability_from_pairs_starts_at_the_prior_and_follows_the_pairs():
    assert reliability_from_pairs(0, 0) == 0.8  # Beta(3.4, 1.6): q = 0.68 = 0.8² + 0.2²
    # q = (3.4 + 95) / (5 + 100) = 0.93714..., a = ½ + ½·√(2q − 1)
    assert reliability_from_pairs(95, 5) == pytest.approx(0.5 + 0.5 * np.sqrt(2 * 98.4 / 105 - 1))
    assert reliability_from_pairs(10_000, 0) > 0.999
    assert reliability_from_pairs(0, 100) == 0.5, "agreement at or below chance means coin flips"
    with pytest.raises(ValueError):
        reliability_from_pairs(-1, 0)


@pytest.mark.parametrize("accuracy", [0.7, 0.8, 0.9, 0.97])
def test_reliability_from_pairs_recovers_the_accuracy_of_simulated_votes(accuracy):
    right = np.random.default_rng(7).random((50_000, 2)) < accuracy
    agreeing = int((right[:, 0] == right[:, 1]).sum())
    assert reliability_from_pairs(agreeing, len(right) - agreeing) == pytest.approx(accuracy, abs=0.01)


def tallies(streams: np.ndarray, reliability: float) -> tuple[float, float]:
    """Each question decided by decide_stream at this reliability: (the former estimate, the Beta(4, 1)
    mean of votes agreeing with their outcome; reliability_from_pairs over the first two votes)."""
    agreeing = disagreeing = pairs_agreeing = 0
    for stream in streams:
        answer, cast = decide_stream(stream, streams.shape[1], reliability)
        with_outcome = int((stream[:cast] == answer).sum())
        agreeing, disagreeing = agreeing + with_outcome, disagreeing + cast - with_outcome
        pairs_agreeing += int(stream[0] == stream[1])
    former = (4 + agreeing) / (5 + agreeing + disagreeing)
    return former, reliability_from_pairs(pairs_agreeing, len(streams) - pairs_agreeing)


def test_early_stopping_cannot_move_the_reliability_estimate():
    truth = np.ones(20_000, dtype=bool)
    streams = vote_streams(truth, 0.15, 0.0, 5, np.random.default_rng(11))
    former_full, full = tallies(streams, 0.8)  # every question to a strict majority
    former_early, early = tallies(streams, 0.95)  # 2 agreeing votes decide
    assert early == full == pytest.approx(0.85, abs=0.01)
    assert former_full > 0.855 and former_early > former_full + 0.01, (former_full, former_early)


def separated_counts(m: int, n: int, gap: float) -> PairCounts:
    """Every pair (i < j): n images, f_i right on a share 0.5 + gap·(j − i), f_j on the others."""
    outcomes = {}
    for i in range(m):
        for j in range(i + 1, m):
            won = int(round(n * min(0.5 + gap * (j - i), 1.0)))
            outcomes[(i, j)] = (np.arange(n) < won, np.arange(n) >= won)
    return count_outcomes(outcomes, m)


def test_pairs_without_open_images_are_settled_with_priority_zero():
    counts = separated_counts(4, 3, 0.0)
    open_images = np.full((4, 4), 5)
    open_images[0, 1] = open_images[1, 0] = 0
    decision = active_policy(counts, open_images, n_resamples=50)
    assert decision.priority[0, 1] == 0 and decision.pair_settled[0, 1]
    assert np.all(decision.pair_settled.diagonal()) and np.all(decision.priority.diagonal() == 0)
    assert np.array_equal(decision.priority, decision.priority.T)
    assert np.array_equal(decision.pair_settled, decision.pair_settled.T)
    assert not decision.settled and (0, 1) not in decision.informative_pairs
    assert all(decision.priority[pair] > 0 for pair in decision.informative_pairs)
    priorities = [decision.priority[pair] for pair in decision.informative_pairs]
    assert priorities == sorted(priorities, reverse=True)
    assert active_policy(counts, np.zeros((4, 4)), n_resamples=50).settled


def test_a_clearly_separated_ranking_settles_and_a_tied_one_does_not():
    clear = active_policy(separated_counts(5, 30, 0.2), np.full((5, 5), 10), n_resamples=100)
    assert clear.settled and clear.informative_pairs == () and not clear.priority.any()
    tied = active_policy(separated_counts(5, 20, 0.0), np.full((5, 5), 25), n_resamples=100)
    assert (
        not tied.settled
        and len(tied.informative_pairs) == 10
        and np.all(tied.priority[~np.eye(5, dtype=bool)] > 0)
    )


def test_a_tie_stops_for_futility_once_half_its_images_are_labelled():
    counts = separated_counts(3, 20, 0.0)
    assert not active_policy(counts, np.full((3, 3), 21), n_resamples=50).settled
    assert active_policy(counts, np.full((3, 3), 20), n_resamples=50).settled
    # A clear but not yet decided lead is not futile: labelling the rest would decide it.
    assert projected_flip(np.array(0.1), np.array(15), np.array(15)) < 0.05
    assert projected_flip(np.array(0.5), np.array(15), np.array(1000)) == 0.5


def test_an_image_is_worth_the_sum_of_its_pairs():
    priority = np.array([[0.0, 0.2, 0.1], [0.2, 0.0, 0.0], [0.1, 0.0, 0.0]])
    # image 0 serves pairs (0, 1) and (0, 2), image 1 pair (1, 2) only, image 2 none
    pair_of_row, image_of_row = np.array([[0, 1], [0, 2], [1, 2]]), np.array([0, 0, 1])
    worth = image_priorities(priority, pair_of_row, image_of_row, images=3)
    assert worth == pytest.approx([0.3, 0.0, 0.0])
    assert image_priorities(priority, np.zeros((0, 2), dtype=int), np.zeros(0, dtype=int), 2).tolist() == [
        0,
        0,
    ]


def test_too_few_images_keep_a_pair_open_however_clear():
    few = separated_counts(3, DEFAULT_MIN_IMAGES - 1, 0.5)
    decision = active_policy(few, np.full((3, 3), 5), n_resamples=50)
    assert not decision.settled and decision.priority[0, 1] > 0


def test_flip_probability_counts_reversed_and_tied_fits():
    point = np.array([0.5, 0.3, 0.2])
    samples = np.array([[0.5, 0.3, 0.2], [0.3, 0.5, 0.2], [0.4, 0.4, 0.2], [0.5, 0.2, 0.3]])
    flips = flip_probability(point, samples)
    assert flips[0, 1] == pytest.approx((1 + 0.5) / 4) and flips[1, 2] == pytest.approx(0.25)
    assert flips[0, 2] == 0 and np.array_equal(flips, flips.T)
    assert adjacent_flip(point, flips).tolist() == pytest.approx([0.375, 0.375, 0.25])
    assert flip_probability(np.array([0.5, 0.5]), samples[:, :2])[0, 1] == 0.5


def test_the_policy_reruns_every_20_decisions_or_every_hundredth_of_the_questions():
    assert [refresh_interval(q) for q in (0, 950, 2000, 2001, 100_000)] == [20, 20, 20, 21, 1000]
    assert refresh_interval(500, every=5) == 5


def test_priority_levels_are_steps_of_the_square_root_of_two():
    worth = np.array([3.0, 2.0, 1.6, 1.4, 1.0, 0.3, 1e-9, 0.0])
    levels = priority_levels(worth)
    assert levels == pytest.approx([2**1.5, 2.0, 2**0.5, 1.0, 1.0, 2**-2, 2.0**LOWEST_LEVEL, 0.0])
    above_the_floor = worth > 1e-4
    assert (worth[above_the_floor] / 2**0.5 < levels[above_the_floor]).all()
    assert (levels[above_the_floor] <= worth[above_the_floor]).all()
