"""Top-k maximum-discrepancy selection (paper Algorithm 1, Sec. 3.1)."""

import numpy as np
import pytest

from app.core.selection import select_all_pairs, select_pair
from app.core.taxonomy_sources import imagenet_1k
from app.core.threshold_rule import ThresholdRule

# Three classes: 0 and 1 are siblings, 2 is far from both.
SMALL_DISTANCE = np.array([[0.0, 0.5, 3.0], [0.5, 0.0, 2.5], [3.0, 2.5, 0.0]])


def reference_selection(
    labels_i, probs_i, labels_j, probs_j, distance, k, threshold, cap, reserve, excluded=None, fill=False
):
    """Algorithm 1 row by row: filter, sort by (-d, -min p, ordinal), greedy with the per-label caps;
    `fill`: every disagreement, those below T after all those passing it."""
    rows = []
    for x in range(len(labels_i)):
        a, b = int(labels_i[x]), int(labels_j[x])
        below = min(probs_i[x], probs_j[x]) < threshold
        if a < 0 or b < 0 or a == b or (below and not fill):
            continue
        if excluded is not None and excluded[x]:
            continue
        rows.append((below, -distance[a, b], -min(probs_i[x], probs_j[x]), x))
    rows.sort()
    used_i: dict[int, int] = {}
    used_j: dict[int, int] = {}
    accepted = []
    for _, _, _, x in rows:
        if len(accepted) == k + reserve:
            break
        a, b = int(labels_i[x]), int(labels_j[x])
        if used_i.get(a, 0) < cap and used_j.get(b, 0) < cap:
            accepted.append(x)
            used_i[a] = used_i.get(a, 0) + 1
            used_j[b] = used_j.get(b, 0) + 1
    return accepted


def test_hand_worked_example():
    #            x:   0    1    2    3    4    5    6
    labels_i = np.array([0, 0, 2, 1, 0, 0, -1])
    labels_j = np.array([2, 2, 0, 2, 1, 0, 2])
    probs_i = np.array([0.9, 0.95, 0.85, 0.99, 0.9, 0.9, 0.9])
    probs_j = np.array([0.9, 0.95, 0.8, 0.79, 0.9, 0.9, 0.9])
    chosen = select_pair(labels_i, probs_i, labels_j, probs_j, SMALL_DISTANCE, k=2, reserve_size=5)
    # candidates: x0 (d=3, min p .9), x1 (d=3, .95), x2 (d=3, .8 — T is inclusive), x4 (d=0.5);
    # x3 fails T (0.79), x5 agrees, x6 has no f_i prediction.
    assert chosen.selected.tolist() == [1, 0]
    assert chosen.reserve.tolist() == [2, 4]
    assert chosen.distances.tolist() == [3.0, 3.0, 3.0, 0.5]
    assert chosen.labels_i.tolist() == [0, 0, 2, 0] and chosen.labels_j.tolist() == [2, 2, 0, 1]
    assert chosen.probs_j.tolist() == [0.95, 0.9, 0.8, 0.9]


def test_cap_counts_each_models_labels_over_selection_and_reserve():
    n = 12
    labels_i = np.zeros(n, dtype=int)  # f_i always says 0
    labels_j = np.array([2] * 6 + [1] * 6)
    probs = np.ones(n)
    chosen = select_pair(
        labels_i, probs, labels_j, probs, SMALL_DISTANCE, k=2, max_per_label=3, reserve_size=10
    )
    assert chosen.ordinals.tolist() == [0, 1, 2]  # f_i's label 0 is full after three images
    assert chosen.n_selected == 2 and chosen.reserve.tolist() == [2]


def test_excluded_images_never_enter():
    labels_i, labels_j = np.array([0, 0, 1]), np.array([2, 2, 2])
    probs = np.ones(3)
    excluded = np.array([True, False, False])
    chosen = select_pair(labels_i, probs, labels_j, probs, SMALL_DISTANCE, k=3, excluded=excluded)
    assert chosen.selected.tolist() == [1, 2]


def test_no_candidates_gives_empty_selection():
    labels = np.array([0, 1, 2])
    chosen = select_pair(labels, np.ones(3), labels, np.ones(3), SMALL_DISTANCE)
    assert chosen.selected.size == 0 and chosen.reserve.size == 0 and chosen.n_selected == 0


@pytest.mark.parametrize("seed", range(60))
def test_matches_row_by_row_reference(seed):
    rng = np.random.default_rng(seed)
    n_classes = int(rng.choice([3, 12, 1000]))
    distance = imagenet_1k().distance_matrix()[:n_classes, :n_classes] if n_classes > 3 else SMALL_DISTANCE
    n = int(rng.integers(1, 4000))
    labels_i, labels_j = rng.integers(-1, n_classes, n), rng.integers(-1, n_classes, n)
    if seed % 2:  # coarse probabilities make many exact ties
        probs_i, probs_j = rng.choice([0.5, 0.8, 0.9, 1.0], n), rng.choice([0.5, 0.8, 0.9, 1.0], n)
    else:
        probs_i, probs_j = rng.random(n).astype(np.float32), rng.random(n).astype(np.float32)
    excluded = rng.random(n) < 0.1 if seed % 3 == 0 else None
    k, cap, reserve = int(rng.integers(0, 40)), int(rng.integers(1, 5)), int(rng.integers(0, 40))
    fill = seed % 4 == 1
    chosen = select_pair(
        labels_i,
        probs_i,
        labels_j,
        probs_j,
        distance,
        k=k,
        max_per_label=cap,
        reserve_size=reserve,
        excluded=excluded,
        rule=ThresholdRule.fill if fill else ThresholdRule.absolute,
    )
    expected = reference_selection(
        labels_i, probs_i, labels_j, probs_j, distance, k, 0.8, cap, reserve, excluded, fill
    )
    assert chosen.ordinals.tolist() == expected
    assert chosen.selected.tolist() == expected[:k]
    passed = np.minimum(probs_i, probs_j)[chosen.ordinals] >= 0.8
    assert chosen.passed.tolist() == passed.tolist() and (fill or passed.all())


def test_fill_tops_up_to_k_below_the_threshold_after_the_papers_candidates():
    #            x:   0    1    2    3    4
    labels_i = np.array([0, 0, 2, 1, 0])
    labels_j = np.array([2, 2, 0, 2, 0])
    probs_i = np.array([0.9, 0.3, 0.85, 0.5, 0.99])
    probs_j = np.array([0.9, 0.4, 0.2, 0.6, 0.99])
    same = dict(k=3, reserve_size=1)
    paper = select_pair(labels_i, probs_i, labels_j, probs_j, SMALL_DISTANCE, **same)
    assert paper.ordinals.tolist() == [0]
    filled = select_pair(
        labels_i, probs_i, labels_j, probs_j, SMALL_DISTANCE, rule=ThresholdRule.fill, **same
    )
    # x0 passes T = 0.8; below it, by distance then min p: x1 (d=3, .3), x2 (d=3, .2), x3 (d=2.5); x4 agrees
    assert filled.selected.tolist() == [0, 1, 2] and filled.reserve.tolist() == [3]
    assert filled.passed.tolist() == [True, False, False, False]


def test_deep_candidates_are_found_when_the_cap_rejects_the_top():
    # 5000 far-apart candidates all share f_i's label; the only other labels sit at the very end.
    n = 5010
    labels_i = np.r_[np.full(5000, 2), np.zeros(10, dtype=int)]
    labels_j = np.r_[np.zeros(5000, dtype=int), np.ones(10, dtype=int)]
    probs = np.ones(n)
    chosen = select_pair(
        labels_i, probs, labels_j, probs, SMALL_DISTANCE, k=4, max_per_label=3, reserve_size=0
    )
    assert chosen.selected.tolist() == [0, 1, 2, 5000]


def test_all_pairs_equals_each_pair_and_accepts_a_pair_list():
    rng = np.random.default_rng(3)
    distance = imagenet_1k().distance_matrix()
    labels = rng.integers(0, 1000, (4, 3000))
    probs = rng.random((4, 3000))
    everything = select_all_pairs(labels, probs, distance, k=5)
    assert sorted(everything) == [(0, 1), (0, 2), (0, 3), (1, 2), (1, 3), (2, 3)]
    for (i, j), chosen in everything.items():
        alone = select_pair(labels[i], probs[i], labels[j], probs[j], distance, k=5)
        assert np.array_equal(alone.ordinals, chosen.ordinals)
    new_classifier = select_all_pairs(labels, probs, distance, k=5, pairs=[(0, 3), (1, 3), (2, 3)])
    assert sorted(new_classifier) == [(0, 3), (1, 3), (2, 3)]


def test_rejects_bad_inputs():
    labels = np.array([[0, 3], [1, 2]])
    with pytest.raises(ValueError, match="labels must lie in"):
        select_all_pairs(labels, np.ones((2, 2)), SMALL_DISTANCE)
    with pytest.raises(ValueError, match="pairs must be"):
        select_all_pairs(np.zeros((2, 2), dtype=int), np.ones((2, 2)), SMALL_DISTANCE, pairs=[(1, 0)])
    with pytest.raises(ValueError, match="m×n"):
        select_all_pairs(np.zeros((2, 2), dtype=int), np.ones((2, 3)), SMALL_DISTANCE)
