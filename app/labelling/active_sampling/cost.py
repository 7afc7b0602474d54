"""What labelling cost under active sampling (issue 24; docs/architecture.md, Active sampling): the votes
spent on regular questions, and the paper's full design's estimate beside them."""

from dataclasses import dataclass

from sqlalchemy import Select, and_, func, select
from sqlalchemy.orm import Session

from app.labelling import rules
from app.labelling.active_sampling.reads import Pace
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


QUESTIONS_AT_ONCE = 5_000
"""Question ids one pair of counting statements of a paced active_cost covers (a range of the votes'
(question_id, user_id) index hashed against the same range of questions): 3-4 ms each at 3 votes a question,
where counting every vote at once took 14-22 ms at the start of a 100,000-question benchmark run, 44 ms on
both cores at 300,000 votes, growing with them."""


def active_cost(db_session: Session, competition_id: int, panel_size: int, pace: Pace) -> ActiveCost:
    """Votes stored on the competition's regular questions (every annotator's: what labelling cost), and
    FULL_DESIGN's estimate: its regular questions on images not discarded × a strict majority of the panel;
    counted QUESTIONS_AT_ONCE question ids at a time, pacing after each (unpaced: all at once)."""
    first, last = db_session.execute(
        select(func.min(Question.id), func.max(Question.id)).where(Question.competition_id == competition_id)
    ).one()
    votes_used = questions = 0
    if first is not None:
        at_once = QUESTIONS_AT_ONCE if pace.factor else last - first + 1
        for low in range(first, last + 1, at_once):
            ids = (low, low + at_once - 1)
            in_range = Question.id.between(*ids)
            votes_used += (
                db_session.scalar(_votes_used(competition_id).where(Vote.question_id.between(*ids), in_range))
                or 0
            )
            questions += db_session.scalar(_regular_questions(competition_id).where(in_range)) or 0
            pace.pause()
    return ActiveCost(votes_used, questions * rules.majority(panel_size))


def _votes_used(competition_id: int) -> Select:
    """SELECT the count of votes on the competition's regular questions."""
    return (
        select(func.count())
        .select_from(Vote)
        .join(Question, Question.id == Vote.question_id)
        .where(Vote.competition_id == competition_id, Question.gold_answer.is_(None))
    )


def _regular_questions(competition_id: int) -> Select:
    """SELECT the count of the competition's regular questions on images not discarded."""
    return (
        select(func.count())
        .select_from(Question)
        .join(
            LabelItem,
            and_(LabelItem.competition_id == competition_id, LabelItem.image_id == Question.image_id),
        )
        .where(Question.competition_id == competition_id, Question.gold_answer.is_(None))
        .where(~LabelItem.discarded)
    )
