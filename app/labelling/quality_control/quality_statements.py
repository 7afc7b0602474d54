"""The statements of the quality checks run on each submission (app.labelling.quality_control.quality), built
once at import like the other hot statements (app.labelling.statements)."""

from sqlalchemy import bindparam, func, literal_column, or_, select

from app.db.statements import HotStatement
from app.labelling.models import GoldAnswer, QualityFlag, QualityFlagKind, Question, Vote
from app.labelling.quality_control import checks

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


def _since_last_flag(kind: QualityFlagKind):
    """Whether a vote came after the annotator's last flag of this kind in the competition (true if none)."""
    last = _last_flag(kind)
    return or_(last.is_(None), _votes.c.created_at > last)


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
        _since_last_flag(QualityFlagKind.run).label("since_run_flag"),
        _since_last_flag(QualityFlagKind.fast).label("since_fast_flag"),
    )
    .where(_votes.c.user_id == bindparam("user_id"), _votes.c.competition_id == bindparam("competition_id"))
    .order_by(_votes.c.created_at.desc())
    .limit(literal_column(str(checks.WINDOW)))
)
"""The annotator's latest votes in the competition, newest first (one backward range of
ix_votes_user_competition_created), as checks.RecentVote: each answer and its seconds, and whether it came
after their last run flag and after their last speed flag. All that the speed and run checks of one
submission read, in one statement; booleans rather than timestamps, which cost more to read back than the
query does to run."""

GOLD_SINCE_LAST_FLAG = HotStatement(
    select(
        _gold_answers_since_last_flag().label("answered"),
        _gold_answers_since_last_flag(_gold_answers.c.answer == _gold_questions.c.gold_answer).label(
            "correct"
        ),
    )
)
"""The annotator's gold answers in the competition since their last gold flag, and the correct ones among
them: what the gold check reads, on a submission that answered a gold question."""
