"""Skipping an image: the annotator hands it back without an answer (distinct from flagging it as too
difficult, which counts towards discarding it)."""

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.db.base import utcnow
from app.errors import Conflict, NotFound
from app.labelling.items import set_assignment
from app.labelling.models import Assignment, AssignmentStatus, LabelItem
from app.labelling.types import Labeller, LabellingSettings


def skip_item(*, db_session: Session, competition: LabellingSettings, user: Labeller, item_id: int) -> None:
    """End the annotator's lease on an item without a vote or a flag, so that others may take it; the queue
    offers it to them again only once nothing else is left for them (app.labelling.annotating.queue). Only an
    image given to them and not yet answered, flagged or finished can be skipped (409); skipping again is a
    no-op.
    """
    item_exists = db_session.scalar(
        select(LabelItem.id).where(LabelItem.id == item_id, LabelItem.competition_id == competition.id)
    )
    if item_exists is None:
        raise NotFound(f"no item {item_id} in this competition")
    status = db_session.scalar(
        select(Assignment.status).where(Assignment.item_id == item_id, Assignment.user_id == user.id)
    )
    if status == AssignmentStatus.skipped:
        return
    if status != AssignmentStatus.leased:
        raise Conflict(
            "this image was not given to you: take it from POST …/next, then skip it"
            if status is None
            else f"you have {status.value} this image, so there is nothing to skip"
        )
    set_assignment(db_session, item_id, user.id, AssignmentStatus.skipped, utcnow())
