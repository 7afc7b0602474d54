"""Simulated labelling of a competition's selected images, under the paper's protocol or Active MAD.

A question is (image, class named by a classifier of one of the image's pairs), asked once whatever the
number of pairs that share it. Its votes come in the order the simulated crowd drew them
(app/core/simulate_crowd.py): who votes, and what. Both policies read the same draws (common random
numbers), so the comparison measures the policies, not the draws.

- `uniform` (the paper): every question of every selected image is asked until a strict majority of the
  panel agrees; the votes counted are those cast up to that point.
- `active` (app/core/active.py, as the service's queue runs it): an image is one queue item; a question is
  decided by `decided_early` (agreeing votes of vetted annotators, app/core/reliability.py) or else by the
  strict majority; gold questions are asked at `gold_rate` of everything handed out and counted as votes;
  every `refresh_interval` decided questions the annotators' reliability and `active_policy` are recomputed,
  an image's priority being the `priority_levels` of its `image_priorities` (`UNRANKED_PRIORITY` until a
  refresh ranks it);
  the next image is the highest priority, in a random order (seeded) within a level, or with probability
  `uniform_floor` the first unparked image in that random order. Labelling stops when the policy says the
  ranking is settled or nothing is open.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from app.core.active import (
    FOLD_REFRESHES,
    UNRANKED_PRIORITY,
    PolicyDecision,
    active_policy,
    decided_early,
    image_priorities,
    kept_levels,
    priority_levels,
    refresh_interval,
)
from app.core.ranking import PairCounts
from app.core.reliability import (
    CrowdEvidence,
    annotator_reliability,
    base_rate,
    unbiased_votes,
    vote_weight,
)
from app.core.simulate_crowd import Crowd

UNDECIDED = -1


@dataclass(frozen=True)
class LabellingDesign:
    """The questions of a competition: `truth` per question, the image each asks about, and per pair the
    question of f_i's and of f_j's label for each selected image, in selection order."""

    m: int
    pairs: tuple[tuple[int, int], ...]
    questions_i: tuple[np.ndarray, ...]
    questions_j: tuple[np.ndarray, ...]
    images: tuple[np.ndarray, ...]
    truth: np.ndarray
    image_of_question: np.ndarray


@dataclass(frozen=True)
class Labelling:
    """Decided answers per question (UNDECIDED = never decided), the votes cast to get them (gold
    included), and the neighbours of the ranking that full MAD was then expected to reverse."""

    answers: np.ndarray
    votes: int
    forecast_swaps: float = 0.0
    """Σ F_uv of the policy run that settled the ranking (active_policy's expected_swaps); 0 when every
    selected image was labelled (nothing left that could reverse a neighbour)."""


def strict_majority(votes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Answer and votes cast per question when each stops at the first strict majority of its panel."""
    panel_size = votes.shape[1]
    if panel_size % 2 == 0:
        raise ValueError("panel_size must be odd so that a strict majority always exists")
    need = panel_size // 2 + 1
    yes, no = np.cumsum(votes, axis=1), np.cumsum(~votes, axis=1)
    reached = (yes >= need) | (no >= need)
    cast = reached.argmax(axis=1) + 1
    return yes[:, -1] >= need, cast


def label_uniform(crowd: Crowd) -> Labelling:
    """The paper's protocol: every question to a strict majority of the full panel."""
    answers, cast = strict_majority(crowd.votes)
    return Labelling(answers.astype(np.int8), int(cast.sum()))


def counts_of(design: LabellingDesign, answers: np.ndarray) -> PairCounts:
    """PairCounts over each pair's images whose two questions are decided."""
    m = design.m
    n, correct, wins = (np.zeros((m, m), dtype=np.int64) for _ in range(3))
    for (i, j), qi, qj in zip(design.pairs, design.questions_i, design.questions_j, strict=True):
        done = (answers[qi] != UNDECIDED) & (answers[qj] != UNDECIDED)
        right_i, right_j = answers[qi][done] == 1, answers[qj][done] == 1
        n[i, j] = n[j, i] = done.sum()
        correct[i, j], correct[j, i] = right_i.sum(), right_j.sum()
        wins[i, j], wins[j, i] = (right_i & ~right_j).sum(), (right_j & ~right_i).sum()
    return PairCounts(n, correct, wins)


@dataclass(frozen=True)
class ActiveSettings:
    """The service's cadence: policy refresh, uniform floor, smoothing, the share of gold handed out."""

    refresh_every: int
    uniform_floor: float
    alpha: float
    gold_rate: float


class _Crowdwatch:
    """What the active policy knows of the annotators: votes cast, first-two-vote pairs, decided answers."""

    def __init__(self, crowd: Crowd) -> None:
        self.crowd = crowd
        accounts = crowd.accounts
        self.cast = np.zeros(accounts, dtype=np.int64)
        self.pairs_total = np.zeros((accounts, accounts), dtype=np.int64)
        self.pairs_agreeing = np.zeros((accounts, accounts), dtype=np.int64)
        self.decided = self.decided_yes = 0
        self.weight = np.full(accounts, np.nan)
        self.base_rate = base_rate(0, 0)

    def refresh(self, gold_rate: float) -> None:
        """Reliability and base rate recomputed from what was seen, gold included."""
        gold_right, gold_answered = self.crowd.gold_after(self.cast, gold_rate)
        a, b = np.nonzero(np.triu(self.pairs_total, k=1))
        evidence = CrowdEvidence(
            gold_right, gold_answered, a, b, self.pairs_total[a, b], self.pairs_agreeing[a, b]
        )
        self.weight = vote_weight(annotator_reliability(evidence))
        self.base_rate = base_rate(self.decided_yes, self.decided)

    def decide(self, question: int, panel_size: int) -> tuple[bool, int]:
        """Votes of the question's panel until decided_early or the strict majority decides: (answer, cast);
        the votes and the first two votes' agreement are recorded."""
        voters, votes = self.crowd.voters[question], self.crowd.votes[question]
        for cast in range(1, panel_size + 1):
            yes = int(votes[:cast].sum())
            evidence = float(self.weight[voters[:cast]].sum())
            answer = decided_early(yes, cast - yes, panel_size, evidence, self.base_rate)
            if answer is None and 2 * max(yes, cast - yes) > panel_size:
                answer = 2 * yes > panel_size
            if answer is not None:
                break
        else:
            raise ValueError("panel_size must be odd so that a strict majority always exists")
        self.cast[voters[:cast]] += 1
        unbiased = unbiased_votes(panel_size, bool(np.isfinite(self.weight[voters[:2]]).all()), cast)
        for first in range(unbiased):
            for second in range(first + 1, unbiased):
                a, b = sorted((voters[first], voters[second]))
                self.pairs_total[a, b] += 1
                self.pairs_agreeing[a, b] += bool(votes[first] == votes[second])
        self.decided += 1
        self.decided_yes += answer
        return answer, cast


class _Queue:
    """The active queue of one competition: per-image state, pair counts, priorities."""

    def __init__(self, design: LabellingDesign, crowd: Crowd, rng: np.random.Generator) -> None:
        self.design = design
        self.crowdwatch = _Crowdwatch(crowd)
        self.answers = np.full(len(design.truth), UNDECIDED, dtype=np.int8)
        self.votes = 0
        sizes = [len(block) for block in design.images]
        image_ids, self.flat_image = np.unique(np.concatenate(design.images), return_inverse=True)
        self.flat_pair = np.repeat(np.arange(len(design.pairs)), sizes)
        membership = np.unique(np.c_[self.flat_image, self.flat_pair], axis=0)
        self.image_of_row = membership[:, 0]
        self.pair_of_row = np.array(design.pairs, dtype=np.int64).reshape(-1, 2)[membership[:, 1]]
        questions = np.concatenate(
            [np.r_[qi, qj] for qi, qj in zip(design.questions_i, design.questions_j, strict=True)]
        )
        owners = np.concatenate(
            [np.r_[block, block] for block in np.split(self.flat_image, np.cumsum(sizes)[:-1])]
        )
        self.question_of = [np.unique(questions[owners == image]) for image in range(len(image_ids))]
        self.shuffle = rng.permutation(len(image_ids))
        self.done = np.zeros(len(image_ids), dtype=bool)
        self.priority = np.full(len(image_ids), UNRANKED_PRIORITY)
        self.uniform_order = np.argsort(self.shuffle)
        self.priority_order = self.uniform_order

    def open_images(self) -> np.ndarray:
        """m×m images of each pair not yet labelled."""
        m = self.design.m
        per_pair = np.bincount(
            self.flat_pair, weights=~self.done[self.flat_image], minlength=len(self.design.pairs)
        )
        still_open = np.zeros((m, m), dtype=np.int64)
        for (i, j), count in zip(self.design.pairs, per_pair.astype(np.int64).tolist(), strict=True):
            still_open[i, j] = still_open[j, i] = count
        return still_open

    def refresh(self, settings: ActiveSettings, fold: int) -> PolicyDecision:
        """Reliability and policy recomputed, each image's priority the `priority_levels` of its
        `image_priorities` as a rerun stores them (`kept_levels` with this fold)."""
        self.crowdwatch.refresh(settings.gold_rate)
        counts = counts_of(self.design, self.answers)
        decision = active_policy(counts, self.open_images(), alpha=settings.alpha)
        worth = image_priorities(decision.priority, self.pair_of_row, self.image_of_row, len(self.priority))
        worth[self.done] = 0.0  # as the service, whose rerun sees only the open images
        self.priority = kept_levels(self.priority, priority_levels(worth), fold, self.shuffle)
        self.priority_order = np.lexsort((self.shuffle, -self.priority))
        return decision

    def next_image(self, uniform: bool) -> int | None:
        """The first open, unparked image in priority order (or uniform order)."""
        order = self.uniform_order if uniform else self.priority_order
        available = ~self.done[order] & (self.priority[order] > 0)
        return int(order[available.argmax()]) if available.any() else None

    def label(self, image: int, panel_size: int) -> int:
        """Decide the image's open questions vote by vote; the number of questions decided."""
        decided = 0
        for question in self.question_of[image]:
            if self.answers[question] == UNDECIDED:
                answer, cast = self.crowdwatch.decide(question, panel_size)
                self.answers[question] = int(answer)
                self.votes += cast
                decided += 1
        self.done[image] = True
        return decided


def label_active(
    design: LabellingDesign, crowd: Crowd, settings: ActiveSettings, rng: np.random.Generator
) -> Labelling:
    """Active MAD as the service runs it (module docstring)."""
    queue = _Queue(design, crowd, rng)
    every = refresh_interval(len(queue.answers), settings.refresh_every)
    since_refresh, forecast_swaps = 0, 0.0
    while True:
        if since_refresh >= every:
            since_refresh = 0
            decision = queue.refresh(settings, FOLD_REFRESHES * every)
            if decision.settled:
                forecast_swaps = decision.expected_swaps
                break
        image = queue.next_image(uniform=rng.random() < settings.uniform_floor)
        if image is None:
            break
        since_refresh += queue.label(image, crowd.votes.shape[1])
    gold = int(crowd.gold_after(queue.crowdwatch.cast, settings.gold_rate)[1].sum())
    return Labelling(queue.answers, queue.votes + gold, forecast_swaps)
