"""Dependencies the web edges share: the application's settings and the competition a path names."""

from typing import Annotated

from fastapi import Depends, Request

from app.competitions.members import check_visible
from app.competitions.models import Competition
from app.competitions.service import get_competition
from app.db.session import SessionDep
from app.settings import Settings
from app.users.auth import OptionalUser


async def app_settings(request: Request) -> Settings:
    """The settings the application was made with (async: it reads no database, so it needs no thread)."""
    return request.app.state.settings


SettingsDep = Annotated[Settings, Depends(app_settings)]


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
