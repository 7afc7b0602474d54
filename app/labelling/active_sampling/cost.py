"""What labelling cost under active sampling (issue 24; docs/architecture.md, Active sampling): the votes
spent on regular questions, and the paper's full design's estimate beside them."""

from dataclasses import dataclass

from sqlalchemy import and_, func, select
from sqlalchemy.orm import Session

from app.labelling import rules
from app.labelling.models import LabelItem, Question, Vote

FULL_DESIGN = (
    "every selected image's questions each labelled to a strict majority of the panel: the fewest votes the "
    "paper's protocol spends (disagreements cost it more), so the share of it shown is an upper bound"
)
"""How the full design's votes are estimated (shown beside them)."""


@dataclass(frozen=True)
class ActiveCost:
    """Votes spent on regular questions, and the full design's (FULL_DESIGN)."""

    votes_used: int
    full_design_votes: int


def active_cost(db_session: Session, competition_id: int, panel_size: int) -> ActiveCost:
    """Votes stored on the competition's regular questions (every annotator's: what labelling cost), and
    FULL_DESIGN's estimate: its regular questions on images not discarded × a strict majority of the panel."""
    votes_used = db_session.scalar(
        select(func.count())
        .select_from(Vote)
        .join(Question, Question.id == Vote.question_id)
        .where(Vote.competition_id == competition_id, Question.gold_answer.is_(None))
    )
    questions = db_session.scalar(
        select(func.count())
        .select_from(Question)
        .join(
            LabelItem,
            and_(LabelItem.competition_id == competition_id, LabelItem.image_id == Question.image_id),
        )
        .where(Question.competition_id == competition_id, Question.gold_answer.is_(None))
        .where(~LabelItem.discarded)
    )
    return ActiveCost(int(votes_used or 0), int(questions or 0) * rules.majority(panel_size))
