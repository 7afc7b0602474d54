"""Active sampling in the service (issue 24; docs/architecture.md, The labelling queue): when the policy of
app.core.active reruns and what it writes for the queue (what settling cost: cost.py).

Each server process counts the questions its answers decide and hands them to the policy's process in
batches (app.labelling.active_sampling.policy_runner), which adds them to the competition's count
(count_decisions, one upsert per batch: an upsert per answer made every deciding submit wait for the row
through the commits of the others); once refresh_interval are decided (20, or a hundredth of the questions
when that is more) and it is not resting (POLICY_REST), the policy reruns there (refresh_if_due): on
the pairs' labelled outcomes and open images it gives each label item the priority_levels of the sum of its
open pairs' priorities (a step of √2, as kept_levels keeps them; 0 parks the item), the annotators'
reliability (which may let fewer agreeing votes decide a question) and whether the ranking is settled (the
queue then offers nothing more).
Uniform competitions never reach any of this. Locks: the competition's row, then its items in id order
(redecide_open; the priorities' writes pass over locked items), then its policy row, so that none waits in a
cycle. The policy's process writes a rerun's priorities after committing the rest, a few hundred items per
transaction, pausing between them (write_levels_in_turn): written in the rerun's own transaction, at 100,000
questions they held thousands of items until its commit, and a submit on one of them waited up to seconds.
"""

import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

import numpy as np
from sqlalchemy import case, or_, select, update
from sqlalchemy.orm import Session

from app.classifiers.enums import ClassifierStatus
from app.classifiers.service import list_classifiers
from app.competitions.models import Competition, Sampling
from app.core.active import (
    DEFAULT_REFRESH_EVERY,
    FOLD_REFRESHES,
    PolicyDecision,
    active_policy,
    image_priorities,
    kept_levels,
    priority_levels,
    refresh_interval,
)
from app.core.ranking import count_outcomes
from app.core.reliability import base_rate
from app.db.base import utcnow
from app.db.statements import conflict_insert
from app.labelling import rules
from app.labelling.active_sampling.cost import ActiveCost, active_cost
from app.labelling.active_sampling.reliability import Tally, refit, tally_decided
from app.labelling.items import lock_items, refresh_needed
from app.labelling.models import ActivePolicy, LabelItem, PairImage, PairImageRole, PairSubset, Question
from app.labelling.results import QUESTION_A, QUESTION_B, pair_outcomes, with_pair_questions
from app.labelling.types import LabellingSettings, NextItemStatus, early_rule


def count_decisions(db_session: Session, competition_id: int, decided: int) -> None:
    """Add questions decided to the competition's count since the last refresh (one upsert)."""
    insert = conflict_insert(db_session, ActivePolicy).values(
        competition_id=competition_id,
        decided_since_refresh=decided,
        informative_pairs=[],
        votes_used=0,
        full_design_votes=0,
    )
    db_session.execute(
        insert.on_conflict_do_update(
            index_elements=[ActivePolicy.competition_id],
            set_={"decided_since_refresh": ActivePolicy.decided_since_refresh + decided},
        )
    )


def _interval(full_design_votes: int, panel_size: int) -> int:
    """refresh_interval of the competition's questions (the full design's votes over a strict majority)."""
    return refresh_interval(full_design_votes // rules.majority(panel_size))


@dataclass(frozen=True)
class Levels:
    """Items whose priority changed, and their new priorities."""

    item_ids: np.ndarray
    priorities: np.ndarray


NO_LEVELS = Levels(np.zeros(0, dtype=np.int64), np.zeros(0))


@dataclass(frozen=True)
class Rerun:
    """A rerun of the policy: its decision (None below two ranked classifiers), the priorities it changed
    (not yet written), its refreshed_at as stored (which run the policy row holds), and when it started."""

    decision: PolicyDecision | None
    levels: Levels
    refreshed_at: datetime
    started: datetime
    """When it took the competition's row (the start of the time it rests for)."""


@dataclass(frozen=True)
class Due:
    """refresh_if_due's answer: the competition's refresh_interval, the rerun if the policy reran, and until
    when the policy rests (None: it does not)."""

    interval: int
    rerun: Rerun | None
    resting_until: datetime | None = None


def refresh_if_due(
    db_session: Session, *, competition_id: int, counted: int = 0, ran_dry: bool = False
) -> Due:
    """Add `counted` questions decided (count_decisions), then rerun the policy (rerun: its priorities are
    the caller's to write, and it rests meanwhile) if the competition still samples actively and
    refresh_interval questions were decided since the last run (another process's may have run meanwhile)
    and it is not resting (any decided question, when an annotator's queue ran dry); with the competition's
    refresh_interval, by which the server processes batch their counts (DEFAULT_REFRESH_EVERY while it has
    no policy row)."""
    _lock_policy(db_session, competition_id)
    if counted:
        count_decisions(db_session, competition_id, counted)
    row = db_session.execute(
        select(
            ActivePolicy.decided_since_refresh, ActivePolicy.full_design_votes, ActivePolicy.resting_until
        ).where(ActivePolicy.competition_id == competition_id)
    ).one_or_none()
    competition = db_session.get(Competition, competition_id, populate_existing=True)
    if row is None or competition is None:
        return Due(DEFAULT_REFRESH_EVERY, None)
    decided, full_design_votes, resting_until = row
    interval = _interval(full_design_votes, competition.panel_size)
    resting = is_resting(resting_until)
    due = decided >= 1 if ran_dry else decided >= interval and not resting
    if due and competition.sampling == Sampling.active:
        done = rerun(db_session, competition, counted=decided)
        # The rest so far: no other server process's rerun while this one writes its priorities.
        return Due(interval, done, rest(db_session, competition_id, done))
    return Due(interval, None, resting_until if resting else None)


POLICY_REST = 4.0
"""After a rerun that worked t seconds (from taking the competition's row to writing its last priority, less
the writer's pauses, WRITE_PAUSE), no
other is due for POLICY_REST × t, except for an annotator whose queue ran dry: reruns take at most a fifth of
the time, however large the competition and however fast its answers come. At 10,000 questions and 400
answers/s (benchmarks/labelling.py) the policy otherwise reran back to back, more than once a second."""


def is_resting(resting_until: datetime | None) -> bool:
    """Whether the policy still rests after its last rerun (POLICY_REST)."""
    return resting_until is not None and utcnow() < resting_until


def rest(db_session: Session, competition_id: int, done: Rerun, paused_s: float = 0.0) -> datetime | None:
    """The rest after a rerun, for the time it worked so far: resting_until = now + POLICY_REST × (now − its
    start − the `paused_s` its writer paused), unless a later run holds the policy row (refresh_if_due, and
    again once its priorities are written); the time written (None when a later run holds the row)."""
    now = utcnow()
    until = now + POLICY_REST * (now - done.started - timedelta(seconds=paused_s))
    written = db_session.connection().execute(
        update(ActivePolicy)
        .where(ActivePolicy.competition_id == competition_id, ActivePolicy.refreshed_at == done.refreshed_at)
        .values(resting_until=until)
    )
    return until if written.rowcount else None


def _lock_policy(db_session: Session, competition_id: int, skip_locked: bool = False) -> bool:
    """Serialise the policy's runs on a competition: its row FOR NO KEY UPDATE, which the foreign-key
    checks of labelling's inserts (FOR KEY SHARE: votes, the policy row) do not wait for, nor it for them
    (a FOR UPDATE deadlocked with them on Postgres). Whether it is held (skip_locked: not if another run
    holds it)."""
    statement = select(Competition.id).where(Competition.id == competition_id)
    locked = statement.with_for_update(key_share=True, skip_locked=skip_locked)
    return db_session.scalar(locked) is not None


def dry_queue_status(db_session: Session, competition_id: int) -> NextItemStatus:
    """What an annotator with nothing left in the active queue is told: `settled` when the ranking is, once
    the policy has rerun on the questions decided since its last run (the last images may be decided between
    two refreshes: any decided after the last run's tally, counted or still held by a server process), else
    `finished`; `busy` (ask again shortly) while another refresh holds the competition's row, which this
    request must not wait for (it may hold items that refresh waits for)."""
    row = db_session.execute(
        select(ActivePolicy.decided_since_refresh, ActivePolicy.tallied_through).where(
            ActivePolicy.competition_id == competition_id
        )
    ).one_or_none()
    counted, through = (0, None) if row is None else row
    unseen = bool(counted) or _decided_after(db_session, competition_id, through)
    if unseen and not _lock_policy(db_session, competition_id, skip_locked=True):
        return "busy"
    competition = db_session.get_one(Competition, competition_id, populate_existing=True)
    if unseen:
        refresh(db_session, competition, counted=counted)
    return "settled" if competition.settled else "finished"


def _decided_after(db_session: Session, competition_id: int, through: datetime | None) -> bool:
    """Whether a regular question of the competition was decided after `through` (any, when None)."""
    decided = select(Question.id).where(
        Question.competition_id == competition_id,
        Question.gold_answer.is_(None),
        Question.outcome.is_not(None),
        *(() if through is None else (Question.decided_at > through,)),
    )
    return db_session.scalar(select(decided.exists())) is True


@dataclass(frozen=True)
class OpenPairs:
    """Each stored pair's classifier indices among the ranked, how many of its images are still open
    (selected, a question undecided), and one row per (open image, pair): the image's id, the pair's
    classifier indices."""

    index_of: dict[int, int]
    open_images: np.ndarray
    image_of_row: np.ndarray
    pair_of_row: np.ndarray


def refresh(db_session: Session, competition: Competition, counted: int = 0) -> PolicyDecision | None:
    """Rerun the policy (module docstring) and write its decision and the items' priorities in this
    transaction; `counted`: the decided questions it answers for, taken off the count. None when fewer than
    two classifiers have pairs."""
    done = rerun(db_session, competition, counted)
    write_levels(db_session, done.levels)
    return done.decision


def rerun(db_session: Session, competition: Competition, counted: int = 0) -> Rerun:
    """Rerun the policy and write its decision but not the priorities it changed (refresh, or
    write_levels_in_turn after this transaction commits)."""
    _lock_policy(db_session, competition.id)
    started = utcnow()
    by_pair = pair_outcomes(db_session=db_session, competition=competition)
    pairs = _open_pairs(db_session, competition, by_pair)
    cost = active_cost(db_session, competition.id, competition.panel_size)
    m = len(pairs.index_of)
    decision = None
    levels = NO_LEVELS
    if m >= 2:
        index = pairs.index_of
        outcomes = {
            (index[a], index[b]): (labels[:, 0], labels[:, 1])
            for (a, b), labels in by_pair.items()
            if a in index and b in index
        }
        counts = count_outcomes(outcomes, m)
        decision = active_policy(counts, pairs.open_images, alpha=competition.smoothing)
        fold = FOLD_REFRESHES * _interval(cost.full_design_votes, competition.panel_size)
        levels = _changed_levels(db_session, competition, pairs, decision.priority, fold)
        competition.settled = decision.settled and bool(counts.n.sum())
    totals = _tally(db_session, competition)
    refit(db_session, competition.id)
    competition.yes_share = base_rate(totals.decided_yes, totals.decided)
    db_session.flush()
    _write_policy_row(db_session, competition.id, pairs, decision, cost, counted, totals)
    refreshed_at = db_session.scalar(
        select(ActivePolicy.refreshed_at).where(ActivePolicy.competition_id == competition.id)
    )
    assert refreshed_at is not None  # just written
    return Rerun(decision, levels, refreshed_at, started)


def _tally(db_session: Session, competition: Competition) -> Tally:
    """Tally the questions decided since the last refresh (reliability.tally_decided); the running totals."""
    row = db_session.get(ActivePolicy, competition.id)
    before = (
        Tally(None, 0, 0) if row is None else Tally(row.tallied_through, row.decided_regular, row.decided_yes)
    )
    new = tally_decided(db_session, competition.id, competition.panel_size, before.through)
    return Tally(new.through, before.decided + new.decided, before.decided_yes + new.decided_yes)


def _open_pairs(
    db_session: Session, competition: Competition, by_pair: dict[tuple[int, int], np.ndarray]
) -> OpenPairs:
    """The ranked classifiers (neither retired nor failed, in a stored pair) and the pairs' open images."""
    in_pairs = {classifier_id for pair in by_pair for classifier_id in pair}
    ranked = [
        c.id
        for c in list_classifiers(db_session=db_session, competition_id=competition.id)
        if c.id in in_pairs and c.status not in (ClassifierStatus.retired, ClassifierStatus.failed)
    ]
    index_of = {classifier_id: index for index, classifier_id in enumerate(ranked)}
    statement = with_pair_questions(
        select(PairImage.image_id, PairSubset.classifier_a_id, PairSubset.classifier_b_id)
        .select_from(PairSubset)
        .join(PairImage, PairImage.subset_id == PairSubset.id),
        decided=False,
    ).where(
        PairSubset.competition_id == competition.id,
        PairImage.role == PairImageRole.selected,
        or_(QUESTION_A.outcome.is_(None), QUESTION_B.outcome.is_(None)),
    )
    rows = [
        (image_id, index_of[a_id], index_of[b_id])
        for image_id, a_id, b_id in db_session.connection().execute(statement)
        if a_id in index_of and b_id in index_of
    ]
    table = np.array(rows, dtype=np.int64).reshape(-1, 3)
    image_of_row, pair_of_row = table[:, 0], table[:, 1:]
    open_images = np.zeros((len(ranked), len(ranked)), dtype=np.int64)
    np.add.at(open_images, (pair_of_row[:, 0], pair_of_row[:, 1]), 1)
    return OpenPairs(index_of, open_images + open_images.T, image_of_row, pair_of_row)


def _changed_levels(
    db_session: Session, competition: Competition, pairs: OpenPairs, priority: np.ndarray, fold: int
) -> Levels:
    """The items whose priority a rerun rewrites: kept_levels (with this fold, and the items' shuffle, the
    queue's tie-break) of their priority_levels of their image_priorities over their open pairs (the sum of
    their priority[i, j]; 0 parks an item)."""
    statement = (
        select(LabelItem.image_id, LabelItem.id, LabelItem.priority, LabelItem.shuffle)
        .where(LabelItem.competition_id == competition.id)
        .order_by(LabelItem.image_id)
    )
    rows = db_session.connection().execute(statement).all()
    image_ids = np.array([row[0] for row in rows], dtype=np.int64)
    item_ids = np.array([row[1] for row in rows], dtype=np.int64)
    old = np.array([row[2] for row in rows], dtype=float)
    shuffle = np.array([row[3] for row in rows], dtype=np.int64)
    position = np.searchsorted(image_ids, pairs.image_of_row).clip(max=max(len(rows) - 1, 0))
    known = image_ids[position] == pairs.image_of_row if len(rows) else np.zeros(0, dtype=bool)
    worth = image_priorities(priority, pairs.pair_of_row[known], position[known], len(rows))
    new = kept_levels(old, priority_levels(worth), fold, shuffle)
    changed = new != old
    return Levels(item_ids[changed], new[changed])


LEVELS_AT_ONCE = 250
"""Items one statement (and, in write_levels_in_turn, one transaction) writes."""


def _batches(levels: Levels) -> list[tuple[float, list[int]]]:
    """The changed priorities as (level, up to LEVELS_AT_ONCE item ids) batches."""
    batches = []
    for level in np.unique(levels.priorities):
        ids = levels.item_ids[levels.priorities == level].tolist()
        batches += [
            (float(level), ids[start : start + LEVELS_AT_ONCE])
            for start in range(0, len(ids), LEVELS_AT_ONCE)
        ]
    return batches


def _write_batch(db_session: Session, level: float, item_ids: list[int]) -> None:
    """Set these items' priority to `level`, passing over the items that a request holds locked right now
    (SKIP LOCKED: a submit or lease never waits for a refresh, nor the refresh for it); such an item keeps
    its old priority until the next refresh finds it changed."""
    free = select(LabelItem.id).where(LabelItem.id.in_(item_ids)).with_for_update(skip_locked=True)
    db_session.execute(
        update(LabelItem)
        .where(LabelItem.id.in_(free.scalar_subquery()))
        .values(priority=level)
        .execution_options(synchronize_session=False)
    )


def write_levels(db_session: Session, levels: Levels) -> None:
    """Write the changed priorities in this transaction (_write_batch, one statement per batch)."""
    for level, item_ids in _batches(levels):
        _write_batch(db_session, level, item_ids)


WRITE_PAUSE = 2.0
"""After each batch of a rerun's priorities its writer pauses WRITE_PAUSE times as long as the batch took, so
that the writes take at most a third of one database connection's time (Postgres paces its own vacuum the same
way, vacuum_cost_delay): the database serves requests at its normal priority whatever the policy's process's
niceness, and at 100,000 questions a rerun's 5,000-7,000 writes back to back put next and submit p99 at
1.34-1.41x uniform's (README, Development)."""


@dataclass(frozen=True)
class Written:
    """What write_levels_in_turn did: the batches written, and the seconds it paused between them."""

    batches: int
    paused_s: float


def write_levels_in_turn(sessions: Callable[[], Session], competition_id: int, done: Rerun) -> Written:
    """Write a committed rerun's changed priorities one batch per transaction, so that no item stays locked
    longer than one batch's statement, pausing after each (WRITE_PAUSE); each first takes the competition's
    row, as reruns do, and stops once the policy row holds a later run (which read the items as written so
    far and writes its own changes from there)."""
    written, paused, pause = 0, 0.0, 0.0
    for level, item_ids in _batches(done.levels):
        time.sleep(pause)
        paused += pause
        started = time.perf_counter()
        with sessions() as db_session, db_session.begin():
            _lock_policy(db_session, competition_id)
            last = db_session.scalar(
                select(ActivePolicy.refreshed_at).where(ActivePolicy.competition_id == competition_id)
            )
            if last != done.refreshed_at:
                return Written(written, paused)
            _write_batch(db_session, level, item_ids)
        written += 1
        pause = WRITE_PAUSE * (time.perf_counter() - started)
    return Written(written, paused)


def redecide_open(db_session: Session, competition: LabellingSettings) -> None:
    """Decide the open regular questions by the competition's rule as it now is (rules.decide with its
    `early`) and recompute the `needed` of their items, locked first in id order; decided questions stay."""
    open_regular = (
        Question.competition_id == competition.id,
        Question.outcome.is_(None),
        Question.gold_answer.is_(None),
        ~Question.adjudicated,
    )
    image_ids = db_session.scalars(
        select(Question.image_id).where(*open_regular).distinct().order_by(Question.image_id)
    ).all()
    items = lock_items(db_session, competition, list(image_ids))
    now = utcnow()
    for question in db_session.scalars(select(Question).where(*open_regular)):
        rules.decide(question, competition.panel_size, now, early_rule(competition))
    refresh_needed(db_session, competition, items)


def _write_policy_row(
    db_session: Session,
    competition_id: int,
    pairs: OpenPairs,
    decision: PolicyDecision | None,
    cost: ActiveCost,
    counted: int,
    tally: Tally,
) -> None:
    """Store the decision (informative pairs as [a_id, b_id], the neighbours full MAD is expected to reverse,
    votes used, the full design's) and the tallies' totals, and take the decided questions it answers for
    off the count."""
    ids = {index: classifier_id for classifier_id, index in pairs.index_of.items()}
    informative = [] if decision is None else [[ids[i], ids[j]] for i, j in decision.informative_pairs]
    values = {
        "informative_pairs": informative,
        "expected_swaps": None if decision is None else decision.expected_swaps,
        "votes_used": cost.votes_used,
        "full_design_votes": cost.full_design_votes,
        "tallied_through": tally.through,
        "decided_yes": tally.decided_yes,
        "decided_regular": tally.decided,
        "refreshed_at": utcnow(),
    }
    insert = conflict_insert(db_session, ActivePolicy).values(
        competition_id=competition_id, decided_since_refresh=0, **values
    )
    remaining = case(
        (ActivePolicy.decided_since_refresh > counted, ActivePolicy.decided_since_refresh - counted), else_=0
    )
    db_session.execute(
        insert.on_conflict_do_update(
            index_elements=[ActivePolicy.competition_id], set_={**values, "decided_since_refresh": remaining}
        )
    )


def set_sampling(db_session: Session, competition: Competition, sampling: Sampling) -> None:
    """Switch a competition's sampling: to active, the policy runs at once; to uniform (the paper's full
    protocol), every open item needs a strict majority again (questions decided early stay decided)."""
    _lock_policy(db_session, competition.id)
    if competition.sampling == sampling:
        return
    competition.sampling = sampling
    db_session.flush()
    if sampling == Sampling.active:
        refresh(db_session, competition)
        return
    redecide_open(db_session, LabellingSettings.of(competition))


def last_decision(db_session: Session, competition_id: int) -> ActivePolicy | None:
    """The competition's policy row (its last decision), if the policy has run or counted."""
    return db_session.get(ActivePolicy, competition_id)
