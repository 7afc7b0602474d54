"""The labelling queue: which image an annotator labels next, leased to them with their pending questions.

Never a question they answered or an image they flagged; never more running leases on an image than the
votes it still needs; partly-voted images first, then round-robin over the pairs (by position in each
pair). Gold images are mixed in at random: each image handed out is a gold one with probability
gold_rate, whatever came before, so that its place in an annotator's sequence says nothing about it (a
schedule by counts, "gold once every n answers", told annotators which images were gold); and an
annotator with nothing else left to do is given the gold images they have not answered, then the images
they skipped, gold ones alike (skipping must neither find gold images nor dodge them). The statements are
app.labelling.statements.

Under active sampling (issues 24 and 33) the queue's next image is the open one of highest priority (partly
voted first, as ever), at random within a priority level, except for a uniform floor of picks at random
among the items not parked, so that the images a pair has labelled when it stops are a fair sample of its
k; it never hands out a parked item (priority 0: all its pairs settled), nothing at all once the policy
found the ranking settled (app.labelling.active_sampling.policy refreshes the priorities), and gold at
DEFAULT_GOLD_RATE where the competition has gold but sets no rate. An annotator with nothing left is told
`settled` if the policy, rerun on the questions decided since its last run, finds it so.
"""

import random
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy.orm import Session

from app.competitions.translations import ClassText, label_set_translations
from app.core.active import DEFAULT_UNIFORM_FLOOR
from app.core.taxonomy import TaxonomyError
from app.core.taxonomy_sources import cached_taxonomy
from app.db.base import utcnow
from app.db.statements import HotStatement
from app.i18n import SOURCE_LOCALE
from app.labelling.active_sampling.policy import dry_queue_status
from app.labelling.items import set_assignment
from app.labelling.models import AssignmentStatus
from app.labelling.statements import (
    ACTIVE_FLOOR_HEAD,
    ACTIVE_QUEUE_HEAD,
    ACTIVE_SKIPPED_HEAD,
    ANY_ACTIVE_OPEN_FOR_USER,
    ANY_ACTIVE_SKIPPED_FOR_USER,
    ANY_OPEN_FOR_USER,
    ANY_SKIPPED_FOR_USER,
    GOLD_IMAGE,
    LABEL_SET,
    LOCK_ITEM_UNLESS_LOCKED,
    MY_LEASES,
    QUEUE_HEAD,
    SKIPPED_HEAD,
    pending_questions,
)
from app.labelling.types import (
    Labeller,
    LabellingSettings,
    NextItem,
    PresentedItem,
    PresentedQuestion,
    actively_sampled,
    handed_out_gold_rate,
    nothing_useful_left,
)

MAX_LEASE_ATTEMPTS = 8


@dataclass(frozen=True)
class LabelSet:
    """A competition's class display names and definitions (what each class means; "" where unknown), and
    per language other than English each class's (name, definition) in it, None where it has no name."""

    names: tuple[str, ...]
    definitions: tuple[str, ...]
    translations: Mapping[str, tuple[ClassText | None, ...]]

    def question(self, question_id: int, class_index: int, locale: str) -> PresentedQuestion:
        """The question on a class in the language asked for when the class has a name in it, else in
        English (the definition in English where the language's is not given)."""
        translated = self.translations.get(locale, ())
        text = translated[class_index] if translated else None
        if text is None:
            english = self.names[class_index], self.definitions[class_index]
            return PresentedQuestion(question_id, class_index, *english, SOURCE_LOCALE)
        name, definition = text
        return PresentedQuestion(
            question_id, class_index, name, definition or self.definitions[class_index], locale
        )


_label_sets: dict[tuple[int, datetime, int], LabelSet] = {}


def _label_set(db_session: Session, competition: LabellingSettings) -> LabelSet:
    """A competition's label set with its translations, read once per process: the names never change after
    the competition is created, and each import of translations raises its translations_version (keyed by
    id, creation time and that version, so a reused id or a new import is never mistaken)."""
    key = (competition.id, competition.created_at, competition.translations_version)
    label_set = _label_sets.get(key)
    if label_set is None:
        row = db_session.execute(LABEL_SET, {"competition_id": competition.id}).one()
        names = row.class_names
        try:
            taxonomy = cached_taxonomy(row.taxonomy, row.taxonomy_source)
            definitions = tuple(taxonomy.definition(index) for index in range(len(names)))
        except TaxonomyError:  # its data is missing on this machine (WordNet): names only
            definitions = ("",) * len(names)
        translations = label_set_translations(
            db_session=db_session,
            competition_id=competition.id,
            class_keys=row.class_keys,
            taxonomy=row.taxonomy,
            source=row.taxonomy_source,
        )
        for stale in [other for other in list(_label_sets) if other[:2] == key[:2]]:  # before an import
            _label_sets.pop(stale, None)
        label_set = _label_sets[key] = LabelSet(tuple(str(name) for name in names), definitions, translations)
    return label_set


def next_item(
    *,
    db_session: Session,
    competition: LabellingSettings,
    user: Labeller,
    not_now: int | None = None,
    rerun_policy: bool = True,
) -> NextItem:
    """Lease the annotator an image to label: the one they hold, else a gold one with probability
    handed_out_gold_rate,
    else the queue's next, else (nothing else open to them) a gold one they have not answered, else one they
    skipped (longest ago first; never item `not_now`, the one just skipped).

    Never a question they answered or an image they flagged; never more leases on an image than the votes
    it still needs; partly-voted images first, then round-robin over the pairs (by position in each pair).
    The status says why there is none: `busy` (others hold what is left), `skipped` (only images they
    skipped are left), `finished`, `settled` (active sampling: the ranking is settled, nothing useful is
    left). Under active sampling the queue's order is the policy's (module docstring); with rerun_policy,
    an annotator with nothing left makes it rerun on the questions decided since its last run.
    """
    if nothing_useful_left(competition):
        return NextItem(None, "settled")
    now = utcnow()
    who = {"competition_id": competition.id, "user_id": user.id, "now": now}
    for item_id, image_id, discarded in MY_LEASES.rows(db_session, who):
        presented = present(db_session, competition, item_id, image_id, discarded, user, now)
        if presented is not None:
            return NextItem(presented, "item")
    presented = None
    gold_rate = handed_out_gold_rate(competition)
    if gold_rate > 0 and random.random() < gold_rate:
        presented = _lease_gold(db_session, competition, user, now)
    if presented is None:
        presented = _lease_head(db_session, competition, user, now, _queue_head(competition), [])
    if presented is None and gold_rate > 0:
        presented = _lease_gold(db_session, competition, user, now)
    skipped = {**who, "gold_mixed_in": gold_rate > 0}
    if presented is None:
        skipped_not_now = [] if not_now is None else [not_now]
        skipped_head = ACTIVE_SKIPPED_HEAD if actively_sampled(competition) else SKIPPED_HEAD
        presented = _lease_head(db_session, competition, user, now, skipped_head, skipped_not_now, skipped)
    if presented is not None:
        return NextItem(presented, "item")
    if db_session.scalar(
        ANY_ACTIVE_OPEN_FOR_USER if actively_sampled(competition) else ANY_OPEN_FOR_USER, who
    ):
        return NextItem(None, "busy")
    any_skipped = ANY_ACTIVE_SKIPPED_FOR_USER if actively_sampled(competition) else ANY_SKIPPED_FOR_USER
    if db_session.scalar(any_skipped, skipped):
        return NextItem(None, "skipped")
    if rerun_policy and actively_sampled(competition):
        return NextItem(None, dry_queue_status(db_session, competition.id))
    return NextItem(None, "finished")


def _queue_head(competition: LabellingSettings) -> HotStatement:
    """QUEUE_HEAD; under active sampling the policy's order, or with probability DEFAULT_UNIFORM_FLOOR the
    uniform order among the items not parked (app.core.active: no open pair starves)."""
    if not actively_sampled(competition):
        return QUEUE_HEAD
    return ACTIVE_FLOOR_HEAD if random.random() < DEFAULT_UNIFORM_FLOOR else ACTIVE_QUEUE_HEAD


def _lease_head(
    db_session: Session,
    competition: LabellingSettings,
    user: Labeller,
    now: datetime,
    head: HotStatement,
    rejected: list[int],
    parameters: dict | None = None,
) -> PresentedItem | None:
    """Lease the first item `head` finds (not one of `rejected`; with these further parameters) that still
    has a question and a free lease slot for the annotator, trying a few in turn; None when there is none."""
    who = {"competition_id": competition.id, "user_id": user.id, "now": now, **(parameters or {})}
    for _ in range(MAX_LEASE_ATTEMPTS):
        rows = head.rows(db_session, {**who, "rejected": rejected})
        if not rows:
            return None
        ((item_id, image_id, discarded),) = rows
        presented = present(db_session, competition, item_id, image_id, discarded, user, now, capped=True)
        if presented is not None:
            return presented
        rejected = [*rejected, item_id]
    return None


def _lease_gold(
    db_session: Session, competition: LabellingSettings, user: Labeller, now: datetime
) -> PresentedItem | None:
    """Lease a random image with a gold question the annotator has not answered, on an image they did not
    flag; None when there is none, or when another request holds that item's lock (an undo of it, say):
    the queue's next item is given instead of waiting, as a submit that brings the next item holds locks
    an undo waits for."""
    image_id = db_session.scalar(GOLD_IMAGE, {"competition_id": competition.id, "user_id": user.id})
    if image_id is None:
        return None
    item = db_session.execute(
        LOCK_ITEM_UNLESS_LOCKED, {"competition_id": competition.id, "image_id": image_id}
    ).first()
    return None if item is None else present(db_session, competition, *item, user, now)


def present(
    db_session: Session,
    competition: LabellingSettings,
    item_id: int,
    image_id: int,
    discarded: bool,
    user: Labeller,
    now: datetime,
    capped: bool = False,
    first_question_id: int | None = None,
) -> PresentedItem | None:
    """Lease an item to the annotator with their pending questions in random order; None when nothing is
    left for them on it (the item is then marked done for them) or, if capped, when other annotators'
    running leases already match the votes it needs (counted afresh: the item row is locked by now; an item
    that needs no votes but has questions for them has only gold ones, handed to everyone)."""
    pending = pending_questions(
        db_session,
        competition_id=competition.id,
        item_id=item_id,
        image_id=image_id,
        discarded=discarded,
        user_id=user.id,
        now=now,
    )
    if not pending:
        set_assignment(db_session, item_id, user.id, AssignmentStatus.done, now)
        return None
    if capped and pending[0].leases_of_others >= pending[0].needed > 0:
        return None
    random.shuffle(pending)
    pending.sort(key=lambda question: question.id != first_question_id)
    expires_at = set_assignment(db_session, item_id, user.id, AssignmentStatus.leased, now)
    label_set = _label_set(db_session, competition)
    return PresentedItem(
        item_id=item_id,
        image_sha256=pending[0].sha256,
        width=pending[0].width,
        height=pending[0].height,
        questions=[label_set.question(q.id, q.class_index, user.locale) for q in pending],
        lease_expires_at=expires_at,
    )
