"""Active sampling in the service (issue 24; docs/architecture.md, The labelling queue): when the policy of
app.core.active reruns and what it writes for the queue (what it reads, paced: reads.py; what settling cost:
cost.py).

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

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

import numpy as np
from sqlalchemy import case, select, update
from sqlalchemy.orm import Session

from app.competitions.models import Competition, Sampling
from app.core.active import (
    DEFAULT_REFRESH_EVERY,
    FOLD_REFRESHES,
    PolicyDecision,
    active_policy,
    refresh_interval,
)
from app.core.ranking import count_outcomes
from app.core.reliability import base_rate
from app.db.base import utcnow
from app.db.statements import conflict_insert
from app.labelling import rules
from app.labelling.active_sampling.cost import full_design_votes
from app.labelling.active_sampling.reads import (
    NO_LEVELS,
    PAUSE,
    Levels,
    OpenPairs,
    Pace,
    changed_levels,
    read_pairs,
)
from app.labelling.active_sampling.reliability import Tally, refit, tally_decided
from app.labelling.items import decide_questions, lock_items, refresh_needed
from app.labelling.models import ActivePolicy, LabelItem, Question, UntalliedDecision
from app.labelling.types import LabellingSettings, NextItemStatus


def count_decisions(db_session: Session, competition_id: int, decided: int) -> None:
    """Add questions decided to the competition's count since the last refresh (one upsert)."""
    insert = conflict_insert(db_session, ActivePolicy).values(
        competition_id=competition_id,
        decided_since_refresh=decided,
        informative_pairs=[],
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
class Rerun:
    """A rerun of the policy: its decision (None below two ranked classifiers), the priorities it changed
    (not yet written), its refreshed_at as stored (which run the policy row holds), when it started, and how
    long its reads paused (reads.Pace)."""

    decision: PolicyDecision | None
    levels: Levels
    refreshed_at: datetime
    started: datetime
    """When it took the competition's row (the start of the time it rests for)."""
    paused_s: float = 0.0


@dataclass(frozen=True)
class Due:
    """refresh_if_due's answer: the competition's refresh_interval, the rerun if the policy reran, and until
    when the policy rests (None: it does not)."""

    interval: int
    rerun: Rerun | None
    resting_until: datetime | None = None


def refresh_if_due(
    db_session: Session, *, competition_id: int, counted: int = 0, ran_dry: bool = False, pause: float = 0.0
) -> Due:
    """Add `counted` questions decided (count_decisions), then rerun the policy (rerun, its reads paced by
    `pause`: its priorities are the caller's to write, and it rests meanwhile) if the competition still
    samples actively and refresh_interval questions were decided since the last run (another process's may
    have run meanwhile) and it is not resting (any decided question, when an annotator's queue ran dry); with
    the competition's refresh_interval, by which the server processes batch their counts
    (DEFAULT_REFRESH_EVERY while it has no policy row)."""
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
        done = rerun(db_session, competition, counted=decided, pause=pause)
        # The rest so far: no other server process's rerun while this one writes its priorities.
        return Due(interval, done, rest(db_session, competition_id, done))
    return Due(interval, None, resting_until if resting else None)


POLICY_REST = 4.0
"""After a rerun that worked t seconds (from taking the competition's row to writing its last priority, less
its reads' and its writer's pauses, reads.PAUSE), no other is due for POLICY_REST × t, except for an annotator
whose queue ran dry: reruns take at most a fifth of the time, however large the competition and however fast
its answers come. At 10,000 questions and 400 answers/s (benchmarks/labelling.py) the policy otherwise reran
back to back, more than once a second."""


def is_resting(resting_until: datetime | None) -> bool:
    """Whether the policy still rests after its last rerun (POLICY_REST)."""
    return resting_until is not None and utcnow() < resting_until


def rest(db_session: Session, competition_id: int, done: Rerun, paused_s: float = 0.0) -> datetime | None:
    """The rest after a rerun, for the time it worked so far: resting_until = now + POLICY_REST × (now − its
    start − the pauses of its reads and the `paused_s` of its writer), unless a later run holds the policy row
    (refresh_if_due, and again once its priorities are written); the time written (None when a later run holds
    the row)."""
    now = utcnow()
    until = now + POLICY_REST * (now - done.started - timedelta(seconds=done.paused_s + paused_s))
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
    counted = db_session.scalar(
        select(ActivePolicy.decided_since_refresh).where(ActivePolicy.competition_id == competition_id)
    )
    unseen = bool(counted) or _untallied(db_session, competition_id)
    if unseen and not _lock_policy(db_session, competition_id, skip_locked=True):
        return "busy"
    competition = db_session.get_one(Competition, competition_id, populate_existing=True)
    if unseen:
        refresh(db_session, competition, counted=counted or 0)
    return "settled" if competition.settled else "finished"


def _untallied(db_session: Session, competition_id: int) -> bool:
    """Whether a decision of the competition waits for the policy's tally (UntalliedDecision)."""
    waiting = select(UntalliedDecision.id).where(UntalliedDecision.competition_id == competition_id)
    return db_session.scalar(select(waiting.exists())) is True


def refresh(db_session: Session, competition: Competition, counted: int = 0) -> PolicyDecision | None:
    """Rerun the policy (module docstring) and write its decision and the items' priorities in this
    transaction; `counted`: the decided questions it answers for, taken off the count. None when fewer than
    two classifiers have pairs."""
    done = rerun(db_session, competition, counted)
    write_levels(db_session, done.levels)
    return done.decision


def rerun(db_session: Session, competition: Competition, counted: int = 0, pause: float = 0.0) -> Rerun:
    """Rerun the policy and write its decision but not the priorities it changed (refresh, or
    write_levels_in_turn after this transaction commits); its reads are paced by `pause` (reads.Pace: the
    policy's process, on Postgres), everything written after them."""
    _lock_policy(db_session, competition.id)
    started = utcnow()
    pace = Pace(pause)
    read = read_pairs(db_session, competition, pace)
    by_pair, pairs = read.outcomes, read.open
    full_design = full_design_votes(db_session, competition.id, competition.panel_size, pace)
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
        fold = FOLD_REFRESHES * _interval(full_design, competition.panel_size)
        levels = changed_levels(db_session, competition, pairs, decision.priority, fold, pace)
        competition.settled = decision.settled and bool(counts.n.sum())
    totals = _tally(db_session, competition)
    refit(db_session, competition.id)
    competition.yes_share = base_rate(totals.decided_yes, totals.decided)
    db_session.flush()
    _write_policy_row(db_session, competition.id, pairs, decision, full_design, counted, totals)
    refreshed_at = db_session.scalar(
        select(ActivePolicy.refreshed_at).where(ActivePolicy.competition_id == competition.id)
    )
    assert refreshed_at is not None  # just written
    return Rerun(decision, levels, refreshed_at, started, pace.paused_s)


def _tally(db_session: Session, competition: Competition) -> Tally:
    """Tally the questions decided since the last refresh (reliability.tally_decided); the running totals."""
    row = db_session.get(ActivePolicy, competition.id)
    new = tally_decided(db_session, competition.id, competition.panel_size)
    if row is None:
        return new
    return Tally(row.decided_regular + new.decided, row.decided_yes + new.decided_yes)


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


@dataclass(frozen=True)
class Written:
    """What write_levels_in_turn did: the batches written, and the seconds it paused between them."""

    batches: int
    paused_s: float


def write_levels_in_turn(sessions: Callable[[], Session], competition_id: int, done: Rerun) -> Written:
    """Write a committed rerun's changed priorities one batch per transaction, so that no item stays locked
    longer than one batch's statement, pausing between them (reads.Pace, PAUSE); each first takes the
    competition's row, as reruns do, and stops once the policy row holds a later run (which read the items as
    written so far and writes its own changes from there)."""
    batches, pace = _batches(done.levels), Pace(PAUSE)
    for written, (level, item_ids) in enumerate(batches):
        if written:
            pace.pause()
        with sessions() as db_session, db_session.begin():
            _lock_policy(db_session, competition_id)
            last = db_session.scalar(
                select(ActivePolicy.refreshed_at).where(ActivePolicy.competition_id == competition_id)
            )
            if last != done.refreshed_at:
                return Written(written, pace.paused_s)
            _write_batch(db_session, level, item_ids)
    return Written(len(batches), pace.paused_s)


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
    decide_questions(
        db_session, competition, db_session.scalars(select(Question).where(*open_regular)), utcnow()
    )
    refresh_needed(db_session, competition, items)


def _write_policy_row(
    db_session: Session,
    competition_id: int,
    pairs: OpenPairs,
    decision: PolicyDecision | None,
    full_design: int,
    counted: int,
    tally: Tally,
) -> None:
    """Store the decision (informative pairs as [a_id, b_id], the neighbours full MAD is expected to reverse,
    the full design's votes) and the tallies' totals, and take the decided questions it answers for
    off the count."""
    ids = {index: classifier_id for classifier_id, index in pairs.index_of.items()}
    informative = [] if decision is None else [[ids[i], ids[j]] for i, j in decision.informative_pairs]
    values = {
        "informative_pairs": informative,
        "expected_swaps": None if decision is None else decision.expected_swaps,
        "full_design_votes": full_design,
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
