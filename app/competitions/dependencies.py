"""The competition a path names, as a dependency of the web edges: any, or one the caller may see."""

from typing import Annotated

from fastapi import Depends

from app.competitions.members import check_visible
from app.competitions.models import Competition
from app.competitions.service import get_competition
from app.db.session import SessionDep
from app.users.auth import OptionalUser


def path_competition(competition_id: int, db_session: SessionDep) -> Competition:
    """The competition the path's {competition_id} names, or 404."""
    return get_competition(db_session=db_session, competition_id=competition_id)


CompetitionDep = Annotated[Competition, Depends(path_competition)]
"""Declare it after the caller's dependency (AdminUser …), so that 401 and 403 come before 404."""


def visible_competition(competition_id: int, db_session: SessionDep, user: OptionalUser) -> Competition:
    """The competition the path names if the caller may see it (members.check_visible): 404, 401 or 403."""
    competition = get_competition(db_session=db_session, competition_id=competition_id)
    return check_visible(db_session=db_session, competition=competition, user=user)


VisibleCompetitionDep = Annotated[Competition, Depends(visible_competition)]
"""For public reads: an open competition, or a members-only one read by an admin or one of its members."""
