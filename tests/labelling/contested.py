"""A competition with contested labels, made through the labelling services: five annotators label one
pair's three selected images (k = 3, two in reserve) so that the first image's label_a question is decided
3–2 (a split decision), four of them flag the second as too difficult (discarded; the first reserve takes
its place) and one flags the third as not a natural photo."""

from dataclasses import dataclass

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.competitions.models import Competition
from app.images.models import Image
from app.images.store import ImageStore
from app.labelling.annotating.answers import flag_image, submit_answers
from app.labelling.annotating.queue import next_item
from app.labelling.models import FlagReason, PairSubset, Question
from app.labelling.subsets import store_pair_subset
from app.labelling.types import Answer
from app.users.models import Role, User
from tests.conftest import make_user
from tests.labelling.factories import add_classifiers, add_images, entries

LABELS = [(1, 2), (3, 4), (5, 6), (7, 8), (9, 10)]
"""(label_a, label_b) of the pair's five images: three selected, two in reserve."""
PANEL = 5


@dataclass(frozen=True)
class Contested:
    """The contested competition: its pair, images (by position) and their hashes, and the annotators."""

    competition: Competition
    subset: PairSubset
    image_ids: list[int]
    hashes: list[str]
    annotators: list[User]

    def question(self, db_session: Session, position: int, label: int) -> Question:
        """The question on the image at this position about this class."""
        return db_session.scalars(
            select(Question)
            .where(Question.image_id == self.image_ids[position], Question.class_index == label)
            .execution_options(populate_existing=True)
        ).one()


def act(annotator: int, position: int, labels: tuple[int, int]) -> FlagReason | dict[int, bool]:
    """What annotator n does with the image at a position: flag it, or answer its questions."""
    if position == 1 and annotator <= 3:
        return FlagReason.too_difficult
    if position == 2 and annotator == 0:
        return FlagReason.not_natural
    if position == 0:
        return {labels[0]: annotator >= 2, labels[1]: False}  # no, no, yes, yes, yes: 3–2
    return {labels[0]: True, labels[1]: False}


def contested_competition(db_session: Session, competition: Competition, store: ImageStore | None = None):
    """Build the contested competition (module docstring) and commit it."""
    competition.k, competition.panel_size = 3, PANEL
    a, b = add_classifiers(db_session, competition, 2)
    image_ids = add_images(db_session, competition, len(LABELS), store, seed=500)
    subset = store_pair_subset(
        db_session=db_session,
        competition=competition,
        classifier_a_id=a,
        classifier_b_id=b,
        entries=entries(image_ids, LABELS),
    )
    annotators = [make_user(db_session, f"contested-{n}", Role.annotator) for n in range(PANEL)]
    db_session.commit()
    position_of = {image_id: position for position, image_id in enumerate(image_ids)}
    for n, user in enumerate(annotators):
        while (item := next_item(db_session=db_session, competition=competition, user=user).item) is not None:
            image_id = db_session.scalar(select(Image.id).where(Image.sha256 == item.image_sha256))
            position = position_of[image_id]
            action = act(n, position, LABELS[position])
            if isinstance(action, FlagReason):
                flag_image(
                    db_session=db_session,
                    competition=competition,
                    user=user,
                    item_id=item.item_id,
                    reason=action,
                )
            else:
                answers = [Answer(q.question_id, action[q.class_index], 2.0) for q in item.questions]
                submit_answers(db_session=db_session, competition=competition, user=user, answers=answers)
            db_session.commit()
    hashes = dict(db_session.execute(select(Image.id, Image.sha256).where(Image.id.in_(image_ids))).all())
    return Contested(competition, subset, image_ids, [hashes[image_id] for image_id in image_ids], annotators)
