"""Simulated labelling of a competition's selected images, under the paper's protocol or Active MAD.

A question is (image, class named by a classifier of one of the image's pairs), asked once whatever the
number of pairs that share it. Each question has a stream of `panel_size` votes drawn in advance: a vote
comes from a careless annotator with probability `careless` (a fair coin), else it is the truth flipped with
probability `noise`. Both policies read the same streams (common random numbers), so the comparison
measures the policies, not the draws.

- `uniform` (the paper): every question of every selected image is asked until a strict majority of the
  panel agrees; the votes counted are those cast up to that point.
- `active` (app/core/active.py, as the service's queue runs it): an image is one queue item; a question is
  decided by `decided_early` with the current annotator reliability or else by the strict majority; every
  `refresh_interval` decided questions the reliability (`reliability_from_pairs` over the first two votes of
  each decided question) and `active_policy` are recomputed, an image's priority being the `priority_levels`
  of its `image_priorities` (1 until the first refresh); the next image is the highest priority (then position
  in its pairs' selections, then a random tie-break), or with probability `uniform_floor` the first unparked
  image in that uniform order. Labelling stops when the policy says the ranking is settled or nothing is open.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from app.core.active import (
    active_policy,
    decided_early,
    image_priorities,
    priority_levels,
    refresh_interval,
    reliability_from_pairs,
)
from app.core.ranking import PairCounts

UNDECIDED = -1


@dataclass(frozen=True)
class LabellingDesign:
    """The questions of a competition: `truth` per question, and per pair the question of f_i's and of
    f_j's label for each selected image, in selection order."""

    m: int
    pairs: tuple[tuple[int, int], ...]
    questions_i: tuple[np.ndarray, ...]
    questions_j: tuple[np.ndarray, ...]
    images: tuple[np.ndarray, ...]
    truth: np.ndarray


@dataclass(frozen=True)
class Labelling:
    """Decided answers per question (UNDECIDED = never decided), and the votes cast to get them."""

    answers: np.ndarray
    votes: int


def vote_streams(
    truth: np.ndarray, noise: float, careless: float, panel_size: int, rng: np.random.Generator
) -> np.ndarray:
    """Q×panel votes: a fair coin with probability `careless`, else the truth flipped with chance `noise`."""
    shape = (len(truth), panel_size)
    careful = truth[:, None] ^ (rng.random(shape) < noise)
    return np.where(rng.random(shape) < careless, rng.random(shape) < 0.5, careful)


def strict_majority(streams: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Answer and votes cast per question when each stops at the first strict majority of its panel."""
    panel_size = streams.shape[1]
    if panel_size % 2 == 0:
        raise ValueError("panel_size must be odd so that a strict majority always exists")
    need = panel_size // 2 + 1
    yes, no = np.cumsum(streams, axis=1), np.cumsum(~streams, axis=1)
    reached = (yes >= need) | (no >= need)
    cast = reached.argmax(axis=1) + 1
    return yes[:, -1] >= need, cast


def label_uniform(streams: np.ndarray) -> Labelling:
    """The paper's protocol: every question to a strict majority of the full panel."""
    answers, cast = strict_majority(streams)
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
    """The service's cadence: policy refresh, uniform floor, smoothing."""

    refresh_every: int
    uniform_floor: float
    alpha: float


class _Queue:
    """The active queue of one competition: per-image state, pair counts, reliability, priorities."""

    def __init__(self, design: LabellingDesign, streams: np.ndarray, rng: np.random.Generator) -> None:
        self.design, self.streams = design, streams
        self.answers = np.full(len(design.truth), UNDECIDED, dtype=np.int8)
        self.votes = self.agreeing_pairs = self.disagreeing_pairs = 0
        self.reliability = reliability_from_pairs(0, 0)
        sizes = [len(block) for block in design.images]
        image_ids, self.flat_image = np.unique(np.concatenate(design.images), return_inverse=True)
        self.spread = np.full(len(image_ids), np.iinfo(np.int64).max)
        np.minimum.at(self.spread, self.flat_image, np.concatenate([np.arange(size) for size in sizes]))
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
        self.priority = np.ones(len(image_ids))
        self.uniform_order = np.lexsort((self.shuffle, self.spread))
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

    def refresh(self, settings: ActiveSettings, seed: int) -> bool:
        """Reliability and policy recomputed, each image's priority the `priority_levels` of its
        `image_priorities`; True when settled."""
        self.reliability = reliability_from_pairs(self.agreeing_pairs, self.disagreeing_pairs)
        counts = counts_of(self.design, self.answers)
        decision = active_policy(counts, self.open_images(), alpha=settings.alpha, seed=seed)
        worth = image_priorities(decision.priority, self.pair_of_row, self.image_of_row, len(self.priority))
        self.priority = priority_levels(worth)
        self.priority_order = np.lexsort((self.shuffle, self.spread, -self.priority))
        return decision.settled

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
                self._decide(question, panel_size)
                decided += 1
        self.done[image] = True
        return decided

    def _decide(self, question: int, panel_size: int) -> None:
        """decide_stream with the current reliability; tallies whether its first two votes agree."""
        stream = self.streams[question]
        answer, cast = decide_stream(stream, panel_size, self.reliability)
        self.votes += cast
        if cast >= 2:
            agree = bool(stream[0] == stream[1])
            self.agreeing_pairs += agree
            self.disagreeing_pairs += not agree
        self.answers[question] = int(answer)


def decide_stream(stream: np.ndarray, panel_size: int, reliability: float) -> tuple[bool, int]:
    """Votes of the stream until decided_early or the strict majority of the panel decides: (answer, cast)."""
    for cast in range(1, panel_size + 1):
        yes = int(stream[:cast].sum())
        answer = decided_early(yes, cast - yes, panel_size, reliability)
        if answer is None and 2 * max(yes, cast - yes) > panel_size:
            answer = 2 * yes > panel_size
        if answer is not None:
            return answer, cast
    raise ValueError("panel_size must be odd so that a strict majority always exists")


def label_active(
    design: LabellingDesign, streams: np.ndarray, settings: ActiveSettings, rng: np.random.Generator
) -> Labelling:
    """Active MAD as the service runs it (module docstring)."""
    queue = _Queue(design, streams, rng)
    every = refresh_interval(len(queue.answers), settings.refresh_every)
    since_refresh, refreshes = 0, 0
    while True:
        if since_refresh >= every:
            since_refresh, refreshes = 0, refreshes + 1
            if queue.refresh(settings, seed=refreshes):
                break
        image = queue.next_image(uniform=rng.random() < settings.uniform_floor)
        if image is None:
            break
        since_refresh += queue.label(image, streams.shape[1])
    return Labelling(queue.answers, queue.votes)
