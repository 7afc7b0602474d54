"""The statement of the quality checks run on each submission (app.labelling.quality), built once at import
like the other hot statements (app.labelling.statements)."""

from sqlalchemy import bindparam, func, literal_column, or_, select

from app.db.statements import HotStatement
from app.labelling import checks
from app.labelling.models import GoldAnswer, QualityFlag, QualityFlagKind, Question, Vote

_questions = Question.__table__
_votes = Vote.__table__
_gold_answers = GoldAnswer.__table__
_quality_flags = QualityFlag.__table__


def _last_flag(kind: QualityFlagKind):
    """When the annotator was last flagged for this kind in the competition (NULL if never): a scalar."""
    return (
        select(func.max(_quality_flags.c.created_at))
        .where(
            _quality_flags.c.competition_id == bindparam("competition_id"),
            _quality_flags.c.user_id == bindparam("user_id"),
            _quality_flags.c.kind == literal_column(f"'{kind.value}'"),
        )
        .scalar_subquery()
    )


_last_gold_flag = _last_flag(QualityFlagKind.gold)
_gold_questions = _questions.alias("gold_questions")


def _gold_answers_since_last_flag(*conditions):
    """How many of the annotator's gold answers in the competition since their last gold flag meet the
    conditions (a scalar)."""
    return (
        select(func.count())
        .select_from(_gold_answers.join(_gold_questions, _gold_questions.c.id == _gold_answers.c.question_id))
        .where(
            _gold_questions.c.competition_id == bindparam("competition_id"),
            _gold_answers.c.user_id == bindparam("user_id"),
            or_(_last_gold_flag.is_(None), _gold_answers.c.created_at > _last_gold_flag),
            *conditions,
        )
        .scalar_subquery()
    )


QUALITY_WINDOW = HotStatement(
    select(
        _votes.c.answer,
        _votes.c.seconds,
        _votes.c.created_at,
        _gold_answers_since_last_flag().label("gold_answered"),
        _gold_answers_since_last_flag(_gold_answers.c.answer == _gold_questions.c.gold_answer).label(
            "gold_correct"
        ),
        _last_flag(QualityFlagKind.fast).label("fast_flagged_at"),
        _last_flag(QualityFlagKind.run).label("run_flagged_at"),
    )
    .join(_questions, _questions.c.id == _votes.c.question_id)
    .where(
        _votes.c.user_id == bindparam("user_id"), _questions.c.competition_id == bindparam("competition_id")
    )
    .order_by(_votes.c.created_at.desc())
    .limit(literal_column(str(checks.WINDOW)))
)
"""The annotator's latest votes in the competition, newest first (read backwards along ix_votes_user_created),
each row with their gold answers and correct ones since their last gold flag and when they were last flagged
for speed and for a run: all that the quality checks of one submission read, in one statement."""
