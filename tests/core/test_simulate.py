"""Simulated competitions: the pipeline recovers a known ranking, deterministically."""

from dataclasses import replace

import numpy as np
import pytest

from app.core.simulate import (
    TABLE_1_ACCURACIES,
    SimulationConfig,
    compare_policies,
    confusion_cdf,
    run_study,
    sample_confusions,
    simulate_corpus,
    table_1_accuracies,
)
from app.core.simulate_labelling import strict_majority, vote_streams
from app.core.taxonomy_sources import imagenet_1k

DRAKE, COOT = "n01847000", "n02018207"


def test_default_study_recovers_the_table_1_ranking():
    study = run_study(SimulationConfig(classifiers=11, k=30, noise=0.05, seeds=5))
    assert study.accuracies == pytest.approx(TABLE_1_ACCURACIES)
    assert study.true_ranks == tuple(range(1, 12))
    assert study.srcc_median >= 0.9
    assert study.srcc_median == float(np.median([result.srcc for result in study.results]))
    for result in study.results:
        cases = result.cases
        assert cases.images == 55 * 30
        assert cases.case_i + cases.case_ii + cases.case_iii == pytest.approx(1.0)
        assert cases.case_ii > cases.case_iii


def test_study_is_deterministic_and_json_ready():
    config = SimulationConfig(classifiers=5, k=10, seeds=2, images=5000)
    first, again = run_study(config).to_dict(), run_study(config).to_dict()
    assert first == again
    assert set(first) == {
        "config",
        "taxonomy",
        "accuracies",
        "true_ranks",
        "seeds",
        "srcc",
        "srcc_median",
        "votes_mean",
        "coverage",
    }
    assert first["config"]["k"] == 10 and len(first["seeds"]) == 2


def test_coin_flip_annotators_lose_the_ranking():
    truthful = run_study(SimulationConfig(seeds=3, noise=0.0)).srcc_median
    random_answers = run_study(SimulationConfig(seeds=3, noise=0.5)).srcc_median
    assert truthful >= 0.9 and random_answers < 0.6


def test_table_1_accuracies_interpolate_the_paper_range():
    assert table_1_accuracies(11).tolist() == list(TABLE_1_ACCURACIES)
    assert table_1_accuracies(3).tolist() == [0.8544, 0.7885, 0.7331]


def test_panel_majority_error_rate_is_binomial():
    rng = np.random.default_rng(0)
    truth = np.ones(200_000, dtype=bool)
    assert strict_majority(vote_streams(truth, 0.0, 0.0, 5, rng))[0].all()
    answers, cast = strict_majority(vote_streams(truth, 0.2, 0.0, 5, rng))
    # P(at least 3 of 5 flip) = 10·0.2³·0.8² + 5·0.2⁴·0.8 + 0.2⁵ = 0.05792
    assert (~answers).mean() == pytest.approx(0.05792, abs=0.002)
    # Votes stop at the third agreeing one: P(3 cast) = 0.8³ + 0.2³ = 0.52.
    assert cast.min() == 3 and cast.max() == 5 and (cast == 3).mean() == pytest.approx(0.52, abs=0.005)
    with pytest.raises(ValueError, match="odd"):
        strict_majority(vote_streams(truth[:10], 0.1, 0.0, 4, rng))


def test_careless_annotators_answer_at_random():
    rng = np.random.default_rng(1)
    votes = vote_streams(np.ones(100_000, dtype=bool), 0.05, 0.2, 5, rng)
    # A vote is wrong with probability 0.8·0.05 + 0.2·0.5 = 0.14, independently of the others.
    assert (~votes).mean() == pytest.approx(0.14, abs=0.003)
    assert np.corrcoef(votes[:, 0], votes[:, 1])[0, 1] == pytest.approx(0.0, abs=0.01)


def test_confusions_follow_the_hierarchy():
    taxonomy = imagenet_1k()
    distance = taxonomy.distance_matrix()
    drake = taxonomy.index_of(DRAKE)
    draws = sample_confusions(np.full(200_000, drake), confusion_cdf(distance, 0.2), np.random.default_rng(1))
    assert not np.any(draws == drake)
    weights = np.exp(-distance[drake] / 0.2)
    weights[drake] = 0
    # Mass per distance level (the hierarchy's rings around the drake) matches exp(-d / 0.2).
    levels, ring = np.unique(distance[drake], return_inverse=True)
    expected = np.bincount(ring, weights=weights / weights.sum())
    observed = np.bincount(ring[draws], minlength=len(levels)) / len(draws)
    assert np.abs(observed - expected).max() < 0.005
    # Mistakes land far nearer the true class than a uniformly drawn other class would.
    uniform_mean = distance[drake].sum() / 999
    assert distance[drake, draws].mean() < 0.5 * uniform_mean


def test_simulated_classifiers_have_their_accuracy():
    config = replace(SimulationConfig(), images=50_000)
    accuracies = np.array([0.9, 0.75, 0.6])
    corpus = simulate_corpus(accuracies, imagenet_1k().distance_matrix(), config, np.random.default_rng(2))
    named_present = (corpus.labels == corpus.first_object) | (corpus.labels == corpus.second_object)
    assert named_present.mean(axis=1) == pytest.approx(accuracies, abs=0.01)
    assert corpus.probs.min() >= 0 and corpus.probs.max() <= 1


def test_rejects_a_study_of_one():
    with pytest.raises(ValueError, match="two classifiers"):
        run_study(SimulationConfig(classifiers=1))


def test_active_policy_spends_fewer_votes_for_a_ranking_as_good():
    config = SimulationConfig(classifiers=6, k=20, seeds=3, images=8000, interval_resamples=200)
    active = run_study(replace(config, policy="active"))
    uniform = run_study(config)
    assert active.votes_mean < 0.8 * uniform.votes_mean
    assert active.srcc_median >= uniform.srcc_median - 0.1 and active.srcc_median >= 0.9


def test_coverage_counts_true_ranks_inside_their_intervals():
    study = run_study(SimulationConfig(classifiers=4, k=10, seeds=2, images=5000, interval_resamples=100))
    inside = [
        low <= true <= high
        for result in study.results
        for true, low, high in zip(study.true_ranks, result.rank_low, result.rank_high, strict=True)
    ]
    assert study.coverage == sum(inside) / 8
    assert all(
        1 <= low <= high <= 4
        for result in study.results
        for low, high in zip(result.rank_low, result.rank_high, strict=True)
    )


def test_compare_policies_runs_both_on_the_same_seeds():
    comparison = compare_policies(
        SimulationConfig(classifiers=4, k=10, seeds=2, images=5000, interval_resamples=100)
    )
    assert comparison["votes_ratio"] == comparison["votes_active"] / comparison["votes_uniform"]
    assert len(comparison["srcc_active"]) == len(comparison["srcc_uniform"]) == 2
    with pytest.raises(ValueError, match="policy"):
        run_study(SimulationConfig(policy="greedy"))
