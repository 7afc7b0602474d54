"""Pair subsets: storing a pair's selection (selected images, then its reserve), asking their questions,
and discarding an image for every pair that selected it, each pair's next reserve taking its place.

A question is (image, class) and is shared by every pair that asks it. Each image with questions has one
LabelItem, the unit an annotator is shown; its row carries the denormalised queue state (`needed`) and is
the lock that serialises every change to the votes on its questions.
"""

import random
from collections.abc import Iterable, Sequence
from typing import Any

from sqlalchemy import Select, delete, func, select
from sqlalchemy.orm import Session

from app.classifiers.models import Classifier
from app.competitions.models import Competition
from app.db.base import utcnow
from app.db.statements import conflict_insert
from app.errors import InvalidInput, NotFound
from app.images.models import CompetitionImage
from app.labelling import rules
from app.labelling.items import lock_item, lock_items, refresh_needed
from app.labelling.models import (
    Assignment,
    AssignmentStatus,
    LabelItem,
    PairImage,
    PairImageRole,
    PairSubset,
    Question,
)
from app.labelling.statements import ITEM_OF_IMAGE
from app.labelling.types import LabellingSettings, PairEntry, early_rule

SHUFFLE_RANGE = 2**31


def store_pair_subset(
    *,
    db_session: Session,
    competition: Competition,
    classifier_a_id: int,
    classifier_b_id: int,
    entries: Sequence[PairEntry],
    diagnosis: dict[str, Any] | None = None,
    below_threshold: Sequence[bool] = (),
) -> PairSubset:
    """Store a pair's selection in order (the first k selected, the rest reserve) with its diagnosis (how the
    selection went, app/core/selection.py) and, per entry, whether a `fill` selection took it below T (none
    when not given), and ask its new questions.

    Idempotent: storing a pair again returns the stored subset unchanged (paper Algorithm 2 asks only
    questions not yet answered).
    """
    if classifier_a_id >= classifier_b_id:
        raise InvalidInput("a pair is stored with classifier_a_id < classifier_b_id")
    existing = db_session.scalar(_subset_of(classifier_a_id, classifier_b_id))
    if existing is not None:
        return existing
    rows = [_entry_row(entry, len(competition.class_keys)) for entry in entries]
    _check_pair_inputs(db_session, competition, classifier_a_id, classifier_b_id, rows)
    subset_id = db_session.scalar(
        conflict_insert(db_session, PairSubset)
        .values(
            competition_id=competition.id,
            classifier_a_id=classifier_a_id,
            classifier_b_id=classifier_b_id,
            created_at=utcnow(),
            diagnosis=diagnosis,
        )
        .on_conflict_do_nothing()
        .returning(PairSubset.id)
    )
    if subset_id is None:  # another transaction stored the same pair first
        return db_session.execute(_subset_of(classifier_a_id, classifier_b_id)).scalar_one()
    settings = LabellingSettings.of(competition)
    unusable = _unusable_images(db_session, settings, [row["image_id"] for row in rows[: competition.k]])
    for position, row in enumerate(rows):
        row["below_threshold"] = bool(below_threshold[position]) if below_threshold else False
        if position >= competition.k:
            role = PairImageRole.reserve
        else:
            role = PairImageRole.discarded if row["image_id"] in unusable else PairImageRole.selected
        row.update(subset_id=subset_id, position=position, role=role)
    if rows:
        db_session.execute(conflict_insert(db_session, PairImage), rows)
    selected = [row for row in rows if row["role"] == PairImageRole.selected]
    ask(
        db_session,
        settings,
        {row["image_id"]: (row["position"], (row["label_a"], row["label_b"])) for row in selected},
    )
    for row in rows[: competition.k]:
        if row["role"] == PairImageRole.discarded:
            _promote_reserve(db_session, settings, subset_id, spread=row["position"])
    return db_session.get_one(PairSubset, subset_id)


def _subset_of(classifier_a_id: int, classifier_b_id: int) -> Select[PairSubset]:
    """The query of a pair's stored subset."""
    return select(PairSubset).where(
        PairSubset.classifier_a_id == classifier_a_id, PairSubset.classifier_b_id == classifier_b_id
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


def ask(
    db_session: Session, competition: LabellingSettings, images: dict[int, tuple[int, Iterable[int]]]
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
        db_session.execute(conflict_insert(db_session, Question).on_conflict_do_nothing(), new_questions)
    asked_before = {image_id for image_id, _ in asked}
    new_images = [image_id for image_id in images if image_id not in asked_before]
    if new_images:  # all their questions are new, so each needs a full majority
        db_session.execute(
            conflict_insert(db_session, LabelItem).on_conflict_do_nothing(),
            [
                {
                    "competition_id": competition.id,
                    "image_id": image_id,
                    "spread": images[image_id][0],
                    "shuffle": random.randrange(SHUFFLE_RANGE),
                    "needed": rules.votes_still_needed(
                        0, 0, competition.panel_size, early_rule(competition), 0.0
                    ),
                }
                for image_id in new_images
            ],
        )
    if not asked_before:
        return
    items = lock_items(db_session, competition, sorted(asked_before))  # before their assignments
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
    refresh_needed(db_session, competition, items)


def _unusable_images(db_session: Session, competition: LabellingSettings, image_ids: list[int]) -> set[int]:
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
    db_session: Session, competition: LabellingSettings, subset_id: int, spread: int
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
        ask(db_session, competition, {reserve.image_id: (spread, (reserve.label_a, reserve.label_b))})
        return


def pair_images_of(
    db_session: Session, competition: LabellingSettings, image_id: int, role: PairImageRole
) -> list[PairImage]:
    """The rows of an image in every pair of the competition that holds it in this role."""
    return list(
        db_session.scalars(
            select(PairImage)
            .join(PairSubset, PairSubset.id == PairImage.subset_id)
            .where(
                PairSubset.competition_id == competition.id,
                PairImage.image_id == image_id,
                PairImage.role == role,
            )
        )
    )


def discard_item(db_session: Session, competition: LabellingSettings, item: LabelItem) -> None:
    """Discard a too-difficult image for every pair that selected it; each pair's next reserve replaces it."""
    item.discarded = True
    item.needed = 0
    selected = pair_images_of(db_session, competition, item.image_id, PairImageRole.selected)
    for pair_image in selected:
        pair_image.role = PairImageRole.discarded
    db_session.flush()
    for pair_image in selected:
        _promote_reserve(db_session, competition, pair_image.subset_id, spread=pair_image.position)


def discard_image(*, db_session: Session, competition: Competition, image_id: int) -> bool:
    """Discard an image for every pair that selected it, each pair's next usable reserve taking its place
    (as when the panel finds it too difficult); False if it is not being labelled or was discarded already."""
    if db_session.scalar(ITEM_OF_IMAGE, {"competition_id": competition.id, "image_id": image_id}) is None:
        return False
    settings = LabellingSettings.of(competition)
    item = lock_item(db_session, settings, image_id)
    if item.discarded:
        return False
    discard_item(db_session, settings, item)
    return True
