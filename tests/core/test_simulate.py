"""Simulated competitions: the pipeline recovers a known ranking, deterministically."""

from dataclasses import replace

import numpy as np
import pytest

from app.core.active import DEFAULT_EXPECTED_SWAPS
from app.core.selection import select_all_pairs
from app.core.simulate import (
    TABLE_1_ACCURACIES,
    SimulationConfig,
    confident_swaps,
    confusion_cdf,
    discordant_pairs,
    labelling_design,
    run_study,
    sample_confusions,
    simulate_corpus,
    table_1_accuracies,
)
from app.core.simulate_compare import compare_policies
from app.core.simulate_crowd import POOL_SIZE, CrowdConfig, simulate_crowd
from app.core.simulate_labelling import strict_majority
from app.core.taxonomy_sources import imagenet_1k

DRAKE, COOT = "n01847000", "n02018207"


def test_default_study_recovers_the_table_1_ranking():
    study = run_study(SimulationConfig(classifiers=11, k=30, seeds=5))
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
        "votes",
        "srcc_vs_full_mad",
        "srcc_vs_truth",
        "srcc_median_vs_truth",
        "interval_width",
        "coverage_full_mad",
        "coverage_truth",
        "confident_swap_seeds",
        "discordant_pairs",
        "forecast_swaps",
        "wrong_decisions",
        "decided",
        "coverage",
    }
    assert first["config"]["k"] == 10 and len(first["seeds"]) == 2


def test_coin_flip_annotators_lose_the_ranking():
    truthful = run_study(SimulationConfig(seeds=3, crowd=CrowdConfig(noise=0.0)))
    random_answers = run_study(SimulationConfig(seeds=3, crowd=CrowdConfig(noise=0.5)))
    assert truthful.srcc_median >= 0.9 and random_answers.srcc_median < 0.6
    # With perfect votes, the paper's protocol is full MAD itself.
    assert all(result.srcc_full_mad == 1.0 for result in truthful.results)
    assert truthful.summary()["wrong_decisions"] == 0.0


def test_table_1_accuracies_interpolate_the_paper_range():
    assert table_1_accuracies(11).tolist() == list(TABLE_1_ACCURACIES)
    assert table_1_accuracies(3).tolist() == [0.8544, 0.7885, 0.7331]


def crowd_on(truth: np.ndarray, config: CrowdConfig, panel: int = 5, seed: int = 0):
    """A simulated crowd over questions that each ask about an image of their own."""
    return simulate_crowd(truth, np.arange(len(truth)), panel, config, np.random.default_rng(seed))


def test_panel_majority_error_rate_is_binomial():
    truth = np.ones(200_000, dtype=bool)
    assert strict_majority(crowd_on(truth, CrowdConfig(noise=0.0)).votes)[0].all()
    answers, cast = strict_majority(crowd_on(truth, CrowdConfig(noise=0.2)).votes)
    # P(at least 3 of 5 flip) = 10·0.2³·0.8² + 5·0.2⁴·0.8 + 0.2⁵ = 0.05792
    assert (~answers).mean() == pytest.approx(0.05792, abs=0.002)
    # Votes stop at the third agreeing one: P(3 cast) = 0.8³ + 0.2³ = 0.52.
    assert cast.min() == 3 and cast.max() == 5 and (cast == 3).mean() == pytest.approx(0.52, abs=0.005)
    with pytest.raises(ValueError, match="odd"):
        strict_majority(crowd_on(truth[:10], CrowdConfig(noise=0.1), panel=4).votes)


def test_a_panel_is_distinct_accounts_of_the_crowd():
    crowd = crowd_on(np.ones(1000, dtype=bool), CrowdConfig())
    assert crowd.voters.shape == (1000, 5) and crowd.voters.max() < POOL_SIZE
    assert all(len(set(row)) == 5 for row in crowd.voters.tolist())
    with pytest.raises(ValueError, match="panel"):
        crowd_on(np.ones(3, dtype=bool), CrowdConfig(), panel=POOL_SIZE + 1)


def error_rate_by_account(crowd, truth: np.ndarray) -> np.ndarray:
    """Share of wrong votes per account."""
    wrong = crowd.votes != truth[:, None]
    return np.bincount(crowd.voters.ravel(), wrong.ravel()) / np.bincount(crowd.voters.ravel())


def test_careless_spamming_and_expert_accounts_answer_as_configured():
    truth = np.random.default_rng(4).random(100_000) < 0.35
    careless = error_rate_by_account(crowd_on(truth, CrowdConfig(careless=0.2)), truth)
    assert np.sort(careless) == pytest.approx([0.05] * 16 + [0.5] * 4, abs=0.01)
    spam = crowd_on(truth, CrowdConfig(spammers=0.2))
    spammer_votes = spam.votes[np.isin(spam.voters, np.flatnonzero(error_rate_by_account(spam, truth) > 0.2))]
    assert spammer_votes.size > 0 and not spammer_votes.any()
    experts = error_rate_by_account(crowd_on(truth, CrowdConfig(experts=0.25)), truth)
    assert np.sort(experts) == pytest.approx([0.02] * 5 + [0.2] * 15, abs=0.01)


def test_colluders_cast_the_first_two_votes_of_their_images_alike():
    truth = np.random.default_rng(5).random(40_000) < 0.35
    crowd = crowd_on(truth, CrowdConfig(colluders=0.25))
    colluded = crowd.voters[:, 0] == POOL_SIZE
    assert colluded.mean() == pytest.approx(0.25, abs=0.01)
    assert np.all(crowd.voters[colluded, 1] == POOL_SIZE + 1)
    assert np.all(crowd.votes[colluded, 0] == crowd.votes[colluded, 1])
    assert (crowd.votes[colluded, 0] != truth[colluded]).mean() == pytest.approx(0.5, abs=0.02)
    assert np.all(crowd.voters[~colluded] < POOL_SIZE)


def test_three_colluding_accounts_take_the_first_two_votes_two_at_a_time():
    truth = np.random.default_rng(5).random(40_000) < 0.35
    crowd = crowd_on(truth, CrowdConfig(colluders=0.25, colluding_accounts=3))
    colluded = crowd.voters[:, 0] >= POOL_SIZE
    assert colluded.mean() == pytest.approx(0.25, abs=0.01)
    assert crowd.accounts == POOL_SIZE + 3
    pairs = {tuple(row) for row in crowd.voters[colluded, :2].tolist()}
    assert pairs == {(POOL_SIZE, POOL_SIZE + 1), (POOL_SIZE, POOL_SIZE + 2), (POOL_SIZE + 1, POOL_SIZE + 2)}
    assert np.all(crowd.votes[colluded, 0] == crowd.votes[colluded, 1])
    assert np.all(crowd.voters[~colluded] < POOL_SIZE)


def test_confusing_images_fool_everyone_at_once():
    truth = np.ones(50_000, dtype=bool)
    crowd = crowd_on(truth, CrowdConfig(confusing=0.5))
    wrong = ~crowd.votes
    # Half the images: every vote wrong with 0.3 (not 0.05), so wrong votes cluster on those images.
    assert wrong.mean() == pytest.approx(0.5 * 0.05 + 0.5 * 0.3, abs=0.01)
    assert np.corrcoef(wrong[:, 0], wrong[:, 1])[0, 1] > 0.05


def test_gold_arrives_with_each_accounts_work():
    crowd = crowd_on(np.ones(100, dtype=bool), CrowdConfig(noise=0.0))
    right, answered = crowd.gold_after(np.array([0, 49, 98] + [0] * (crowd.accounts - 3)), 0.02)
    assert answered[:3].tolist() == [0, 1, 2] and right[:3].tolist() == [0, 1, 2]


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
    with pytest.raises(ValueError, match="start at 0"):
        run_study(SimulationConfig(classifiers=4, first_seed=-1))


def test_active_policy_spends_fewer_votes_for_a_ranking_as_good():
    config = SimulationConfig(classifiers=6, k=20, seeds=3, images=8000, interval_resamples=200)
    active = run_study(replace(config, policy="active"))
    uniform = run_study(config)
    assert active.votes_mean < 0.8 * uniform.votes_mean
    assert active.summary()["srcc_vs_full_mad"] >= uniform.summary()["srcc_vs_full_mad"] - 0.05
    # A stop's forecast is within the rule's bound; labelling everything leaves nothing to reverse.
    assert all(0 <= result.forecast_swaps <= DEFAULT_EXPECTED_SWAPS for result in active.results)
    assert [result.forecast_swaps for result in uniform.results] == [0.0] * 3


def test_order_bias_puts_other_errors_at_the_top_of_each_list():
    config = SimulationConfig(order_bias=True, images=20_000)
    distance = imagenet_1k().distance_matrix()
    corpus = simulate_corpus(table_1_accuracies(11), distance, config, np.random.default_rng(0))
    selections = select_all_pairs(corpus.labels, corpus.probs, distance, k=30, threshold=0.8)
    top_minus_end = {0: [], 1: []}
    for (i, j), selection in selections.items():
        shown = selection.selected
        right = (corpus.labels[:, shown] == corpus.first_object[shown]) | (
            corpus.labels[:, shown] == corpus.second_object[shown]
        )
        if i % 2 != j % 2:
            for model in (i, j):
                top_minus_end[model % 2].append(right[model, :15].mean() - right[model, 15:].mean())
    # Even-numbered classifiers are right at the top of mixed pairs' lists, odd-numbered ones at the end.
    assert np.mean(top_minus_end[0]) > 0.2 and np.mean(top_minus_end[1]) < -0.2


def test_a_stopped_pair_has_labelled_a_fair_sample_of_its_list():
    from app.core.simulate_labelling import UNDECIDED, ActiveSettings, label_active

    config = SimulationConfig(seeds=1)
    taxonomy = imagenet_1k()
    distance = taxonomy.distance_matrix()
    corpus_rng, crowd_rng, queue_rng = np.random.default_rng(0).spawn(3)
    corpus = simulate_corpus(table_1_accuracies(11), distance, config, corpus_rng)
    selections = select_all_pairs(corpus.labels, corpus.probs, distance, k=30, threshold=0.8, reserve_size=0)
    design = labelling_design(selections, corpus, 11, len(distance))
    crowd = simulate_crowd(design.truth, design.image_of_question, 5, CrowdConfig(), crowd_rng)
    labelling = label_active(design, crowd, ActiveSettings(20, 0.05, 1.0, 0.02), queue_rng)
    done = [
        (labelling.answers[qi] != UNDECIDED) & (labelling.answers[qj] != UNDECIDED)
        for qi, qj in zip(design.questions_i, design.questions_j, strict=True)
    ]
    top = np.mean([block[:15].mean() for block in done])
    rest = np.mean([block[15:].mean() for block in done])
    # Random order within a priority level, the floor too: the end of a list is labelled nearly as often as
    # its top (issue 33 measured 84% against 64% with the most discrepant first). What is left is the
    # images that serve several pairs, worth more and more often at the top of a list.
    assert 0.2 < rest < 0.95 and abs(top - rest) < 0.1, (top, rest)


def test_confident_swaps_count_pairs_full_mad_separates_and_the_policy_reverses():
    low, high = np.array([1, 1, 3]), np.array([1, 2, 3])
    assert confident_swaps(low, high, np.array([1, 2, 3])) == 0
    assert confident_swaps(low, high, np.array([2, 1, 3])) == 0  # 1 and 2 overlap in full MAD
    assert confident_swaps(low, high, np.array([3, 2, 1])) == 2  # (0, 2) and (1, 2)


def test_discordant_pairs_count_the_pairs_two_rankings_order_differently():
    assert discordant_pairs(np.array([1, 2, 3, 4]), np.array([1, 2, 3, 4])) == 0
    assert discordant_pairs(np.array([1, 2, 3, 4]), np.array([2, 1, 3, 4])) == 1
    assert discordant_pairs(np.array([1, 2, 3, 4]), np.array([4, 3, 2, 1])) == 6
    assert discordant_pairs(np.array([1, 2, 3]), np.array([1, 1, 3])) == 0  # a tie orders nothing


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


def test_compare_policies_pairs_both_on_the_same_seeds():
    comparison = compare_policies(
        SimulationConfig(classifiers=4, k=10, seeds=3, images=5000, interval_resamples=100)
    )
    assert comparison["votes_ratio"] == comparison["votes_active"] / comparison["votes_uniform"]
    floor = 2 * comparison["decided_active"] / comparison["votes_uniform"]
    assert comparison["two_vote_floor_ratio"] == pytest.approx(floor)
    assert comparison["two_vote_floor_ratio"] <= comparison["votes_ratio"]  # two agreeing votes at least
    decided_uniform = comparison["decided_uniform"]  # every question, each by 3 to 5 votes of a panel of 5
    assert 3 * decided_uniform <= comparison["votes_uniform"] <= 5 * decided_uniform
    assert 0 < comparison["decided_active"] <= decided_uniform
    per_seed = comparison["per_seed"]
    differences = np.subtract(per_seed["active"]["srcc_vs_full_mad"], per_seed["uniform"]["srcc_vs_full_mad"])
    assert comparison["srcc_vs_full_mad_difference"] == pytest.approx(differences.mean())
    assert comparison["srcc_vs_full_mad_difference_se"] == pytest.approx(differences.std(ddof=1) / np.sqrt(3))
    assert comparison["seeds_active_worse"] == pytest.approx(np.mean(differences < 0))
    for figure in ("votes", "srcc_vs_full_mad", "srcc_vs_truth", "interval_width", "coverage_full_mad"):
        assert {f"{figure}_active", f"{figure}_uniform"} <= set(comparison)
    assert {"confident_swap_seeds_active", "wrong_decisions_uniform"} <= set(comparison)
    with pytest.raises(ValueError, match="policy"):
        run_study(SimulationConfig(policy="greedy"))
