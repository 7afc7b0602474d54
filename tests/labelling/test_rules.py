"""The vote rules of paper Sec. 3.1 as pure functions."""

import pytest

from app.labelling import rules


@pytest.mark.parametrize(("panel", "majority"), [(1, 1), (3, 2), (5, 3), (7, 4)])
def test_majority_is_strict(panel, majority):
    assert rules.majority(panel) == majority


@pytest.mark.parametrize(
    ("yes", "no", "outcome"),
    [(0, 0, None), (2, 0, None), (2, 2, None), (3, 0, True), (3, 2, True), (0, 3, False), (2, 3, False)],
)
def test_three_concordant_votes_of_five_decide(yes, no, outcome):
    assert rules.outcome(yes, no, panel_size=5) is outcome


def test_a_tie_beyond_the_majority_stays_open_and_needs_one_more_vote():
    # only possible when excluded votes are counted again; the next vote breaks the tie
    assert rules.outcome(3, 3, panel_size=5) is None
    assert rules.votes_still_needed(3, 3, panel_size=5) == 1


@pytest.mark.parametrize(("yes", "no", "needed"), [(0, 0, 3), (1, 0, 2), (1, 1, 2), (2, 1, 1), (2, 2, 1)])
def test_votes_still_needed_is_the_nearest_decision(yes, no, needed):
    assert rules.votes_still_needed(yes, no, panel_size=5) == needed


@pytest.mark.parametrize(
    ("panel", "flags", "discard"), [(5, 3, False), (5, 4, True), (3, 1, False), (3, 2, True)]
)
def test_more_than_three_of_five_flags_discard(panel, flags, discard):
    assert rules.too_difficult(flags, panel) is discard
