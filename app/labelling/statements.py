"""The labelling statements built once at import, on tables, with bound parameters (SQLAlchemy Core).

next_item and submit_answers are the hot paths (50 annotators, p99 < 50 ms on two cores), so they run
these statements: no per-request statement building or ORM object loading. On Postgres the HotStatements
run straight on psycopg (app.db.statements.HotStatement).
"""

from datetime import datetime
from functools import cache
from typing import Any

from sqlalchemy import (
    Boolean,
    and_,
    bindparam,
    exists,
    func,
    insert,
    literal_column,
    or_,
    select,
    update,
)
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session
from sqlalchemy.sql.elements import ColumnClause

from app.competitions.models import Competition, CompetitionMember
from app.db.statements import HotStatement
from app.images.models import Image
from app.labelling.models import (
    Assignment,
    AssignmentStatus,
    DifficultyFlag,
    GoldAnswer,
    LabelItem,
    QualityFlag,
    Question,
    UndoDepth,
    UntalliedDecision,
    Vote,
)
from app.users.models import ApiToken, User

_items = LabelItem.__table__
_assignments = Assignment.__table__
_questions = Question.__table__
_votes = Vote.__table__
_images = Image.__table__
_undo_depths = UndoDepth.__table__
_flags = DifficultyFlag.__table__
_gold_answers = GoldAnswer.__table__
_users = User.__table__
_api_tokens = ApiToken.__table__
_competitions = Competition.__table__
_members = CompetitionMember.__table__
_quality_flags = QualityFlag.__table__
_untallied = UntalliedDecision.__table__
_LEASED: ColumnClause[str] = literal_column(f"'{AssignmentStatus.leased.value}'")
"""The status written into the SQL, not bound: with a bound status Postgres planned the hot statements
afresh on every call (its estimate for 'leased', a rare status, beat the generic plan's every time)."""
_SKIPPED: ColumnClause[str] = literal_column(f"'{AssignmentStatus.skipped.value}'")

# Handing out items -------------------------------------------------------------------------------------

MY_LEASES = HotStatement(
    select(_items.c.id, _items.c.image_id, _items.c.discarded)
    .join(_assignments, _assignments.c.item_id == _items.c.id)
    .where(
        _assignments.c.user_id == bindparam("user_id"),
        _assignments.c.status == _LEASED,
        _assignments.c.expires_at > bindparam("now"),
        _items.c.competition_id == bindparam("competition_id"),
    )
    .order_by(_assignments.c.leased_at.desc())
    .with_for_update(skip_locked=True, of=_items)
)
"""Items the annotator holds a running lease on, most recently leased first (a reload resumes), locked,
skipping those another request holds (another of the annotator's connections answering one): an
assignment is written only under its item's lock (see app.labelling.items)."""

_mine = _assignments.alias("mine")
_others = _assignments.alias("others")


def _running_leases_of_others(item_id):
    """How many annotators other than the caller hold a running lease on the item (a scalar subquery)."""
    return (
        select(func.count())
        .select_from(_others)
        .where(
            _others.c.item_id == item_id,
            _others.c.status == _LEASED,
            _others.c.expires_at > bindparam("now"),
            _others.c.user_id != bindparam("user_id"),
        )
        .scalar_subquery()
    )


def _open_for_user(parked_left_out: bool) -> tuple:
    """An open item of the competition that the annotator has not finished, flagged or skipped; under active
    sampling (parked_left_out) not a parked one (priority 0: all its pairs settled)."""
    return (
        _items.c.competition_id == bindparam("competition_id"),
        _items.c.needed > 0,
        *((_items.c.priority > 0,) if parked_left_out else ()),
        ~exists().where(
            _mine.c.item_id == _items.c.id, _mine.c.user_id == bindparam("user_id"), _mine.c.status != _LEASED
        ),
    )


def _queue_head(parked_left_out: bool, *order) -> HotStatement:
    """The first open item for the annotator in this order with a free lease slot, locked (QUEUE_HEAD)."""
    return HotStatement(
        select(_items.c.id, _items.c.image_id, _items.c.discarded)
        .where(
            *_open_for_user(parked_left_out),
            _running_leases_of_others(_items.c.id) < _items.c.needed,
            _items.c.id.not_in(bindparam("rejected", expanding=True)),
        )
        .order_by(*order)
        .limit(literal_column("1"))
        .with_for_update(skip_locked=True, of=_items)
    )


QUEUE_HEAD = _queue_head(False, _items.c.needed, _items.c.spread, _items.c.shuffle)
"""The first open item in queue order that the annotator has not finished or flagged and that has a free
lease slot (other annotators' running leases fewer than the votes it needs), locked, skipping locked ones."""
ACTIVE_QUEUE_HEAD = _queue_head(True, _items.c.needed, _items.c.priority.desc(), _items.c.shuffle)
"""QUEUE_HEAD under active sampling: partly voted first, then the highest priority and within a level at
random (ix_label_items_active_queue), never a parked item: a pair that stops has labelled a fair sample of
its images, not the top of its list."""
ACTIVE_FLOOR_HEAD = _queue_head(True, _items.c.needed, _items.c.shuffle)
"""The uniform floor of active sampling's picks: at random among the items it has not parked
(ix_label_items_floor)."""

LABEL_SET = select(
    _competitions.c.class_keys,
    _competitions.c.class_names,
    _competitions.c.taxonomy,
    _competitions.c.taxonomy_source,
).where(_competitions.c.id == bindparam("competition_id"))
"""A competition's class keys and display names and the taxonomy they come from (kind and source)."""

GOLD_IMAGE = (
    select(_questions.c.image_id)
    .where(
        _questions.c.competition_id == bindparam("competition_id"),
        _questions.c.gold_answer.is_not(None),
        ~exists().where(_votes.c.question_id == _questions.c.id, _votes.c.user_id == bindparam("user_id")),
        ~exists().where(
            _flags.c.competition_id == bindparam("competition_id"),
            _flags.c.image_id == _questions.c.image_id,
            _flags.c.user_id == bindparam("user_id"),
        ),
        ~exists().where(  # skipped: offered again only by the queue, once nothing else is left
            _items.c.competition_id == bindparam("competition_id"),
            _items.c.image_id == _questions.c.image_id,
            _mine.c.item_id == _items.c.id,
            _mine.c.user_id == bindparam("user_id"),
            _mine.c.status == _SKIPPED,
        ),
    )
    .order_by(func.random())
    .limit(1)
)
"""A random image with a gold question the annotator has not answered, that they did not flag or skip."""

ANY_OPEN_FOR_USER = select(exists().where(*_open_for_user(False)))
"""Whether any item is open for the annotator, leased to others or not."""
ANY_ACTIVE_OPEN_FOR_USER = select(exists().where(*_open_for_user(True)))
"""ANY_OPEN_FOR_USER among the items active sampling has not parked."""

_GOLD_FOR_USER = and_(
    bindparam("gold_mixed_in", type_=Boolean),
    exists().where(
        _questions.c.competition_id == _items.c.competition_id,
        _questions.c.image_id == _items.c.image_id,
        _questions.c.gold_answer.is_not(None),
        ~exists().where(_votes.c.question_id == _questions.c.id, _votes.c.user_id == bindparam("user_id")),
    ),
)
"""The item has a gold question the annotator has not answered, and the competition mixes gold in."""


def _skipped_by_user(parked_left_out: bool) -> tuple:
    """An item the annotator skipped that is open (under active sampling, and not parked) or has gold for
    them."""
    still_asked = _items.c.needed > 0
    if parked_left_out:
        still_asked = and_(still_asked, _items.c.priority > 0)
    return (
        _items.c.competition_id == bindparam("competition_id"),
        or_(still_asked, _GOLD_FOR_USER),
        _mine.c.item_id == _items.c.id,
        _mine.c.user_id == bindparam("user_id"),
        _mine.c.status == _SKIPPED,
    )


def _skipped_head(parked_left_out: bool) -> HotStatement:
    """SKIPPED_HEAD, leaving parked items out under active sampling."""
    return HotStatement(
        select(_items.c.id, _items.c.image_id, _items.c.discarded)
        .select_from(_items.join(_mine, _mine.c.item_id == _items.c.id))
        .where(
            *_skipped_by_user(parked_left_out),
            or_(_running_leases_of_others(_items.c.id) < _items.c.needed, _items.c.needed == 0),
            _items.c.id.not_in(bindparam("rejected", expanding=True)),
        )
        .order_by(_mine.c.leased_at)
        .limit(literal_column("1"))
        .with_for_update(skip_locked=True, of=_items)
    )


SKIPPED_HEAD = _skipped_head(False)
"""The item the annotator skipped longest ago that is open with a free lease slot, or that has a gold question
they have not answered (gold is handed to everyone, needing no slot), locked, skipping locked ones: what the
queue offers once nothing else is left for them. A skipped gold image comes back as a skipped regular one
does, so that skipping tells nothing and dodges no gold."""
ACTIVE_SKIPPED_HEAD = _skipped_head(True)
"""SKIPPED_HEAD under active sampling: never a parked item (unless it has gold for the annotator)."""
ANY_SKIPPED_FOR_USER = select(exists().where(*_skipped_by_user(False)))
"""Whether an item the annotator skipped is still open, or still has gold for them."""
ANY_ACTIVE_SKIPPED_FOR_USER = select(exists().where(*_skipped_by_user(True)))
"""ANY_SKIPPED_FOR_USER, parked items left out."""

LOCK_ITEM_UNLESS_LOCKED = (
    select(_items.c.id, _items.c.image_id, _items.c.discarded)
    .where(_items.c.competition_id == bindparam("competition_id"), _items.c.image_id == bindparam("image_id"))
    .with_for_update(skip_locked=True)
)
"""An image's item, locked; no row when another transaction holds its lock."""

ITEM_OF_IMAGE = select(_items.c.id).where(
    _items.c.competition_id == bindparam("competition_id"), _items.c.image_id == bindparam("image_id")
)
"""The id of an image's item, if it is being labelled."""

_MY_VOTES_ON_QUESTION = (
    select(func.count())
    .where(_votes.c.question_id == _questions.c.id, _votes.c.user_id == bindparam("user_id"))
    .scalar_subquery()
)
"""0 or 1: a count, not NOT EXISTS, so that the planner probes the (question, user) index for each of the
image's few questions rather than reading every vote of the annotator, which it did with statistics
taken before the annotator had voted (a new competition)."""
_PENDING = HotStatement(
    select(
        _questions.c.id,
        _questions.c.class_index,
        _images.c.sha256,
        _images.c.width,
        _images.c.height,
        _running_leases_of_others(bindparam("item_id")).label("leases_of_others"),
        select(_items.c.needed).where(_items.c.id == bindparam("item_id")).scalar_subquery().label("needed"),
    )
    .join(_images, _images.c.id == _questions.c.image_id)
    .where(
        _questions.c.competition_id == bindparam("competition_id"),
        _questions.c.image_id == bindparam("image_id"),
        or_(
            _questions.c.gold_answer.is_not(None),
            and_(_questions.c.outcome.is_(None), bindparam("open_questions_askable", type_=Boolean)),
        ),
        _MY_VOTES_ON_QUESTION == 0,
    )
)


def pending_questions(
    db_session: Session,
    *,
    competition_id: int,
    item_id: int,
    image_id: int,
    discarded: bool,
    user_id: int,
    now: datetime,
) -> list[Any]:
    """The questions of an image the annotator still has to answer (gold ones, and open ones unless the
    image is discarded), with the image, and the item's running leases of others and needed votes as
    they are now."""
    return _PENDING.rows(
        db_session,
        {
            "competition_id": competition_id,
            "image_id": image_id,
            "item_id": item_id,
            "user_id": user_id,
            "now": now,
            "open_questions_askable": not discarded,
        },
    )


@cache
def assignment_upsert(dialect_name: str, keep_flagged: bool) -> HotStatement:
    """INSERT … ON CONFLICT DO UPDATE of an assignment, for this dialect; a flag stands if keep_flagged."""
    dialect = postgresql if dialect_name == "postgresql" else sqlite
    statement = dialect.insert(_assignments).values(
        item_id=bindparam("lease_item"),
        user_id=bindparam("lease_user"),
        status=bindparam("new_status"),
        leased_at=bindparam("now"),
        expires_at=bindparam("lease_until"),
    )
    return HotStatement(
        statement.on_conflict_do_update(
            index_elements=[_assignments.c.item_id, _assignments.c.user_id],
            set_={
                "status": statement.excluded.status,
                "leased_at": statement.excluded.leased_at,
                "expires_at": statement.excluded.expires_at,
            },
            where=(_assignments.c.status != AssignmentStatus.flagged.value) if keep_flagged else None,
        )
    )


# Answers -----------------------------------------------------------------------------------------------

LOCK_ITEMS_OF_QUESTIONS = HotStatement(
    select(_items.c.id, _items.c.image_id, _items.c.discarded)
    .join(
        _questions,
        and_(
            _questions.c.competition_id == _items.c.competition_id, _questions.c.image_id == _items.c.image_id
        ),
    )
    .where(
        _items.c.competition_id == bindparam("competition_id"),
        _questions.c.id.in_(bindparam("question_ids", expanding=True)),
    )
    .with_for_update(of=_items)
)
"""The item of each of these questions (one row per question found), locked."""
IMAGE_QUESTIONS = HotStatement(
    select(
        _questions.c.id,
        _questions.c.yes_votes,
        _questions.c.no_votes,
        _questions.c.early_evidence,
        _questions.c.outcome,
        _questions.c.decided_at,
        _questions.c.gold_answer,
        _votes.c.answer.label("my_answer"),
        select(_undo_depths.c.depth)
        .where(
            _undo_depths.c.competition_id == bindparam("competition_id"),
            _undo_depths.c.user_id == bindparam("user_id"),
        )
        .scalar_subquery()
        .label("undo_depth"),
        select(_assignments.c.status)
        .where(_assignments.c.item_id == bindparam("item_id"), _assignments.c.user_id == bindparam("user_id"))
        .scalar_subquery()
        .label("my_status"),
        select(_assignments.c.leased_at)
        .where(_assignments.c.item_id == bindparam("item_id"), _assignments.c.user_id == bindparam("user_id"))
        .scalar_subquery()
        .label("my_leased_at"),
    )
    .select_from(
        _questions.outerjoin(
            _votes, and_(_votes.c.question_id == _questions.c.id, _votes.c.user_id == bindparam("user_id"))
        )
    )
    .where(
        _questions.c.competition_id == bindparam("competition_id"),
        _questions.c.image_id == bindparam("image_id"),
    )
)
"""Every question of an image with its counted votes and the annotator's own answer, if any (and how far
they have undone, and their assignment's status on the item and when it was last handed to them or
answered: the server's clock for the seconds of their answers)."""
GOLD_VOTE_COUNTS = (
    select(
        _votes.c.question_id,
        _votes.c.answer,
        func.count().label("votes"),
        func.count(_votes.c.weight).label("weighted"),
        func.coalesce(func.sum(_votes.c.weight), 0.0).label("evidence"),
    )
    .where(_votes.c.question_id.in_(bindparam("question_ids", expanding=True)))
    .group_by(_votes.c.question_id, _votes.c.answer)
)
"""Yes and no answers stored on these (gold) questions, by question and answer, with how many carried a
weight and their sum."""
UPDATE_COUNTS = HotStatement(
    update(_questions)
    .where(_questions.c.id == bindparam("question_id"))
    .values(
        yes_votes=bindparam("yes"),
        no_votes=bindparam("no"),
        early_evidence=bindparam("evidence"),
        outcome=bindparam("new_outcome"),
        decided_at=bindparam("new_decided_at"),
    )
)
INSERT_VOTE = HotStatement(
    insert(_votes).values(
        competition_id=bindparam("competition_id"),
        question_id=bindparam("question_id"),
        user_id=bindparam("user_id"),
        answer=bindparam("answer"),
        seconds=bindparam("seconds"),
        created_at=bindparam("created_at"),
        weight=bindparam("weight"),
    )
)


NOTE_DECIDED = HotStatement(
    insert(_untallied).values(
        competition_id=bindparam("competition_id"), question_id=bindparam("question_id")
    )
)
"""A question decided: one row for the active policy's tally (UntalliedDecision)."""


@cache
def first_gold_answer(dialect_name: str) -> HotStatement:
    """INSERT … ON CONFLICT DO NOTHING of an annotator's answer to a gold question, for this dialect: the
    first one stands, whatever undo does to the vote."""
    dialect = postgresql if dialect_name == "postgresql" else sqlite
    return HotStatement(
        dialect.insert(_gold_answers)
        .values(
            question_id=bindparam("question_id"),
            user_id=bindparam("user_id"),
            answer=bindparam("answer"),
            created_at=bindparam("created_at"),
        )
        .on_conflict_do_nothing()
    )


UPDATE_NEEDED = HotStatement(
    update(_items).where(_items.c.id == bindparam("item_id")).values(needed=bindparam("new_needed"))
)
STEP_UP = HotStatement(
    update(_undo_depths)
    .where(
        _undo_depths.c.competition_id == bindparam("of_competition"),
        _undo_depths.c.user_id == bindparam("of_user"),
        _undo_depths.c.depth > 0,
    )
    .values(depth=_undo_depths.c.depth - 1)
)
"""A new answer or flag: the annotator climbs one step back towards their highest point."""
