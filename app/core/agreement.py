"""Agreement and reliability of yes/no votes: Krippendorff's α (nominal), per annotator against the rest of
the panel, and Dawid–Skene estimates of each annotator's reliability by EM (Dawid & Skene, 1979).

Votes come as three aligned arrays: the question (0..n_questions-1), the annotator (0..n_annotators-1) and
the answer (bool); an annotator answers a question at most once.
"""

import math
from dataclasses import dataclass

import krippendorff
import numpy as np
from scipy.special import expit

DS_PSEUDO_RIGHT = 2.0
DS_PSEUDO_WRONG = 1.0
"""Pseudo-counts added to each annotator's right and wrong answers, for yes and for no: no zero
probabilities, and a prior belief that annotators do better than chance (sensitivity and specificity start
from 2/3, not 1/2). Without it EM on a few shared questions drifted to its degenerate answer, everyone as
bad as chance and every question of one class, and relabelled questions every annotator agreed on (two
annotators on four questions, one unanimous yes among three unanimous no: the yes was relabelled)."""
DS_PRIOR_PSEUDO_COUNT = 1.0
"""Pseudo-count added to the yes and the no questions when the share of yes answers π is estimated, so that
π never collapses to 0 or 1 (the same drift)."""
DS_MAX_ITERATIONS = 200
DS_TOLERANCE = 1e-8


@dataclass(frozen=True)
class Votes:
    """Yes/no votes: question index, annotator index and answer of each, with the two counts."""

    question: np.ndarray
    annotator: np.ndarray
    answer: np.ndarray
    n_questions: int
    n_annotators: int


def reliability_matrix(votes: Votes) -> np.ndarray:
    """Annotators × questions: 0/1, NaN where one did not answer (krippendorff's layout)."""
    matrix = np.full((votes.n_annotators, votes.n_questions), np.nan)
    matrix[votes.annotator, votes.question] = votes.answer
    return matrix


def nominal_alpha(matrix: np.ndarray) -> float:
    """Krippendorff's α = 1 - D_o / D_e over the units (columns) with two or more values; NaN when there are
    none or every value is the same (D_e = 0)."""
    paired = matrix[:, np.sum(~np.isnan(matrix), axis=0) >= 2]
    if paired.shape[1] == 0 or len(np.unique(paired[~np.isnan(paired)])) < 2:
        return math.nan
    return float(krippendorff.alpha(reliability_data=paired, level_of_measurement="nominal"))


def alpha_against_others(votes: Votes) -> np.ndarray:
    """Per annotator: α between their answers and the strict majority of the other answers to the same
    questions (leave-one-out; questions where the others tie are left out); NaN when undefined."""
    yes = np.bincount(votes.question, weights=votes.answer, minlength=votes.n_questions)
    total = np.bincount(votes.question, minlength=votes.n_questions)
    others_yes = yes[votes.question] - votes.answer
    others_no = total[votes.question] - 1 - others_yes
    decided = others_yes != others_no
    alphas = np.full(votes.n_annotators, math.nan)
    for annotator in range(votes.n_annotators):
        mine = (votes.annotator == annotator) & decided
        pair = np.vstack([votes.answer[mine], others_yes[mine] > others_no[mine]]).astype(np.float64)
        alphas[annotator] = nominal_alpha(pair)
    return alphas


@dataclass(frozen=True)
class DawidSkene:
    """Dawid–Skene estimates: P(yes) of each question, the prior P(yes), and each annotator's sensitivity
    P(says yes | yes) and specificity P(says no | no)."""

    p_yes: np.ndarray
    prior_yes: float
    sensitivity: np.ndarray
    specificity: np.ndarray
    iterations: int

    @property
    def accuracy(self) -> np.ndarray:
        """Each annotator's expected accuracy: π·sensitivity + (1 - π)·specificity."""
        return self.prior_yes * self.sensitivity + (1 - self.prior_yes) * self.specificity

    @property
    def labels(self) -> np.ndarray:
        """The most probable answer of each question (P(yes) > ½)."""
        return self.p_yes > 0.5


def dawid_skene(votes: Votes) -> DawidSkene:
    """EM (maximum a posteriori) for the two-class Dawid–Skene model, started from the vote shares: E-step
    P(yes | votes) ∝ π Π sens^a (1-sens)^(1-a), M-step π = (Σ P(yes) + c) / (n + 2c),
    sens = (Σ P(yes)·a + r) / (Σ P(yes) + r + w) (spec alike), with c = DS_PRIOR_PSEUDO_COUNT and r, w =
    DS_PSEUDO_RIGHT, DS_PSEUDO_WRONG."""
    answer = votes.answer.astype(np.float64)
    total = np.bincount(votes.question, minlength=votes.n_questions)
    p_yes = np.bincount(votes.question, weights=answer, minlength=votes.n_questions) / np.maximum(total, 1)
    p_yes[total == 0] = 0.5
    iterations, converged = 0, False
    while not converged and iterations < DS_MAX_ITERATIONS:
        prior, sensitivity, specificity = _maximise(votes, answer, p_yes)
        updated = _expect(votes, answer, prior, sensitivity, specificity)
        converged = np.max(np.abs(updated - p_yes), initial=0.0) < DS_TOLERANCE
        p_yes, iterations = updated, iterations + 1
    prior, sensitivity, specificity = _maximise(votes, answer, p_yes)
    return DawidSkene(p_yes, prior, sensitivity, specificity, iterations)


def _maximise(votes: Votes, answer: np.ndarray, p_yes: np.ndarray) -> tuple[float, np.ndarray, np.ndarray]:
    """M-step: π and each annotator's sensitivity and specificity, with the pseudo-counts of dawid_skene."""
    weight_yes, weight_no = p_yes[votes.question], 1 - p_yes[votes.question]
    said_yes_when_yes = np.bincount(
        votes.annotator, weights=weight_yes * answer, minlength=votes.n_annotators
    )
    when_yes = np.bincount(votes.annotator, weights=weight_yes, minlength=votes.n_annotators)
    said_no_when_no = np.bincount(
        votes.annotator, weights=weight_no * (1 - answer), minlength=votes.n_annotators
    )
    when_no = np.bincount(votes.annotator, weights=weight_no, minlength=votes.n_annotators)
    pseudo = DS_PSEUDO_RIGHT + DS_PSEUDO_WRONG
    sensitivity = (said_yes_when_yes + DS_PSEUDO_RIGHT) / (when_yes + pseudo)
    specificity = (said_no_when_no + DS_PSEUDO_RIGHT) / (when_no + pseudo)
    prior = float((p_yes.sum() + DS_PRIOR_PSEUDO_COUNT) / (len(p_yes) + 2 * DS_PRIOR_PSEUDO_COUNT))
    return prior, sensitivity, specificity


def _expect(
    votes: Votes, answer: np.ndarray, prior: float, sensitivity: np.ndarray, specificity: np.ndarray
) -> np.ndarray:
    """E-step: P(yes | a question's votes) from log π + Σ log P(answer | yes), against the same for no."""
    sens, spec = sensitivity[votes.annotator], specificity[votes.annotator]
    log_if_yes = np.where(answer == 1, np.log(sens), np.log1p(-sens))
    log_if_no = np.where(answer == 1, np.log1p(-spec), np.log(spec))
    evidence = np.bincount(votes.question, weights=log_if_yes - log_if_no, minlength=votes.n_questions)
    return expit(math.log(prior) - math.log1p(-prior) + evidence)
