"""Labelling: pair subsets and their questions, leasing images to annotators, votes, flags, undo, gold.

A question is (image, class) and is shared by every pair that asks it. Each image with questions has one
LabelItem, the unit an annotator is shown; its row carries the denormalised queue state (`needed`) and is
the lock that serialises every change to the votes on its questions.
"""

import random
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import cache

import numpy as np
from sqlalchemy import (
    Boolean,
    and_,
    bindparam,
    case,
    delete,
    exists,
    func,
    insert,
    literal_column,
    null,
    or_,
    select,
    update,
)
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session, aliased

from app.classifiers.models import Classifier
from app.competitions.models import Competition
from app.db import HotStatement, pipelined, utcnow
from app.errors import Conflict, InvalidInput, NotFound
from app.images.models import CompetitionImage, Image
from app.labelling import rules
from app.labelling.models import (
    Assignment,
    AssignmentStatus,
    DifficultyFlag,
    LabelItem,
    PairImage,
    PairImageRole,
    PairSubset,
    Question,
    UndoDepth,
    Vote,
)
from app.security import hash_api_token
from app.users.models import ApiToken, Role, User

LEASE_TTL = timedelta(minutes=2)
MAX_LEASE_ATTEMPTS = 8
SHUFFLE_RANGE = 2**31
GOLD_SPREAD = 2**31 - 1
"""Queue position given to an image first asked as gold: last (an image keeps its lowest position)."""

PairEntry = tuple[int, float, int, int, float, float]
"""One image of a pair's selection: (image_id, distance, label_a, label_b, prob_a, prob_b)."""


@dataclass(frozen=True)
class Answer:
    """One annotator's yes/no answer to one question and the seconds it took."""

    question_id: int
    answer: bool
    seconds: float | None


@dataclass(frozen=True)
class PresentedQuestion:
    """A question as an annotator sees it: the class name only, never which model predicted it."""

    question_id: int
    class_index: int
    class_name: str


@dataclass(frozen=True)
class PresentedItem:
    """An image leased to an annotator with the questions they still have to answer on it."""

    item_id: int
    image_sha256: str
    width: int
    height: int
    questions: list[PresentedQuestion]
    lease_expires_at: datetime


@dataclass(frozen=True)
class NextItem:
    """The next item, or None with why: every open image is leased to others (busy) or none is left."""

    item: PresentedItem | None
    status: str


@dataclass(frozen=True)
class SubmitResult:
    """What a submission stored: answers recorded, questions decided meanwhile, whether the item is done."""

    recorded: int
    already_decided: list[int]
    item_done: bool


@dataclass(frozen=True)
class UndoResult:
    """What undo took back (an answer to question_id, or a flag) and the item to answer again."""

    undone: str
    question_id: int | None
    item: PresentedItem | None


@dataclass(frozen=True)
class AnnotatorStats:
    """One annotator's progress in a competition and their accuracy on gold questions."""

    user_id: int
    username: str
    is_active: bool
    votes_excluded: bool
    answered_total: int
    answered_today: int
    flagged: int
    gold_answered: int
    gold_correct: int
    mean_seconds: float | None

    @property
    def gold_accuracy(self) -> float | None:
        """Share of gold questions answered correctly; None before the first."""
        return self.gold_correct / self.gold_answered if self.gold_answered else None


@dataclass
class _Votes:
    """A question's vote state while an answer is being recorded."""

    id: int
    yes_votes: int
    no_votes: int
    outcome: bool | None
    decided_at: datetime | None
    gold_answer: bool | None
    my_answer: bool | None


@dataclass(frozen=True)
class Labeller:
    """The account behind a labelling request, as much of it as labelling reads."""

    id: int
    role: Role
    votes_excluded: bool


@dataclass(frozen=True)
class LabellingSettings:
    """What labelling reads of a competition: its id, its creation time (which keys the cached class
    names), the panel size and the gold rate."""

    id: int
    created_at: datetime
    panel_size: int
    gold_rate: float


LabellingCompetition = Competition | LabellingSettings
"""A competition as labelling reads it: the ORM row, or the few settings the hot path reads in one query
with its caller (id, creation time, panel size, gold rate)."""
Annotator = User | Labeller
"""An annotator as labelling reads them: the ORM row, or the hot path's Labeller."""


# Storing pair subsets (called by the selection worker and Algorithm 2) ----------------------------------


def store_pair_subset(
    *,
    db_session: Session,
    competition: Competition,
    classifier_a_id: int,
    classifier_b_id: int,
    entries: Sequence[PairEntry],
) -> PairSubset:
    """Store a pair's selection in order (the first k selected, the rest reserve) and ask its new questions.

    Idempotent: storing a pair again returns the stored subset unchanged (paper Algorithm 2 asks only
    questions not yet answered).
    """
    if classifier_a_id >= classifier_b_id:
        raise InvalidInput("a pair is stored with classifier_a_id < classifier_b_id")
    existing = _find_subset(db_session, classifier_a_id, classifier_b_id)
    if existing is not None:
        return existing
    rows = [_entry_row(entry, len(competition.class_keys)) for entry in entries]
    _check_pair_inputs(db_session, competition, classifier_a_id, classifier_b_id, rows)
    subset_id = db_session.scalar(
        _insert(db_session, PairSubset)
        .values(
            competition_id=competition.id,
            classifier_a_id=classifier_a_id,
            classifier_b_id=classifier_b_id,
            created_at=utcnow(),
        )
        .on_conflict_do_nothing()
        .returning(PairSubset.id)
    )
    if subset_id is None:  # another transaction stored the same pair first
        return _find_subset(db_session, classifier_a_id, classifier_b_id)
    unusable = _unusable_images(db_session, competition, [row["image_id"] for row in rows[: competition.k]])
    for position, row in enumerate(rows):
        if position >= competition.k:
            role = PairImageRole.reserve
        else:
            role = PairImageRole.discarded if row["image_id"] in unusable else PairImageRole.selected
        row.update(subset_id=subset_id, position=position, role=role)
    if rows:
        db_session.execute(_insert(db_session, PairImage), rows)
    selected = [row for row in rows if row["role"] == PairImageRole.selected]
    _ask(
        db_session,
        competition,
        {row["image_id"]: (row["position"], (row["label_a"], row["label_b"])) for row in selected},
    )
    for row in rows[: competition.k]:
        if row["role"] == PairImageRole.discarded:
            _promote_reserve(db_session, competition, subset_id, spread=row["position"])
    return db_session.get_one(PairSubset, subset_id)


def _find_subset(db_session: Session, classifier_a_id: int, classifier_b_id: int) -> PairSubset | None:
    """The stored subset of a pair, if any."""
    return db_session.scalar(
        select(PairSubset).where(
            PairSubset.classifier_a_id == classifier_a_id, PairSubset.classifier_b_id == classifier_b_id
        )
    )


def _entry_row(entry: PairEntry, num_classes: int) -> dict:
    """A pair_images row from a selection entry, with plain Python numbers and checked labels."""
    image_id, distance, label_a, label_b, prob_a, prob_b = entry
    row = {
        "image_id": int(image_id),
        "distance": float(distance),
        "label_a": int(label_a),
        "label_b": int(label_b),
        "prob_a": float(prob_a),
        "prob_b": float(prob_b),
    }
    if not (0 <= row["label_a"] < num_classes and 0 <= row["label_b"] < num_classes):
        raise InvalidInput(f"labels of image {row['image_id']} are outside the label set of {num_classes}")
    if row["label_a"] == row["label_b"]:
        raise InvalidInput(f"both classifiers predict the same label on image {row['image_id']}")
    return row


def _check_pair_inputs(
    db_session: Session,
    competition: Competition,
    classifier_a_id: int,
    classifier_b_id: int,
    rows: list[dict],
) -> None:
    """Both classifiers and every image belong to the competition; no image is listed twice."""
    found = db_session.scalar(
        select(func.count())
        .select_from(Classifier)
        .where(
            Classifier.competition_id == competition.id, Classifier.id.in_((classifier_a_id, classifier_b_id))
        )
    )
    if found != 2:
        raise NotFound(f"classifiers {classifier_a_id} and {classifier_b_id} are not both in the competition")
    image_ids = {row["image_id"] for row in rows}
    if len(image_ids) != len(rows):
        raise InvalidInput("an image is listed twice in the pair's selection")
    in_competition = db_session.scalar(
        select(func.count())
        .select_from(CompetitionImage)
        .where(CompetitionImage.competition_id == competition.id, CompetitionImage.image_id.in_(image_ids))
    )
    if in_competition != len(image_ids):
        raise InvalidInput("the pair's selection names images that are not in this competition")


def _insert(db_session: Session, model):
    """An INSERT for this session's database that supports ON CONFLICT (Postgres and SQLite)."""
    dialect = postgresql if db_session.get_bind().dialect.name == "postgresql" else sqlite
    return dialect.insert(model)


def _ask(
    db_session: Session, competition: LabellingCompetition, images: dict[int, tuple[int, Iterable[int]]]
) -> None:
    """Create the missing questions (image, class) and label items for {image_id: (spread, classes)}."""
    if not images:
        return
    asked = set(
        db_session.execute(
            select(Question.image_id, Question.class_index).where(
                Question.competition_id == competition.id, Question.image_id.in_(images)
            )
        ).all()
    )
    now = utcnow()
    new_questions = [
        {"competition_id": competition.id, "image_id": image_id, "class_index": index, "created_at": now}
        for image_id, (_, classes) in images.items()
        for index in classes
        if (image_id, index) not in asked
    ]
    if new_questions:
        random.shuffle(new_questions)  # ids in label_a, label_b order would tell annotators which model asked
        db_session.execute(_insert(db_session, Question).on_conflict_do_nothing(), new_questions)
    asked_before = {image_id for image_id, _ in asked}
    new_images = [image_id for image_id in images if image_id not in asked_before]
    if new_images:  # all their questions are new, so each needs a full majority
        db_session.execute(
            _insert(db_session, LabelItem).on_conflict_do_nothing(),
            [
                {
                    "competition_id": competition.id,
                    "image_id": image_id,
                    "spread": images[image_id][0],
                    "shuffle": random.randrange(SHUFFLE_RANGE),
                    "needed": rules.majority(competition.panel_size),
                }
                for image_id in new_images
            ],
        )
    if not asked_before:
        return
    items = _items_of_images(db_session, competition, sorted(asked_before))
    for item in items:
        item.spread = min(item.spread, images[item.image_id][0])
    newly_asked = {row["image_id"] for row in new_questions}
    reopened = [item.id for item in items if item.image_id in newly_asked]
    if reopened:  # annotators who finished these images are asked the new questions too
        db_session.execute(
            delete(Assignment).where(
                Assignment.item_id.in_(reopened), Assignment.status == AssignmentStatus.done
            )
        )
    _refresh_needed(db_session, competition, items)


def _items_of_images(
    db_session: Session, competition: LabellingCompetition, image_ids: list[int]
) -> list[LabelItem]:
    """The label items of these images, read afresh."""
    return list(
        db_session.scalars(
            select(LabelItem)
            .where(LabelItem.competition_id == competition.id, LabelItem.image_id.in_(image_ids))
            .execution_options(populate_existing=True)
        )
    )


def _questions_of_images(
    db_session: Session, competition: LabellingCompetition, image_ids: list[int]
) -> list[Question]:
    """Every question on these images, read afresh."""
    return list(
        db_session.scalars(
            select(Question)
            .where(Question.competition_id == competition.id, Question.image_id.in_(image_ids))
            .execution_options(populate_existing=True)
        )
    )


def _needed(discarded: bool, questions: Iterable[Question | _Votes], panel_size: int) -> int:
    """Votes an item still needs before it leaves the queue: the nearest decision among its open questions."""
    if discarded:
        return 0
    return min(
        (
            rules.votes_still_needed(q.yes_votes, q.no_votes, panel_size)
            for q in questions
            if q.outcome is None and q.gold_answer is None
        ),
        default=0,
    )


def _refresh_needed(db_session: Session, competition: LabellingCompetition, items: list[LabelItem]) -> None:
    """Recompute `needed` of these items from their questions."""
    by_image: dict[int, list[Question]] = {item.image_id: [] for item in items}
    for question in _questions_of_images(db_session, competition, list(by_image)):
        by_image[question.image_id].append(question)
    for item in items:
        item.needed = _needed(item.discarded, by_image[item.image_id], competition.panel_size)
    db_session.flush()


def _unusable_images(
    db_session: Session, competition: LabellingCompetition, image_ids: list[int]
) -> set[int]:
    """Those of these images that were discarded as too difficult or excluded by an admin."""
    discarded = db_session.scalars(
        select(LabelItem.image_id).where(
            LabelItem.competition_id == competition.id,
            LabelItem.image_id.in_(image_ids),
            LabelItem.discarded,
        )
    )
    excluded = db_session.scalars(
        select(CompetitionImage.image_id).where(
            CompetitionImage.competition_id == competition.id,
            CompetitionImage.image_id.in_(image_ids),
            CompetitionImage.excluded,
        )
    )
    return set(discarded) | set(excluded)


def _promote_reserve(
    db_session: Session, competition: LabellingCompetition, subset_id: int, spread: int
) -> None:
    """The pair's next usable reserve image becomes selected and is asked (paper Sec. 3.1: the k+1-th)."""
    reserves = db_session.scalars(
        select(PairImage)
        .where(PairImage.subset_id == subset_id, PairImage.role == PairImageRole.reserve)
        .order_by(PairImage.position)
    ).all()
    for reserve in reserves:
        if _unusable_images(db_session, competition, [reserve.image_id]):
            reserve.role = PairImageRole.discarded
            continue
        reserve.role = PairImageRole.selected
        db_session.flush()
        _ask(db_session, competition, {reserve.image_id: (spread, (reserve.label_a, reserve.label_b))})
        return


_ITEM_OF_IMAGE = select(LabelItem.__table__.c.id).where(
    LabelItem.__table__.c.competition_id == bindparam("competition_id"),
    LabelItem.__table__.c.image_id == bindparam("image_id"),
)


def _discard_image(db_session: Session, competition: LabellingCompetition, item: LabelItem) -> None:
    """Discard a too-difficult image for every pair that selected it; each pair's next reserve replaces it."""
    item.discarded = True
    item.needed = 0
    selected = db_session.scalars(
        select(PairImage)
        .join(PairSubset, PairSubset.id == PairImage.subset_id)
        .where(
            PairSubset.competition_id == competition.id,
            PairImage.image_id == item.image_id,
            PairImage.role == PairImageRole.selected,
        )
    ).all()
    for pair_image in selected:
        pair_image.role = PairImageRole.discarded
    db_session.flush()
    for pair_image in selected:
        _promote_reserve(db_session, competition, pair_image.subset_id, spread=pair_image.position)


def discard_image(*, db_session: Session, competition: Competition, image_id: int) -> bool:
    """Discard an image for every pair that selected it, each pair's next usable reserve taking its place
    (as when the panel finds it too difficult); False if it is not being labelled or was discarded already."""
    if db_session.scalar(_ITEM_OF_IMAGE, {"competition_id": competition.id, "image_id": image_id}) is None:
        return False
    item = _lock_item(db_session, competition, image_id)
    if item.discarded:
        return False
    _discard_image(db_session, competition, item)
    return True


# Results for the leaderboard ---------------------------------------------------------------------------


def question_of_pair_image(question, label_column):
    """Join condition: the question (a Question or an alias of it) asking about a pair image's image and the
    given label column (PairImage.label_a or label_b)."""
    return and_(
        question.competition_id == PairSubset.competition_id,
        question.image_id == PairImage.image_id,
        question.class_index == label_column,
    )


def pair_outcomes(*, db_session: Session, competition: Competition) -> dict[tuple[int, int], np.ndarray]:
    """For every stored pair (a_id, b_id): an (n, 2) bool array (f_a correct, f_b correct) over its selected
    images whose two questions are both decided (outcome True: the image contains that class)."""
    outcomes: dict[tuple[int, int], list[tuple[bool, bool]]] = {
        pair: []
        for pair in db_session.execute(
            select(PairSubset.classifier_a_id, PairSubset.classifier_b_id)
            .where(PairSubset.competition_id == competition.id)
            .order_by(PairSubset.id)
        ).all()
    }
    question_a = aliased(Question)
    question_b = aliased(Question)
    rows = db_session.execute(
        select(PairSubset.classifier_a_id, PairSubset.classifier_b_id, question_a.outcome, question_b.outcome)
        .join(PairImage, PairImage.subset_id == PairSubset.id)
        .join(question_a, question_of_pair_image(question_a, PairImage.label_a))
        .join(question_b, question_of_pair_image(question_b, PairImage.label_b))
        .where(
            PairSubset.competition_id == competition.id,
            PairImage.role == PairImageRole.selected,
            question_a.outcome.is_not(None),
            question_b.outcome.is_not(None),
        )
        .order_by(PairSubset.id, PairImage.position)
    ).all()
    for a_id, b_id, correct_a, correct_b in rows:
        outcomes[(a_id, b_id)].append((correct_a, correct_b))
    return {pair: np.array(labelled, dtype=bool).reshape(-1, 2) for pair, labelled in outcomes.items()}


# The caller of a labelling request ---------------------------------------------------------------------


@dataclass(frozen=True)
class LabellingCaller:
    """An annotator's request resolved in one query: who calls, the competition (None when there is no
    such competition), and the token they called with (id and last use) if any."""

    labeller: Labeller
    competition: LabellingSettings | None
    token_id: int | None
    token_last_used_at: datetime | None


_users = User.__table__
_api_tokens = ApiToken.__table__
_competitions = Competition.__table__
_CALLER_COLUMNS = (
    _users.c.id,
    _users.c.role,
    _users.c.votes_excluded,
    _competitions.c.id.label("competition_id"),
    _competitions.c.created_at,
    _competitions.c.panel_size,
    _competitions.c.gold_rate,
)
_WITH_COMPETITION = (_competitions, _competitions.c.id == bindparam("competition_id"))
_CALLER_BY_TOKEN = HotStatement(
    select(*_CALLER_COLUMNS, _api_tokens.c.id.label("token_id"), _api_tokens.c.last_used_at)
    .select_from(_users.join(_api_tokens, _api_tokens.c.user_id == _users.c.id).outerjoin(*_WITH_COMPETITION))
    .where(_api_tokens.c.token_hash == bindparam("token_hash"), _users.c.is_active)
)
_CALLER_BY_ID = HotStatement(
    select(*_CALLER_COLUMNS, null().label("token_id"), null().label("last_used_at"))
    .select_from(_users.outerjoin(*_WITH_COMPETITION))
    .where(_users.c.id == bindparam("user_id"), _users.c.is_active)
)


def labelling_caller(
    *, db_session: Session, token: str | None, user_id: int | None, competition_id: int
) -> LabellingCaller | None:
    """The active account owning this API token (or else with this id) and the competition's labelling
    settings, in one query; None when no active account matches."""
    if token is not None:
        rows = _CALLER_BY_TOKEN.rows(
            db_session, {"token_hash": hash_api_token(token), "competition_id": competition_id}
        )
    else:
        rows = _CALLER_BY_ID.rows(db_session, {"user_id": user_id, "competition_id": competition_id})
    if not rows:
        return None
    (row,) = rows
    competition = (
        None
        if row.competition_id is None
        else LabellingSettings(row.competition_id, row.created_at, row.panel_size, row.gold_rate)
    )
    return LabellingCaller(
        Labeller(row.id, Role(row.role), row.votes_excluded), competition, row.token_id, row.last_used_at
    )


# Handing out items -------------------------------------------------------------------------------------


_class_names_cache: dict[tuple[int, datetime], tuple[str, ...]] = {}


def _class_names(db_session: Session, competition: LabellingCompetition) -> tuple[str, ...]:
    """A competition's class display names, read once per process: a label set never changes after the
    competition is created (keyed by id and creation time, so a reused id is never mistaken)."""
    key = (competition.id, competition.created_at)
    names = _class_names_cache.get(key)
    if names is None:
        stored = db_session.scalar(select(Competition.class_names).where(Competition.id == competition.id))
        names = _class_names_cache[key] = tuple(str(name) for name in stored)
    return names


#
# next_item and submit_answers are the hot paths (50 annotators, p99 < 50 ms on two cores), so they run
# statements built once, on tables, with bound parameters: no per-request statement building or ORM
# object loading.

_items = LabelItem.__table__
_assignments = Assignment.__table__
_questions = Question.__table__
_votes = Vote.__table__
_images = Image.__table__
_LEASED = literal_column(f"'{AssignmentStatus.leased.value}'")
"""The status written into the SQL, not bound: with a bound status Postgres planned the hot statements
afresh on every call (its estimate for 'leased', a rare status, beat the generic plan's every time)."""

_MY_LEASES = HotStatement(
    select(_items.c.id, _items.c.image_id, _items.c.discarded)
    .join(_assignments, _assignments.c.item_id == _items.c.id)
    .where(
        _assignments.c.user_id == bindparam("user_id"),
        _assignments.c.status == _LEASED,
        _assignments.c.expires_at > bindparam("now"),
        _items.c.competition_id == bindparam("competition_id"),
    )
    .order_by(_assignments.c.leased_at.desc())
)
"""Items the annotator holds a running lease on, most recently leased first (a reload resumes)."""

_mine = _assignments.alias("mine")
_others = _assignments.alias("others")
_OPEN_FOR_USER = (
    _items.c.competition_id == bindparam("competition_id"),
    _items.c.needed > 0,
    ~exists().where(
        _mine.c.item_id == _items.c.id, _mine.c.user_id == bindparam("user_id"), _mine.c.status != _LEASED
    ),
)
_LEASES_OF_OTHERS = (
    select(func.count())
    .where(
        _others.c.item_id == _items.c.id,
        _others.c.status == _LEASED,
        _others.c.expires_at > bindparam("now"),
        _others.c.user_id != bindparam("user_id"),
    )
    .scalar_subquery()
)
_QUEUE_HEAD = HotStatement(
    select(_items.c.id, _items.c.image_id, _items.c.discarded)
    .where(
        *_OPEN_FOR_USER,
        _LEASES_OF_OTHERS < _items.c.needed,
        _items.c.id.not_in(bindparam("rejected", expanding=True)),
    )
    .order_by(_items.c.needed, _items.c.spread, _items.c.shuffle)
    .limit(literal_column("1"))
    .with_for_update(skip_locked=True, of=_items)
)
"""The first open item in queue order that the annotator has not finished or flagged and that has a free
lease slot (other annotators' running leases fewer than the votes it needs), locked, skipping locked ones."""

_ANY_OPEN_FOR_USER = select(exists().where(*_OPEN_FOR_USER))

_LOCK_ITEM_UNLESS_LOCKED = (
    select(_items.c.id, _items.c.image_id, _items.c.discarded)
    .where(_items.c.competition_id == bindparam("competition_id"), _items.c.image_id == bindparam("image_id"))
    .with_for_update(skip_locked=True)
)
"""An image's item, locked; no row when another transaction holds its lock."""

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
        select(func.count())
        .select_from(_others)
        .where(
            _others.c.item_id == bindparam("item_id"),
            _others.c.status == _LEASED,
            _others.c.expires_at > bindparam("now"),
            _others.c.user_id != bindparam("user_id"),
        )
        .scalar_subquery()
        .label("leases_of_others"),
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
"""The questions of an image the annotator still has to answer (gold ones, and open ones unless the image
is discarded), with the image, and the item's running leases of others and needed votes as they are now."""


def next_item(*, db_session: Session, competition: LabellingCompetition, user: Annotator) -> NextItem:
    """Lease the annotator an image to label: the one they hold, a gold one when due, else the queue's next.

    Never a question they answered or an image they flagged; never more leases on an image than the votes
    it still needs; partly-voted images first, then round-robin over the pairs (by position in each pair).
    """
    now = utcnow()
    who = {"competition_id": competition.id, "user_id": user.id, "now": now}
    for item_id, image_id, discarded in _MY_LEASES.rows(db_session, who):
        presented = _present(db_session, competition, item_id, image_id, discarded, user, now)
        if presented is not None:
            return NextItem(presented, "item")
    if competition.gold_rate > 0 and _gold_due(db_session, competition, user):
        item = _gold_item(db_session, competition, user)
        presented = None if item is None else _present(db_session, competition, *item, user, now)
        if presented is not None:
            return NextItem(presented, "item")
    rejected: list[int] = []
    for _ in range(MAX_LEASE_ATTEMPTS):
        head = _QUEUE_HEAD.rows(db_session, {**who, "rejected": rejected})
        if not head:
            break
        ((item_id, image_id, discarded),) = head
        presented = _present(db_session, competition, item_id, image_id, discarded, user, now, capped=True)
        if presented is not None:
            return NextItem(presented, "item")
        rejected.append(item_id)
    waiting = db_session.scalar(_ANY_OPEN_FOR_USER, who)
    return NextItem(None, "busy" if waiting else "finished")


def _gold_due(db_session: Session, competition: LabellingCompetition, user: Annotator) -> bool:
    """True while gold questions make up no more than gold_rate of this annotator's answers."""
    answered, gold = db_session.execute(
        select(func.count(), func.count(Question.gold_answer))
        .select_from(Vote)
        .join(Question, Question.id == Vote.question_id)
        .where(Vote.user_id == user.id, Question.competition_id == competition.id)
    ).one()
    return gold <= competition.gold_rate * answered


def _gold_item(
    db_session: Session, competition: LabellingCompetition, user: Annotator
) -> tuple[int, int, bool] | None:
    """(item id, image id, discarded) of a random item with a gold question this annotator has not
    answered, on an image they did not flag; locked. None when there is none, or when another request
    holds that item's lock (an undo of it, say): the queue's next item is given instead of waiting, as a
    submit that brings the next item holds locks an undo waits for."""
    image_id = db_session.scalar(
        select(Question.image_id)
        .where(
            Question.competition_id == competition.id,
            Question.gold_answer.is_not(None),
            ~exists().where(Vote.question_id == Question.id, Vote.user_id == user.id),
            ~exists().where(
                DifficultyFlag.competition_id == competition.id,
                DifficultyFlag.image_id == Question.image_id,
                DifficultyFlag.user_id == user.id,
            ),
        )
        .order_by(func.random())
        .limit(1)
    )
    if image_id is None:
        return None
    return db_session.execute(
        _LOCK_ITEM_UNLESS_LOCKED, {"competition_id": competition.id, "image_id": image_id}
    ).first()


def _present(
    db_session: Session,
    competition: LabellingCompetition,
    item_id: int,
    image_id: int,
    discarded: bool,
    user: Annotator,
    now: datetime,
    capped: bool = False,
    first_question_id: int | None = None,
) -> PresentedItem | None:
    """Lease an item to the annotator with their pending questions in random order; None when nothing is
    left for them on it (the item is then marked done for them) or, if capped, when other annotators'
    running leases already match the votes it needs (counted afresh: the item row is locked by now)."""
    pending = _PENDING.rows(
        db_session,
        {
            "competition_id": competition.id,
            "image_id": image_id,
            "item_id": item_id,
            "user_id": user.id,
            "now": now,
            "open_questions_askable": not discarded,
        },
    )
    if not pending:
        _set_assignment(db_session, item_id, user.id, AssignmentStatus.done, now)
        return None
    if capped and pending[0].leases_of_others >= pending[0].needed:
        return None
    random.shuffle(pending)
    pending.sort(key=lambda question: question.id != first_question_id)
    expires_at = _set_assignment(db_session, item_id, user.id, AssignmentStatus.leased, now)
    names = _class_names(db_session, competition)
    return PresentedItem(
        item_id=item_id,
        image_sha256=pending[0].sha256,
        width=pending[0].width,
        height=pending[0].height,
        questions=[PresentedQuestion(q.id, q.class_index, names[q.class_index]) for q in pending],
        lease_expires_at=expires_at,
    )


@cache
def _assignment_upsert(dialect_name: str, keep_flagged: bool) -> HotStatement:
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


def _set_assignment(
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
    _assignment_upsert(db_session.get_bind().dialect.name, keep_flagged).write(
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


# Answers, flags and undo -------------------------------------------------------------------------------


def _lock_item(db_session: Session, competition: LabellingCompetition, image_id: int) -> LabelItem:
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


_LOCK_ITEMS_OF_QUESTIONS = HotStatement(
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
_undo_depths = UndoDepth.__table__
_IMAGE_QUESTIONS = HotStatement(
    select(
        _questions.c.id,
        _questions.c.yes_votes,
        _questions.c.no_votes,
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
they have undone, and their assignment's status on the item)."""
_UPDATE_COUNTS = HotStatement(
    update(_questions)
    .where(_questions.c.id == bindparam("question_id"))
    .values(
        yes_votes=bindparam("yes"),
        no_votes=bindparam("no"),
        outcome=bindparam("new_outcome"),
        decided_at=bindparam("new_decided_at"),
    )
)
_INSERT_VOTE = HotStatement(
    insert(_votes).values(
        question_id=bindparam("question_id"),
        user_id=bindparam("user_id"),
        answer=bindparam("answer"),
        seconds=bindparam("seconds"),
        created_at=bindparam("created_at"),
    )
)
_UPDATE_NEEDED = HotStatement(
    update(_items).where(_items.c.id == bindparam("item_id")).values(needed=bindparam("new_needed"))
)
_STEP_UP = HotStatement(
    update(_undo_depths)
    .where(
        _undo_depths.c.competition_id == bindparam("of_competition"),
        _undo_depths.c.user_id == bindparam("of_user"),
        _undo_depths.c.depth > 0,
    )
    .values(depth=_undo_depths.c.depth - 1)
)
"""A new answer or flag: the annotator climbs one step back towards their highest point."""


def submit_answers(
    *, db_session: Session, competition: LabellingCompetition, user: Annotator, answers: Sequence[Answer]
) -> SubmitResult:
    """Record an annotator's answers on one image; a strict majority of the panel decides a question and
    stops its asking (paper Sec. 3.1). Answers to questions decided meanwhile are not stored; resending an
    answer already stored is a no-op; changing one needs undo."""
    question_ids = [answer.question_id for answer in answers]
    if len(set(question_ids)) != len(question_ids):
        raise InvalidInput("each question may be answered once per submission")
    where = {"competition_id": competition.id, "user_id": user.id}
    items = _LOCK_ITEMS_OF_QUESTIONS.rows(db_session, {**where, "question_ids": question_ids})
    if len(items) != len(question_ids):
        raise NotFound("some of these questions do not exist in this competition")
    if len(set(items)) != 1:
        raise InvalidInput("the answers of one submission must be about one image")
    item = items[0]
    rows = _IMAGE_QUESTIONS.rows(db_session, {**where, "image_id": item.image_id, "item_id": item.id})
    _check_may_answer(rows[0].my_status)
    questions = {row.id: _Votes(*row[:-2]) for row in rows}
    now = utcnow()
    new_votes, counted, already_decided = [], [], []
    for answer in answers:
        question = questions[answer.question_id]
        if question.my_answer is not None:
            if question.my_answer != answer.answer:
                raise Conflict(f"question {answer.question_id} is already answered; undo it to change it")
            continue
        if question.gold_answer is None and (question.outcome is not None or item.discarded):
            already_decided.append(question.id)
            continue
        question.my_answer = answer.answer
        new_votes.append(
            {
                "question_id": question.id,
                "user_id": user.id,
                "answer": answer.answer,
                "seconds": answer.seconds,
                "created_at": now,
            }
        )
        if question.gold_answer is None and not user.votes_excluded:
            _count_vote(question, answer.answer, +1, competition.panel_size, now)
            counted.append(question)
    item_done = not any(
        question.my_answer is None
        and (question.gold_answer is not None or (question.outcome is None and not item.discarded))
        for question in questions.values()
    )
    with pipelined(db_session):
        if new_votes:
            _INSERT_VOTE.write(db_session, new_votes)
            if rows[0].undo_depth:
                _step_up(db_session, competition, user)
        if counted:
            _UPDATE_COUNTS.write(db_session, [_counts_row(question) for question in counted])
            needed = _needed(item.discarded, questions.values(), competition.panel_size)
            _UPDATE_NEEDED.write(db_session, {"item_id": item.id, "new_needed": needed})
        status = AssignmentStatus.done if item_done else AssignmentStatus.leased
        _set_assignment(db_session, item.id, user.id, status, now)
    return SubmitResult(recorded=len(new_votes), already_decided=already_decided, item_done=item_done)


def _counts_row(question: _Votes) -> dict:
    """The parameters of _UPDATE_COUNTS for a question."""
    return {
        "question_id": question.id,
        "yes": question.yes_votes,
        "no": question.no_votes,
        "new_outcome": question.outcome,
        "new_decided_at": question.decided_at,
    }


def _check_may_answer(status: str | None) -> None:
    """Answers count only on an image handed to the caller (by next or undo) and not flagged by them."""
    if status is None:
        raise Conflict("this image was not given to you: take it from POST …/next, then answer it")
    if status == AssignmentStatus.flagged:
        raise Conflict("you flagged this image as too difficult: undo the flag to answer it")


def _count_vote(question: Question | _Votes, answer: bool, step: int, panel_size: int, now: datetime) -> None:
    """Add (step=+1) or take back (step=-1) a counted vote and re-decide the question by majority."""
    if answer:
        question.yes_votes += step
    else:
        question.no_votes += step
    _decide(question, panel_size, now)


def _decide(question: Question | _Votes, panel_size: int, now: datetime) -> None:
    """Set a regular question's outcome from its counted votes; decided_at keeps the first decision time."""
    outcome = rules.outcome(question.yes_votes, question.no_votes, panel_size)
    if outcome != question.outcome:
        question.outcome = outcome
        question.decided_at = None if outcome is None else now


def _step_up(db_session: Session, competition: LabellingCompetition, user: Annotator) -> None:
    """A new answer or flag: the annotator climbs one step back towards their highest point."""
    _STEP_UP.write(db_session, {"of_competition": competition.id, "of_user": user.id})


def flag_image(
    *, db_session: Session, competition: LabellingCompetition, user: Annotator, item_id: int
) -> bool:
    """Record that the annotator finds an image too difficult or not a natural photo; when more than 60%
    of the panel do, discard it for its pairs and promote their reserves. Returns whether it was discarded.

    Only an image handed to the annotator (by next or undo) that still has questions for them can be
    flagged; flagging it again is a no-op.
    """
    image_id = db_session.scalar(
        select(LabelItem.image_id).where(LabelItem.id == item_id, LabelItem.competition_id == competition.id)
    )
    if image_id is None:
        raise NotFound(f"no item {item_id} in this competition")
    item = _lock_item(db_session, competition, image_id)
    status = db_session.scalar(
        select(Assignment.status).where(Assignment.item_id == item.id, Assignment.user_id == user.id)
    )
    if status == AssignmentStatus.flagged:
        return item.discarded
    if status is None:
        raise Conflict("this image was not given to you: take it from POST …/next, then flag it")
    now = utcnow()
    if not _has_pending(db_session, competition, item, user, now):
        raise Conflict(
            "the panel has discarded this image meanwhile"
            if item.discarded
            else "every question on this image was decided meanwhile, so there is nothing to flag"
        )
    db_session.add(
        DifficultyFlag(competition_id=competition.id, image_id=image_id, user_id=user.id, created_at=now)
    )
    if not user.votes_excluded:
        item.flags += 1
    _step_up(db_session, competition, user)
    _set_assignment(db_session, item.id, user.id, AssignmentStatus.flagged, now, keep_flagged=False)
    if not item.discarded and rules.too_difficult(item.flags, competition.panel_size):
        _discard_image(db_session, competition, item)
    db_session.flush()
    return item.discarded


def _has_pending(
    db_session: Session, competition: LabellingCompetition, item: LabelItem, user: Annotator, now: datetime
) -> bool:
    """Whether the image still has questions for the annotator (gold ones, or open ones unless discarded)."""
    pending = _PENDING.rows(
        db_session,
        {
            "competition_id": competition.id,
            "image_id": item.image_id,
            "item_id": item.id,
            "user_id": user.id,
            "now": now,
            "open_questions_askable": not item.discarded,
        },
    )
    return bool(pending)


def undo_last(*, db_session: Session, competition: LabellingCompetition, user: Annotator) -> UndoResult:
    """Take back the annotator's latest answer or flag and lease its image again, that question first.

    Only the ten most recent stay editable: undo stops ten steps below the highest point reached. Locks
    as submit and flag do (the image's item, then the annotator's undo row), so they never deadlock; if the
    annotator's latest step changed before the locks were held, nothing is undone (409, try again).
    """
    latest = _latest_step(db_session, competition, user)
    if latest is None:
        raise NotFound("there is nothing to undo")
    step, image_id = latest
    item = _lock_item(db_session, competition, image_id)
    depth = _lock_undo_depth(db_session, competition, user)
    if depth.depth >= rules.UNDO_LIMIT:
        raise Conflict(f"only the last {rules.UNDO_LIMIT} answers can be undone")
    if _latest_step(db_session, competition, user) != latest:
        raise Conflict("your answers changed while undoing (another request?); try again")
    now = utcnow()
    if isinstance(step, DifficultyFlag):
        if item.discarded:
            raise Conflict("the panel has already discarded this image, so the flag stays")
        db_session.delete(step)
        if not user.votes_excluded:
            item.flags -= 1
        undone, first_question_id = "flag", None
    else:
        question = db_session.get_one(Question, step.question_id, populate_existing=True)
        if question.gold_answer is None and not user.votes_excluded:
            _count_vote(question, step.answer, -1, competition.panel_size, now)
        db_session.delete(step)
        db_session.flush()
        _refresh_needed(db_session, competition, [item])
        undone, first_question_id = "answer", question.id
    _set_assignment(db_session, item.id, user.id, AssignmentStatus.leased, now, keep_flagged=False)
    depth.depth += 1
    db_session.flush()
    presented = _present(
        db_session,
        competition,
        item.id,
        item.image_id,
        item.discarded,
        user,
        now,
        first_question_id=first_question_id,
    )
    return UndoResult(undone, first_question_id, presented)


def _latest_step(
    db_session: Session, competition: LabellingCompetition, user: Annotator
) -> tuple[Vote | DifficultyFlag, int] | None:
    """The annotator's latest answer or flag in the competition with its image id; None if neither."""
    vote = db_session.execute(
        select(Vote, Question.image_id)
        .join(Question, Question.id == Vote.question_id)
        .where(Vote.user_id == user.id, Question.competition_id == competition.id)
        .order_by(Vote.created_at.desc(), Vote.id.desc())
        .limit(1)
    ).first()
    flag = db_session.scalar(
        select(DifficultyFlag)
        .where(DifficultyFlag.competition_id == competition.id, DifficultyFlag.user_id == user.id)
        .order_by(DifficultyFlag.created_at.desc(), DifficultyFlag.id.desc())
        .limit(1)
    )
    if flag is not None and (vote is None or flag.created_at > vote[0].created_at):
        return flag, flag.image_id
    return None if vote is None else (vote[0], vote[1])


def _lock_undo_depth(db_session: Session, competition: LabellingCompetition, user: Annotator) -> UndoDepth:
    """The annotator's undo row in the competition, created if missing (safe against a concurrent first
    undo) and locked."""
    db_session.execute(
        _insert(db_session, UndoDepth)
        .values(competition_id=competition.id, user_id=user.id, depth=0)
        .on_conflict_do_nothing()
    )
    return db_session.get_one(
        UndoDepth, (competition.id, user.id), with_for_update=True, populate_existing=True
    )


# Admin: exclusion, gold questions, annotator statistics ------------------------------------------------


def release_leases(*, db_session: Session, user: User) -> None:
    """End the annotator's running leases now, so that others take those images (when they are paused)."""
    now = utcnow()
    db_session.execute(
        update(Assignment)
        .where(
            Assignment.user_id == user.id,
            Assignment.status == AssignmentStatus.leased,
            Assignment.expires_at > now,
        )
        .values(expires_at=now)
    )


def set_votes_excluded(*, db_session: Session, user: User, votes_excluded: bool) -> None:
    """Exclude (or count again) every vote and flag of an annotator; re-decide the questions they touched.

    A discard stands: an image that the excluded flags helped discard stays discarded, because its pairs
    have already moved on to their reserve images.
    """
    if user.votes_excluded == votes_excluded:
        return
    user.votes_excluded = votes_excluded
    db_session.flush()
    touched = set(
        db_session.execute(
            select(Question.competition_id, Question.image_id)
            .join(Vote, Vote.question_id == Question.id)
            .where(Vote.user_id == user.id, Question.gold_answer.is_(None))
        ).all()
    ) | set(
        db_session.execute(
            select(DifficultyFlag.competition_id, DifficultyFlag.image_id).where(
                DifficultyFlag.user_id == user.id
            )
        ).all()
    )
    for competition_id in sorted({competition_id for competition_id, _ in touched}):
        competition = db_session.get_one(Competition, competition_id)
        image_ids = sorted(image_id for cid, image_id in touched if cid == competition_id)
        _recount(db_session, competition, image_ids)


def _recount(db_session: Session, competition: LabellingCompetition, image_ids: list[int]) -> None:
    """Recount the counted votes and flags on these images and re-decide their questions and items."""
    items = list(
        db_session.scalars(
            select(LabelItem)
            .where(LabelItem.competition_id == competition.id, LabelItem.image_id.in_(image_ids))
            .order_by(LabelItem.id)
            .with_for_update()
            .execution_options(populate_existing=True)
        )
    )
    questions = _questions_of_images(db_session, competition, image_ids)
    counted = {
        question_id: (yes, no)
        for question_id, yes, no in db_session.execute(
            select(
                Vote.question_id,
                func.sum(case((Vote.answer, 1), else_=0)),
                func.sum(case((Vote.answer, 0), else_=1)),
            )
            .join(User, User.id == Vote.user_id)
            .where(Vote.question_id.in_([q.id for q in questions]), ~User.votes_excluded)
            .group_by(Vote.question_id)
        ).all()
    }
    now = utcnow()
    for question in questions:
        if question.gold_answer is None:
            question.yes_votes, question.no_votes = counted.get(question.id, (0, 0))
            _decide(question, competition.panel_size, now)
    flags = dict(
        db_session.execute(
            select(DifficultyFlag.image_id, func.count())
            .join(User, User.id == DifficultyFlag.user_id)
            .where(
                DifficultyFlag.competition_id == competition.id,
                DifficultyFlag.image_id.in_(image_ids),
                ~User.votes_excluded,
            )
            .group_by(DifficultyFlag.image_id)
        ).all()
    )
    for item in items:
        item.flags = flags.get(item.image_id, 0)
        on_image = [question for question in questions if question.image_id == item.image_id]
        item.needed = _needed(item.discarded, on_image, competition.panel_size)
        if not item.discarded and rules.too_difficult(item.flags, competition.panel_size):
            _discard_image(db_session, competition, item)
    db_session.flush()


def add_gold_questions(
    *,
    db_session: Session,
    competition: Competition,
    image_sha256: str,
    answers: Sequence[tuple[int, bool]],
) -> list[Question]:
    """Make (image, class) gold questions with known answers, which are also their outcomes.

    A gold image must show at least two questions, as every image does (one pair asks two classes), or
    annotators could tell it apart: give two classes, or one on an image a pair already asks about.
    """
    classes = [class_index for class_index, _ in answers]
    for class_index in classes:
        if not 0 <= class_index < len(competition.class_keys):
            raise InvalidInput(f"class_index must be between 0 and {len(competition.class_keys) - 1}")
    if len(set(classes)) != len(classes):
        raise InvalidInput("each class may be given once")
    image_id = db_session.scalar(
        select(Image.id)
        .join(CompetitionImage, CompetitionImage.image_id == Image.id)
        .where(Image.sha256 == image_sha256, CompetitionImage.competition_id == competition.id)
    )
    if image_id is None:
        raise NotFound(f"no image {image_sha256} in this competition")
    asked = set(
        db_session.scalars(
            select(Question.class_index).where(
                Question.competition_id == competition.id, Question.image_id == image_id
            )
        )
    )
    if len(asked | set(classes)) < 2:
        raise InvalidInput(
            "a gold image needs two questions like every other image, or annotators can tell it apart: give "
            "two classes (one the image clearly lacks is fine), or pick an image a pair already asks about"
        )
    _ask(db_session, competition, {image_id: (GOLD_SPREAD, classes)})
    item = _lock_item(db_session, competition, image_id)
    questions = []
    for class_index, answer in answers:
        question = db_session.scalars(
            select(Question)
            .where(
                Question.competition_id == competition.id,
                Question.image_id == image_id,
                Question.class_index == class_index,
            )
            .execution_options(populate_existing=True)
        ).one()
        question.gold_answer = answer
        question.outcome = answer
        question.decided_at = utcnow()
        questions.append(question)
    _refresh_needed(db_session, competition, [item])
    return questions


def gold_questions(*, db_session: Session, competition: Competition) -> list[tuple[Question, str]]:
    """Every gold question of the competition with its image's hash, oldest first."""
    return list(
        db_session.execute(
            select(Question, Image.sha256)
            .join(Image, Image.id == Question.image_id)
            .where(Question.competition_id == competition.id, Question.gold_answer.is_not(None))
            .order_by(Question.id)
        ).all()
    )


def annotator_stats(
    *, db_session: Session, competition: LabellingCompetition, user_ids: Sequence[int] | None = None
) -> list[AnnotatorStats]:
    """Answers (in total and since midnight UTC), flags, gold accuracy and mean seconds per annotator who
    took part in the competition, or of the given users."""
    midnight = utcnow().replace(hour=0, minute=0, second=0, microsecond=0)
    votes = (
        select(
            Vote.user_id,
            func.count().label("answered_total"),
            func.sum(case((Vote.created_at >= midnight, 1), else_=0)).label("answered_today"),
            func.count(Question.gold_answer).label("gold_answered"),
            func.sum(case((Question.gold_answer == Vote.answer, 1), else_=0)).label("gold_correct"),
            func.avg(Vote.seconds).label("mean_seconds"),
        )
        .join(Question, Question.id == Vote.question_id)
        .where(Question.competition_id == competition.id)
        .group_by(Vote.user_id)
    )
    flags = (
        select(DifficultyFlag.user_id, func.count().label("flagged"))
        .where(DifficultyFlag.competition_id == competition.id)
        .group_by(DifficultyFlag.user_id)
    )
    if user_ids is not None:
        votes = votes.where(Vote.user_id.in_(user_ids))
        flags = flags.where(DifficultyFlag.user_id.in_(user_ids))
    by_user = {row.user_id: row for row in db_session.execute(votes)}
    flagged = dict(db_session.execute(flags).all())
    wanted = set(by_user) | set(flagged) if user_ids is None else set(user_ids)
    users = db_session.scalars(select(User).where(User.id.in_(wanted)).order_by(User.id))
    stats = []
    for user in users:
        row = by_user.get(user.id)
        stats.append(
            AnnotatorStats(
                user_id=user.id,
                username=user.username,
                is_active=user.is_active,
                votes_excluded=user.votes_excluded,
                answered_total=row.answered_total if row else 0,
                answered_today=row.answered_today if row else 0,
                flagged=flagged.get(user.id, 0),
                gold_answered=row.gold_answered if row else 0,
                gold_correct=row.gold_correct if row else 0,
                mean_seconds=float(row.mean_seconds) if row and row.mean_seconds is not None else None,
            )
        )
    return stats


def images_left(*, db_session: Session, competition: LabellingCompetition) -> int:
    """Images in the competition whose questions still need votes."""
    return db_session.scalar(
        select(func.count())
        .select_from(LabelItem)
        .where(LabelItem.competition_id == competition.id, LabelItem.needed > 0)
    )
