"""The annotator's pages: one image at a time, answered from the keyboard or with big buttons, and the
competition's guidelines."""

from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, RedirectResponse
from sqlalchemy.orm import Session

from app.competitions.dependencies import CompetitionDep, VisibleCompetitionDep
from app.competitions.members import MEMBERS_ONLY, competitions_of, may_label
from app.competitions.models import Competition
from app.competitions.service import class_definitions
from app.competitions.translations import competition_translations
from app.db.session import SessionDep
from app.errors import Forbidden
from app.i18n import SOURCE_LOCALE
from app.labelling.quality_control.annotators import images_left
from app.labelling.quality_control.quality import paused_message, paused_reason
from app.labelling.rules import too_difficult
from app.users.auth import ANNOTATOR_ROLES, OptionalUser, page_user
from app.users.models import User
from app.web.templating import page_locale, render

router = APIRouter(include_in_schema=False)


@router.get("/competitions/{competition_id}/label", response_class=HTMLResponse)
def label_page(request: Request, db_session: SessionDep, user: OptionalUser, competition: CompetitionDep):
    """The labelling page (or, when quality control paused the annotator here, why), with a way on to the
    other competitions with work left for them; signed-out visitors are sent to sign in and come back here,
    and annotators who are not members of a members-only competition are refused (403)."""
    annotator = page_user(request, user, *ANNOTATOR_ROLES)
    if isinstance(annotator, RedirectResponse):
        return annotator
    return render_label_page(request, db_session, annotator, competition)


def render_label_page(
    request: Request,
    db_session: Session,
    annotator: User,
    competition: Competition,
    template: str = "label.html",
    **page: Any,
) -> HTMLResponse:
    """The labelling page of the competition for the annotator (403 where they may not label), rendered
    from `template` (label.html, or one extending it: a crowd study's, app/studies/pages.py) with `page`."""
    if not may_label(db_session=db_session, competition=competition, user=annotator):
        raise Forbidden(MEMBERS_ONLY)
    reason = paused_reason(db_session=db_session, competition_id=competition.id, user_id=annotator.id)
    paused = None if reason is None else paused_message(reason, page_locale(request, annotator))
    return render(
        request,
        template,
        user=annotator,
        competition=competition,
        paused=paused,
        flag_decides_alone=too_difficult(1, competition.panel_size),
        elsewhere=other_work(db_session, annotator, competition.id),
        **page,
    )


def other_work(db_session: Session, annotator: User, competition_id: int) -> list[tuple[Competition, int]]:
    """The other competitions the annotator may label in with images left for them, and how many."""
    left = images_left(db_session=db_session, user_id=annotator.id)
    return [
        (competition, left[competition.id])
        for competition in competitions_of(db_session=db_session, user=annotator)
        if competition.id != competition_id and left.get(competition.id)
    ]


@router.get("/competitions/{competition_id}/guidelines", response_class=HTMLResponse)
def guidelines_page(
    request: Request, db_session: SessionDep, user: OptionalUser, competition: VisibleCompetitionDep
):
    """How to answer: the general rules, the competition's own guidelines and what each class means (a
    members-only competition's to its members and admins), in the reader's language where the class has a
    name in it, with how many are in English instead."""
    english = list(zip(competition.class_names, class_definitions(competition), strict=True))
    translated = competition_translations(db_session=db_session, competition=competition).get(
        page_locale(request, user), (None,) * len(english)
    )
    classes = [
        (str(name), definition) if text is None else (text[0], text[1] or definition)
        for (name, definition), text in zip(english, translated, strict=True)
    ]
    return render(
        request,
        "guidelines.html",
        user=user,
        competition=competition,
        paragraphs=[p.strip() for p in competition.guidelines.split("\n\n") if p.strip()],
        classes=sorted(classes, key=lambda named: named[0].casefold()),
        fallback=translated.count(None) if page_locale(request, user) != SOURCE_LOCALE else 0,
    )
