"""The annotator's page: one image at a time, answered from the keyboard or with big buttons."""

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, RedirectResponse

from app.competitions.service import get_competition
from app.db import SessionDep
from app.users.auth import ANNOTATOR_ROLES, OptionalUser, page_user
from app.web.templating import render

router = APIRouter(include_in_schema=False)


@router.get("/competitions/{competition_id}/label", response_class=HTMLResponse)
def label_page(competition_id: int, request: Request, db_session: SessionDep, user: OptionalUser):
    """The labelling page; signed-out visitors are sent to sign in and come back here."""
    annotator = page_user(request, user, *ANNOTATOR_ROLES)
    if isinstance(annotator, RedirectResponse):
        return annotator
    competition = get_competition(db_session=db_session, competition_id=competition_id)
    return render(request, "label.html", user=annotator, competition=competition)
