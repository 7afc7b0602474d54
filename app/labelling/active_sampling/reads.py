"""What a rerun of the active policy reads (app.labelling.active_sampling.policy), in short statements paced
as its writes are (docs/architecture.md, Active sampling).

At 100,000 questions a rerun reads every selected image of every pair with its two questions' outcomes
(~50,000 rows joined to 100,000 questions) and every label item (~50,000): 140-200 ms of one Postgres
backend's CPU in two or three statements, served at the requests' priority whatever the policy process's
nice. On two cores already busy with requests, each rerun then held dozens of next and submit requests
80-150 ms at once (README, Development, seventh sitting). Read PAIRS_AT_ONCE pairs or ITEMS_AT_ONCE items
per statement with a Pace between them, the same CPU takes at most a third of one core.
"""

import time
from dataclasses import dataclass, field

import numpy as np
from sqlalchemy import select
from sqlalchemy.orm import Session

from app.classifiers.enums import ClassifierStatus
from app.classifiers.service import list_classifiers
from app.competitions.models import Competition
from app.core.active import image_priorities, kept_levels, priority_levels
from app.labelling.models import LabelItem, PairImage, PairImageRole, PairSubset
from app.labelling.results import QUESTION_A, QUESTION_B, with_pair_questions

PAUSE = 2.0
"""After each statement of a rerun's paced reads and each batch of its writes (policy.write_levels_in_turn)
the policy's process pauses PAUSE times as long as it worked since the last pause, so that a rerun takes at
most a third of one database connection's time (Postgres paces its own vacuum the same way,
vacuum_cost_delay): the database serves the rerun at the requests' priority whatever the policy's process's
niceness. At 100,000 questions a rerun's 5,000-7,000 writes back to back put next and submit p99 at
1.34-1.41x uniform's, its reads back to back 1.4-1.9x (README, Development)."""
PAIRS_AT_ONCE = 20
"""Pairs whose selected images one statement of read_pairs reads (600 images at k = 30: a few ms)."""
ITEMS_AT_ONCE = 2000
"""Label items one statement of changed_levels reads (in image order, from where the last stopped)."""


@dataclass
class Pace:
    """Pauses `factor` times as long as the work since the last pause (or since it was made); `paused_s`:
    the seconds paused so far (the policy's rest counts only the time worked: policy.rest)."""

    factor: float
    paused_s: float = 0.0
    since: float = field(default_factory=time.perf_counter)

    def pause(self) -> None:
        """Sleep factor × (now − since), then start counting again."""
        pause = self.factor * (time.perf_counter() - self.since)
        time.sleep(pause)
        self.paused_s += pause
        self.since = time.perf_counter()


@dataclass(frozen=True)
class OpenPairs:
    """Each stored pair's classifier indices among the ranked, how many of its images are still open
    (selected, a question undecided), and one row per (open image, pair): the image's id, the pair's
    classifier indices."""

    index_of: dict[int, int]
    open_images: np.ndarray
    image_of_row: np.ndarray
    pair_of_row: np.ndarray


@dataclass(frozen=True)
class PairsRead:
    """read_pairs' answer: each stored pair's labelled outcomes as results.pair_outcomes gives them, and the
    open images of the ranked classifiers' pairs."""

    outcomes: dict[tuple[int, int], np.ndarray]
    open: OpenPairs


def read_pairs(db_session: Session, competition: Competition, pace: Pace) -> PairsRead:
    """Every selected image of every stored pair with its two questions' outcomes, PAIRS_AT_ONCE pairs per
    statement (a range of pair ids; each its own snapshot at READ COMMITTED: every pair is read whole), pacing
    after each (unpaced, a rerun within a request: all in one): a pair image is labelled when both outcomes
    are known (results.pair_outcomes), open otherwise."""
    pairs = db_session.execute(
        select(PairSubset.id, PairSubset.classifier_a_id, PairSubset.classifier_b_id)
        .where(PairSubset.competition_id == competition.id)
        .order_by(PairSubset.id)
    ).all()
    labelled: dict[tuple[int, int], list[tuple[bool, bool]]] = {(a, b): [] for _, a, b in pairs}
    open_rows: list[tuple[int, int, int]] = []
    at_once = PAIRS_AT_ONCE if pace.factor else max(len(pairs), 1)
    for start in range(0, len(pairs), at_once):
        first, last = pairs[start][0], pairs[min(start + at_once, len(pairs)) - 1][0]
        statement = with_pair_questions(
            select(
                PairSubset.classifier_a_id,
                PairSubset.classifier_b_id,
                PairImage.image_id,
                QUESTION_A.outcome,
                QUESTION_B.outcome,
            )
            .select_from(PairSubset)
            .join(PairImage, PairImage.subset_id == PairSubset.id),
            decided=False,
        ).where(
            PairSubset.competition_id == competition.id,
            PairSubset.id.between(first, last),
            PairImage.role == PairImageRole.selected,
        )
        rows = db_session.connection().execute(statement.order_by(PairSubset.id, PairImage.position))
        for a_id, b_id, image_id, correct_a, correct_b in rows:
            if correct_a is None or correct_b is None:
                open_rows.append((image_id, a_id, b_id))
            else:
                labelled[(a_id, b_id)].append((correct_a, correct_b))
        pace.pause()
    outcomes = {pair: np.array(rows, dtype=bool).reshape(-1, 2) for pair, rows in labelled.items()}
    return PairsRead(outcomes, _open_pairs(db_session, competition, outcomes, open_rows))


def _open_pairs(
    db_session: Session,
    competition: Competition,
    by_pair: dict[tuple[int, int], np.ndarray],
    open_rows: list[tuple[int, int, int]],
) -> OpenPairs:
    """The ranked classifiers (neither retired nor failed, in a stored pair) and their pairs' open images."""
    in_pairs = {classifier_id for pair in by_pair for classifier_id in pair}
    ranked = [
        c.id
        for c in list_classifiers(db_session=db_session, competition_id=competition.id)
        if c.id in in_pairs and c.status not in (ClassifierStatus.retired, ClassifierStatus.failed)
    ]
    index_of = {classifier_id: index for index, classifier_id in enumerate(ranked)}
    rows = [
        (image_id, index_of[a_id], index_of[b_id])
        for image_id, a_id, b_id in open_rows
        if a_id in index_of and b_id in index_of
    ]
    table = np.array(rows, dtype=np.int64).reshape(-1, 3)
    image_of_row, pair_of_row = table[:, 0], table[:, 1:]
    open_images = np.zeros((len(ranked), len(ranked)), dtype=np.int64)
    np.add.at(open_images, (pair_of_row[:, 0], pair_of_row[:, 1]), 1)
    return OpenPairs(index_of, open_images + open_images.T, image_of_row, pair_of_row)


@dataclass(frozen=True)
class Levels:
    """Items whose priority changed, and their new priorities."""

    item_ids: np.ndarray
    priorities: np.ndarray


NO_LEVELS = Levels(np.zeros(0, dtype=np.int64), np.zeros(0))


def _items(db_session: Session, competition_id: int, pace: Pace) -> list:
    """The competition's label items (image_id, id, priority, shuffle, needed) in image order, ITEMS_AT_ONCE
    per statement, each from where the last stopped, pacing after each (unpaced: all in one)."""
    at_once = ITEMS_AT_ONCE if pace.factor else None
    rows: list = []
    while True:
        after = rows[-1][0] if rows else -1
        statement = (
            select(LabelItem.image_id, LabelItem.id, LabelItem.priority, LabelItem.shuffle, LabelItem.needed)
            .where(LabelItem.competition_id == competition_id, LabelItem.image_id > after)
            .order_by(LabelItem.image_id)
            .limit(at_once)
        )
        chunk = db_session.connection().execute(statement).all()
        rows += chunk
        pace.pause()
        if at_once is None or len(chunk) < at_once:
            return rows


def changed_levels(
    db_session: Session,
    competition: Competition,
    pairs: OpenPairs,
    priority: np.ndarray,
    fold: int,
    pace: Pace,
) -> Levels:
    """The items whose priority a rerun rewrites: kept_levels (with this fold, and the items' shuffle, the
    queue's tie-break) of their priority_levels of their image_priorities over their open pairs (the sum of
    their priority[i, j]; 0 parks an item), except items with nothing left to ask (needed 0), which the queue
    never hands out whatever their priority: in a 100,000-question benchmark run parking the items decided
    since the last rerun was 18-44% of its writes (README, Development). An item asked again (an undo,
    excluded votes) keeps its last priority until the next rerun."""
    rows = _items(db_session, competition.id, pace)
    image_ids = np.array([row[0] for row in rows], dtype=np.int64)
    item_ids = np.array([row[1] for row in rows], dtype=np.int64)
    old = np.array([row[2] for row in rows], dtype=float)
    shuffle = np.array([row[3] for row in rows], dtype=np.int64)
    asked = np.array([row[4] > 0 for row in rows], dtype=bool)
    position = np.searchsorted(image_ids, pairs.image_of_row).clip(max=max(len(rows) - 1, 0))
    known = image_ids[position] == pairs.image_of_row if len(rows) else np.zeros(0, dtype=bool)
    worth = image_priorities(priority, pairs.pair_of_row[known], position[known], len(rows))
    new = kept_levels(old, priority_levels(worth), fold, shuffle)
    changed = (new != old) & asked
    return Levels(item_ids[changed], new[changed])
