"""Agreement and reliability: Krippendorff's α against its coincidence-matrix definition, the leave-one-out α
of each annotator, and Dawid–Skene recovering simulated annotators' reliability."""

import math

import numpy as np

from app.core.agreement import Votes, alpha_against_others, dawid_skene, nominal_alpha, reliability_matrix


def alpha_by_definition(matrix: np.ndarray) -> float:
    """α = 1 - D_o / D_e from the coincidence matrix (Krippendorff 2011, "Computing Krippendorff's α")."""
    values = np.unique(matrix[~np.isnan(matrix)])
    coincidence = np.zeros((len(values), len(values)))
    for unit in matrix.T:
        present = unit[~np.isnan(unit)]
        if len(present) < 2:
            continue
        for i, a in enumerate(present):
            for j, b in enumerate(present):
                if i != j:
                    coincidence[values == a, values == b] += 1 / (len(present) - 1)
    n_c, n = coincidence.sum(axis=1), coincidence.sum()
    observed = coincidence.sum() - np.trace(coincidence)
    expected = (n_c.sum() ** 2 - (n_c**2).sum()) / (n - 1)
    return 1 - observed / expected


def simulated_votes(
    rng, accuracies, n_questions=400, per_question=5, always_yes=()
) -> tuple[Votes, np.ndarray]:
    """Each question answered by `per_question` random annotators: right with their accuracy, or "yes"."""
    truth = rng.random(n_questions) < 0.4
    question, annotator, answer = [], [], []
    for q in range(n_questions):
        for a in rng.choice(len(accuracies), per_question, replace=False):
            question.append(q)
            annotator.append(a)
            answer.append(True if a in always_yes else bool(truth[q] ^ (rng.random() > accuracies[a])))
    votes = Votes(np.array(question), np.array(annotator), np.array(answer), n_questions, len(accuracies))
    return votes, truth


def test_agreement_alpha_matches_its_definition_and_is_undefined_without_variation():
    rng = np.random.default_rng(3)
    matrix = (rng.random((4, 30)) < 0.5).astype(float)
    matrix[rng.random(matrix.shape) < 0.3] = np.nan
    assert math.isclose(
        nominal_alpha(matrix), alpha_by_definition(matrix[:, (~np.isnan(matrix)).sum(0) >= 2])
    )
    assert nominal_alpha(np.array([[1.0, 0.0, 1.0], [1.0, 0.0, 1.0]])) == 1.0
    assert math.isnan(nominal_alpha(np.ones((3, 5))))
    assert math.isnan(nominal_alpha(np.array([[1.0, np.nan], [np.nan, 0.0]])))


def test_agreement_dawid_skene_finds_the_careless_annotator_and_beats_the_majority():
    rng = np.random.default_rng(19)
    accuracies = [0.9, 0.9, 0.85, 0.8, 0.9, 0.5, 0.5]  # the last two: always "yes"
    votes, truth = simulated_votes(rng, accuracies, always_yes=(5, 6))
    estimate = dawid_skene(votes)
    assert estimate.iterations < 200
    good = estimate.accuracy[:5]
    assert np.all(np.abs(good - np.array(accuracies[:5])) < 0.08), good
    assert np.all(estimate.sensitivity[5:] > 0.9) and np.all(estimate.specificity[5:] < 0.1)
    yes = np.bincount(votes.question, weights=votes.answer, minlength=votes.n_questions)
    majority = yes > np.bincount(votes.question, minlength=votes.n_questions) / 2
    assert np.mean(estimate.labels == truth) > np.mean(majority == truth)

    alphas = alpha_against_others(votes)
    assert np.all(alphas[:5] > 0.4) and np.all(alphas[5:] < 0.1), alphas
    matrix = reliability_matrix(votes)
    assert matrix.shape == (7, 400) and np.all((~np.isnan(matrix)).sum(axis=0) == 5)


def test_agreement_dawid_skene_keeps_what_every_annotator_agreed_on_at_any_sample_size():
    """Issue 25, item 14: on a few shared questions EM drifted to everyone being as bad as chance and every
    question of one class, relabelling questions all annotators answered alike (two annotators, four
    questions, one unanimous yes: relabelled no)."""
    two_on_four = Votes(
        np.repeat(np.arange(4), 2), np.tile([0, 1], 4), np.repeat([True, False, False, False], 2), 4, 2
    )
    assert dawid_skene(two_on_four).labels.tolist() == [True, False, False, False]
    rng = np.random.default_rng(5)
    for per_question in (2, 3):
        for n_questions in (4, 8, 12, 20, 30):
            for _ in range(40):
                votes, _truth = simulated_votes(rng, [0.85] * per_question, n_questions, per_question)
                yes = np.bincount(votes.question, weights=votes.answer, minlength=n_questions)
                labels = dawid_skene(votes).labels
                assert np.all(labels[yes == per_question]) and not np.any(labels[yes == 0])
