"""Gold questions: (image, class) questions with known answers, mixed into annotators' work to measure
their accuracy."""

from collections.abc import Sequence

from sqlalchemy import Row, select
from sqlalchemy.orm import Session
from sqlalchemy.orm.attributes import flag_modified

from app.competitions.models import Competition
from app.db.base import utcnow
from app.errors import InvalidInput
from app.images.models import Image
from app.images.service import image_id_in_competition
from app.labelling.items import lock_item, refresh_needed
from app.labelling.models import Question
from app.labelling.subsets import ask
from app.labelling.types import LabellingSettings

GOLD_SPREAD = 2**31 - 1
"""Queue position given to an image first asked as gold: last (an image keeps its lowest position)."""


def add_gold_questions(
    *,
    db_session: Session,
    competition: Competition,
    image_sha256: str,
    answers: Sequence[tuple[int, bool]],
) -> list[Question]:
    """Make (image, class) gold questions with known answers, which are also their outcomes.

    The outcome is always written, changed or not, so that the competition's data version moves (its trigger
    fires on an UPDATE OF outcome): public reads hide gold images (app.labelling.results.image_withheld).

    A gold image must show at least two questions, as every image does (one pair asks two classes), or
    annotators could tell it apart: give two classes, or one on an image a pair already asks about.
    """
    classes = [class_index for class_index, _ in answers]
    for class_index in classes:
        if not 0 <= class_index < len(competition.class_keys):
            raise InvalidInput(f"class_index must be between 0 and {len(competition.class_keys) - 1}")
    if len(set(classes)) != len(classes):
        raise InvalidInput("each class may be given once")
    image_id = image_id_in_competition(db_session=db_session, competition=competition, sha256=image_sha256)
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
    settings = LabellingSettings.of(competition)
    ask(db_session, settings, {image_id: (GOLD_SPREAD, classes)})
    item = lock_item(db_session, settings, image_id)
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
        flag_modified(question, "outcome")  # named in the UPDATE even when unchanged: see below
        question.decided_at = utcnow()
        questions.append(question)
    refresh_needed(db_session, settings, [item])
    return questions


def gold_questions(*, db_session: Session, competition: Competition) -> Sequence[Row[Question, str]]:
    """Every gold question of the competition (.Question) with its image's hash (.sha256), oldest first."""
    return db_session.execute(
        select(Question, Image.sha256)
        .join(Image, Image.id == Question.image_id)
        .where(Question.competition_id == competition.id, Question.gold_answer.is_not(None))
        .order_by(Question.id)
    ).all()
