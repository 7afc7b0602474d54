"""The competition a path names, as a dependency of the web edges."""

from typing import Annotated

from fastapi import Depends

from app.competitions.models import Competition
from app.competitions.service import get_competition
from app.db.session import SessionDep


def path_competition(competition_id: int, db_session: SessionDep) -> Competition:
    """The competition the path's {competition_id} names, or 404."""
    return get_competition(db_session=db_session, competition_id=competition_id)


CompetitionDep = Annotated[Competition, Depends(path_competition)]
"""Declare it after the caller's dependency (AdminUser …), so that 401 and 403 come before 404."""
