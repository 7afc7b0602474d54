"""Rank correlations, stability versus k, case shares, perplexity and worst-class metrics."""

import math

import numpy as np
import pytest

from app.core.analysis import (
    c_perplexity,
    case_shares,
    class_precision,
    entropy_bits,
    krcc,
    ranking_stability,
    srcc,
    worst_classes,
    worst_superclasses,
    x_perplexity,
)
from app.core.ranking import count_outcomes
from app.core.taxonomy import from_children
from app.core.taxonomy_sources import imagenet_1k

# Paper Table 1, rows in ImageNet top-1 order: accuracy rank 1..11 and MAD rank.
ACC_RANK = list(range(1, 12))
MAD_RANK = [2, 1, 7, 4, 3, 6, 5, 8, 10, 9, 11]


def cases(both: int, only_i: int, only_j: int, neither: int):
    right_i = [True] * both + [True] * only_i + [False] * only_j + [False] * neither
    right_j = [True] * both + [False] * only_i + [True] * only_j + [False] * neither
    return np.array(right_i), np.array(right_j)


def test_table_1_rank_correlations():
    # Σd² over the ΔRank column (-1, 1, -4, 0, 2, 0, 2, 0, -1, 1, 0) is 28, so
    # ρ = 1 - 6·28 / (11·(11² - 1)) = 48/55 ≈ 0.873. The paper reports 0.89 in Sec. 3.2; its own two rank
    # columns give 0.87 (no tie correction applies: both columns are permutations).
    assert srcc(ACC_RANK, MAD_RANK) == pytest.approx(1 - 6 * 28 / (11 * 120))
    assert srcc(ACC_RANK, MAD_RANK) == pytest.approx(48 / 55)
    # Kendall: 8 discordant pairs of 55, τ = (47 - 8) / 55.
    assert krcc(ACC_RANK, MAD_RANK) == pytest.approx(39 / 55)
    assert srcc(ACC_RANK, ACC_RANK) == 1.0 and krcc(ACC_RANK, ACC_RANK[::-1]) == -1.0


def test_stability_versus_k_follows_each_pairs_first_images():
    # Every pair's first image goes to the worse classifier, the next nine to the better one.
    right_better = np.array([False] + [True] * 9)
    outcomes = {(i, j): (right_better, ~right_better) for i in range(3) for j in range(i + 1, 3)}
    curve = ranking_stability(outcomes, m=3)
    assert curve.k == 10 and curve.k_prime.tolist() == list(range(1, 10))
    assert curve.srcc[0] == pytest.approx(-1.0)  # k' = 1: the order is reversed
    assert math.isnan(curve.srcc[1])  # k' = 2: one win each, every classifier tied
    assert curve.srcc[2:] == pytest.approx([1.0] * 7)


def test_case_shares():
    counts = count_outcomes({(0, 1): cases(2, 5, 1, 2), (0, 2): cases(1, 1, 1, 1)}, m=3)
    shares = case_shares(counts)
    assert shares.images == 14
    assert (shares.case_i, shares.case_ii, shares.case_iii) == pytest.approx((3 / 14, 8 / 14, 3 / 14))
    assert case_shares(count_outcomes({}, m=2)).images == 0


def test_entropy_and_c_perplexity():
    assert entropy_bits([0.25, 0.25, 0.25, 0.25]) == pytest.approx(2.0)
    assert entropy_bits([1.0, 0.0, 0.0]) == 0.0
    assert entropy_bits([0.5, 0.25, 0.25]) == pytest.approx(1.5)
    # Two classifiers, two images: perplexities 2 and 8 have geometric mean 4; a uniform choice among
    # 3 classes has perplexity 3 whatever else is averaged with it.
    entropies = np.array(
        [
            [entropy_bits([0.5, 0.5]), entropy_bits([1 / 3] * 3)],
            [entropy_bits([0.125] * 8), entropy_bits([1 / 3] * 3)],
        ]
    )
    assert c_perplexity(entropies) == pytest.approx([4.0, 3.0])
    # A classifier without a prediction (NaN entropy, as the prediction store keeps it) is left out.
    with_unknown = np.array([[1.0, np.nan], [3.0, np.nan], [np.nan, np.nan]])
    result = c_perplexity(with_unknown)
    assert result[0] == pytest.approx(4.0) and math.isnan(result[1])


def test_x_perplexity_counts_only_judged_classifiers():
    correct = np.array([[True, False, True], [False, False, True], [True, True, False]])
    judged = np.array([[True, True, False], [True, True, False], [False, True, False]])
    result = x_perplexity(correct, judged)
    assert result[:2] == pytest.approx([0.5, 2 / 3])
    assert math.isnan(result[2])


def test_worst_class_precision_on_mad_labels():
    taxonomy = imagenet_1k()
    predicted = np.array([0, 0, 0, 0, 1, 1, 1, 2, 2])
    correct = np.array([True, True, True, False, True, False, False, False, False])
    precision, support = class_precision(predicted, correct, 1000)
    assert precision[:3] == pytest.approx([0.75, 1 / 3, 0.0]) and support[:3].tolist() == [4, 3, 2]
    assert math.isnan(precision[3])
    (worst,) = worst_classes(taxonomy, predicted, correct, min_support=3)
    assert (worst.key, worst.name, worst.precision, worst.support) == ("n01443537", "goldfish", 1 / 3, 3)
    assert worst_classes(taxonomy, predicted, correct, min_support=1)[0].name == "great white shark"
    assert worst_classes(taxonomy, predicted, correct, min_support=5) == []


def test_worst_superclass_pools_the_classes_below_it():
    digits = from_children(
        "digit",
        [str(d) for d in range(10)],
        {
            "digit": ["round", "straight"],
            "round": ["0", "2", "3", "loop"],
            "loop": ["6", "8", "9"],
            "straight": ["1", "2", "4", "5", "7"],
            "5": ["3"],
        },
        {"loop": "digits with a loop"},
    )
    index = digits.index_of
    predicted = np.array([index("6")] * 4 + [index("0")] * 6 + [index("1")] * 5)
    correct = np.array([False] * 4 + [True] * 6 + [True] * 5)
    (worst,) = worst_superclasses(digits, predicted, correct, min_support=4)
    assert (worst.key, worst.name, worst.precision, worst.support) == ("loop", "digits with a loop", 0.0, 4)
    (worst,) = worst_superclasses(digits, predicted, correct, min_support=5)
    assert (worst.key, worst.precision, worst.support) == ("round", 0.6, 10)
    assert worst_superclasses(digits, predicted, correct, min_support=20) == []


def test_worst_superclass_on_imagenet_finds_the_dogs():
    taxonomy = imagenet_1k()
    dogs = [i for i, label in enumerate(taxonomy.classes) if "n02084071" in taxonomy.ancestors(label)]
    fish = [0, 1, 2, 3, 4]
    predicted = np.array(dogs[:30] + fish * 6)
    correct = np.array([False] * 10 + [True] * 20 + [True] * 30)
    (worst,) = worst_superclasses(taxonomy, predicted, correct, min_support=30)
    assert worst.precision == pytest.approx(20 / 30) and worst.support == 30
    assert all(worst.key in taxonomy.ancestors(taxonomy.classes[dog]) for dog in dogs[:30])
