"""A label item's state: locking it, reading its questions, the votes it still needs, and an annotator's
assignment to it (leased, done or flagged).

Lock order. Every labelling transaction takes its row locks in this order, so that none waits in a cycle
(on Postgres; SQLite runs one writer at a time), even when one annotator's requests run side by side on
several connections:

1. the annotator's users row: shared by their labelling requests (app.labelling.annotating.caller), exclusive
   while an admin pauses them or excludes their votes (app.labelling.quality_control.annotators), so the two
   never overlap;
2. their API token's row (its last use, at most once a minute);
3. label items: one waited for (the image answered, flagged or undone), any others taken with SKIP LOCKED
   (the next image), or several in id order by admin and worker work;
4. the annotator's undo row in the competition;
5. assignments, votes and flags of an item: only while holding the item's lock;
6. the annotator's quality flags in the competition: inserted last by an answer
   (app.labelling.quality_control.quality); an admin's decision on one takes the annotator's row (1) first,
   then the flag.
"""

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import case, func, select
from sqlalchemy.orm import Session

from app.errors import NotFound
from app.labelling import rules
from app.labelling.models import AssignmentStatus, LabelItem, Question, Vote
from app.labelling.statements import NOTE_DECIDED, assignment_upsert
from app.labelling.types import LabellingSettings, early_rule
from app.users.models import User

LEASE_TTL = timedelta(minutes=2)


def lock_item(db_session: Session, competition: LabellingSettings, image_id: int) -> LabelItem:
    """The item of an image, locked for this transaction (SQLite serialises writers anyway)."""
    item = db_session.scalar(
        select(LabelItem)
        .where(LabelItem.competition_id == competition.id, LabelItem.image_id == image_id)
        .with_for_update()
        .execution_options(populate_existing=True)
    )
    if item is None:
        raise NotFound("that image is not being labelled in this competition")
    return item


def lock_items(db_session: Session, competition: LabellingSettings, image_ids: list[int]) -> list[LabelItem]:
    """The label items of these images, read afresh and locked in id order."""
    return list(
        db_session.scalars(
            select(LabelItem)
            .where(LabelItem.competition_id == competition.id, LabelItem.image_id.in_(image_ids))
            .order_by(LabelItem.id)
            .with_for_update()
            .execution_options(populate_existing=True)
        )
    )


def questions_of_images(
    db_session: Session, competition: LabellingSettings, image_ids: list[int]
) -> list[Question]:
    """Every question on these images, read afresh."""
    return list(
        db_session.scalars(
            select(Question)
            .where(Question.competition_id == competition.id, Question.image_id.in_(image_ids))
            .execution_options(populate_existing=True)
        )
    )


def refresh_needed(db_session: Session, competition: LabellingSettings, items: list[LabelItem]) -> None:
    """Recompute `needed` of these items from their questions."""
    by_image: dict[int, list[Question]] = {item.image_id: [] for item in items}
    for question in questions_of_images(db_session, competition, list(by_image)):
        by_image[question.image_id].append(question)
    for item in items:
        item.needed = rules.needed(
            item.discarded, by_image[item.image_id], competition.panel_size, early_rule(competition)
        )
    db_session.flush()


@dataclass(frozen=True)
class CountedVotes:
    """A question's counted votes (of annotators whose votes are not excluded): yes, no, and the Σ of their
    weights, None when one of them carried none (rules.with_vote)."""

    yes: int
    no: int
    evidence: float | None


def counted_votes(db_session: Session, question_ids: list[int]) -> dict[int, CountedVotes]:
    """CountedVotes of each of these questions that has any (the others have none: 0, 0, evidence 0)."""
    rows = db_session.execute(
        select(
            Vote.question_id,
            func.sum(case((Vote.answer, 1), else_=0)).label("yes"),
            func.sum(case((Vote.answer, 0), else_=1)).label("no"),
            func.count(Vote.weight).label("weighted"),
            func.count().label("votes"),
            func.coalesce(func.sum(Vote.weight), 0.0).label("evidence"),
        )
        .join(User, User.id == Vote.user_id)
        .where(Vote.question_id.in_(question_ids), ~User.votes_excluded)
        .group_by(Vote.question_id)
    )
    return {
        row.question_id: CountedVotes(
            int(row.yes), int(row.no), float(row.evidence) if row.weighted == row.votes else None
        )
        for row in rows
    }


def recount(question: Question, counted: CountedVotes | None) -> None:
    """Set a question's counts and evidence to its counted votes' (none: 0, 0, 0)."""
    counted = counted or CountedVotes(0, 0, 0.0)
    question.yes_votes, question.no_votes, question.early_evidence = counted.yes, counted.no, counted.evidence


def note_decided(db_session: Session, competition_id: int, question_ids: list[int]) -> None:
    """Leave the questions just decided (rules.decide) to the active policy's next tally (UntalliedDecision),
    in this transaction."""
    if question_ids:
        NOTE_DECIDED.write(
            db_session, [{"competition_id": competition_id, "question_id": id_} for id_ in question_ids]
        )


def decide_questions(
    db_session: Session, competition: LabellingSettings, questions: Iterable[Question], now: datetime
) -> None:
    """Re-decide these regular questions from their counts (rules.decide, with the competition's early rule)
    and leave those decided anew to the active policy's tally (note_decided)."""
    early = early_rule(competition)
    decided_now = [q.id for q in questions if rules.decide(q, competition.panel_size, now, early)]
    note_decided(db_session, competition.id, decided_now)


def set_assignment(
    db_session: Session,
    item_id: int,
    user_id: int,
    status: AssignmentStatus,
    now: datetime,
    keep_flagged: bool = True,
) -> datetime:
    """Record an item as leased (until now + TTL), done or flagged by an annotator; returns the expiry.

    A flag stands unless keep_flagged is False (undoing it).
    """
    expires_at = now + LEASE_TTL if status == AssignmentStatus.leased else now
    assignment_upsert(db_session.get_bind().dialect.name, keep_flagged).write(
        db_session,
        {
            "lease_item": item_id,
            "lease_user": user_id,
            "new_status": status.value,
            "now": now,
            "lease_until": expires_at,
        },
    )
    return expires_at
