"""The annotator's pages: one image at a time, answered from the keyboard or with big buttons, and the
competition's guidelines."""

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, RedirectResponse

from app.competitions.members import MEMBERS_ONLY, may_label
from app.competitions.service import class_definitions
from app.db.session import SessionDep
from app.errors import Forbidden
from app.labelling.quality import paused_message, paused_reason
from app.users.auth import ANNOTATOR_ROLES, OptionalUser, page_user
from app.web.dependencies import CompetitionDep
from app.web.templating import render

router = APIRouter(include_in_schema=False)


@router.get("/competitions/{competition_id}/label", response_class=HTMLResponse)
def label_page(request: Request, db_session: SessionDep, user: OptionalUser, competition: CompetitionDep):
    """The labelling page (or, when quality control paused the annotator here, why); signed-out visitors
    are sent to sign in and come back here, and annotators who are not members of a members-only
    competition are refused (403)."""
    annotator = page_user(request, user, *ANNOTATOR_ROLES)
    if isinstance(annotator, RedirectResponse):
        return annotator
    if not may_label(db_session=db_session, competition=competition, user=annotator):
        raise Forbidden(MEMBERS_ONLY)
    reason = paused_reason(db_session=db_session, competition_id=competition.id, user_id=annotator.id)
    paused = None if reason is None else paused_message(reason)
    return render(request, "label.html", user=annotator, competition=competition, paused=paused)


@router.get("/competitions/{competition_id}/guidelines", response_class=HTMLResponse)
def guidelines_page(request: Request, user: OptionalUser, competition: CompetitionDep):
    """How to answer: the general rules, the competition's own guidelines and what each class means."""
    classes = zip(competition.class_names, class_definitions(competition), strict=True)
    return render(
        request,
        "guidelines.html",
        user=user,
        competition=competition,
        paragraphs=[p.strip() for p in competition.guidelines.split("\n\n") if p.strip()],
        classes=sorted(classes, key=lambda named: str(named[0]).lower()),
    )
