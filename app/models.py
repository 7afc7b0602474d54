"""Every table, imported in one place so Alembic and the tests see the whole schema."""

from app.classifiers.models import Classifier
from app.competitions.models import Competition, CompetitionMember, CompetitionVersion
from app.db.base import Base
from app.images.models import CompetitionImage, Image
from app.jobs.models import Job, WorkerSighting
from app.labelling.models import (
    Assignment,
    DifficultyFlag,
    LabelItem,
    PairImage,
    PairSubset,
    QualityFlag,
    Question,
    UndoDepth,
    Vote,
)
from app.leaderboard.models import LeaderboardSnapshot
from app.studies.models import CrowdIdentity, Study, StudyParticipant
from app.users.models import ApiToken, Invitation, User

__all__ = [
    "ApiToken",
    "Assignment",
    "Base",
    "Classifier",
    "Competition",
    "CrowdIdentity",
    "CompetitionVersion",
    "CompetitionImage",
    "CompetitionMember",
    "DifficultyFlag",
    "Image",
    "Invitation",
    "Job",
    "LabelItem",
    "LeaderboardSnapshot",
    "PairImage",
    "PairSubset",
    "QualityFlag",
    "Question",
    "Study",
    "StudyParticipant",
    "UndoDepth",
    "User",
    "Vote",
    "WorkerSighting",
]
