"""A crowd study's pages for its participants, in their language: the link they arrive through (consent, or
welcome back), the study's labelling page, and the page that gives their completion code and sends them
back to the platform; a refusal says why, politely.

The link's address holds the study's secret and the participant's platform ids: its pages send no Referer
(a proxy's log keeps what it is sent), and `mad serve` logs it redacted (app/serving.py).
"""

from fastapi import APIRouter, Depends, Request
from fastapi.responses import HTMLResponse, RedirectResponse
from sqlalchemy.orm import Session

from app.competitions.models import Competition
from app.db.base import utcnow
from app.db.session import SessionDep
from app.i18n import N_
from app.labelling.annotating.pages import render_label_page
from app.studies import arrivals, progress, service
from app.studies.arrivals import ArrivalRefused
from app.studies.enums import Outcome
from app.studies.models import Study, StudyParticipant
from app.users.auth import OptionalUser, check_csrf, start_session
from app.users.models import User
from app.web.dependencies import SettingsDep
from app.web.templating import render, translate

router = APIRouter(include_in_schema=False)

REFUSAL_TITLES = {
    arrivals.UNKNOWN_LINK: N_("This link does not work"),
    arrivals.MISSING_ID: N_("This link is incomplete"),
    arrivals.CLOSED: N_("This study is closed"),
    arrivals.FULL: N_("This study is full"),
    arrivals.BUSY: N_("Please wait a moment"),
    arrivals.DEACTIVATED: N_("Your account is deactivated"),
    arrivals.OTHER_STUDY: N_("Another study first"),
}
SESSION_ENDED = N_(
    "Your session here has ended: open the study again through its link on the site that sent you (your "
    "answers are kept)."
)
SESSION_ENDED_TITLE = N_("Open the study again")


@router.get("/join/{token}", response_class=HTMLResponse)
def arrive(request: Request, token: str, db_session: SessionDep):
    """The study's consent text with a button to agree (a returning participant: how far they are, and a
    button to go on; one who has left: their completion code); a refusal page saying why otherwise (404 for
    a wrong link, 422 for missing or malformed ids, 409 for a closed or full study)."""
    try:
        study = arrivals.study_of_link(db_session=db_session, token=token)
        arrival = arrivals.read_arrival(study, request.query_params)
        participant = arrivals.returning(db_session=db_session, study=study, arrival=arrival)
        if participant is not None and participant.outcome is not None:
            return _without_referrer(_done_page(request, study, participant.outcome, None))
        if participant is None:
            per_minute = request.app.state.settings.study_arrivals_per_minute
            arrivals.check_room(db_session=db_session, study=study, now=utcnow(), per_minute=per_minute)
    except ArrivalRefused as refusal:
        return _refusal(request, refusal)
    images = _images(db_session, study, participant)
    page = render(
        request,
        "study_consent.html",
        study=study,
        competition=db_session.get_one(Competition, study.competition_id),
        paragraphs=[p.strip() for p in study.consent_text.split("\n\n") if p.strip()],
        returning=participant is not None,
        images=images,
        platform=arrivals.platform_name(study),
    )
    return _without_referrer(page)


def _images(db_session: Session, study: Study, participant: StudyParticipant | None) -> int:
    """The images a returning participant has answered in the study (0 for a new one)."""
    if participant is None:
        return 0
    work = progress.participants_work(db_session, study, [participant.id])
    return work.get(participant.id, progress.Work()).images


@router.post("/join/{token}", response_class=HTMLResponse, dependencies=[Depends(check_csrf)])
def consent(request: Request, token: str, db_session: SessionDep, settings: SettingsDep):
    """The participant agrees (or goes on): their account is made or found, this browser is signed in to it,
    and they go to the study's labelling page (or, once they have left, to their completion code)."""
    try:
        study = arrivals.study_of_link(db_session=db_session, token=token)
        arrival = arrivals.read_arrival(study, request.query_params)
        participant, user = arrivals.admit(
            db_session=db_session,
            token=token,
            arrival=arrival,
            now=utcnow(),
            per_minute=settings.study_arrivals_per_minute,
        )
    except ArrivalRefused as refusal:
        db_session.rollback()  # nothing of a refused admission stays
        return _refusal(request, refusal)
    start_session(request, user.id, user.session_generation)
    where = "done" if participant.outcome is not None else "label"
    return RedirectResponse(f"/studies/{participant.study_id}/{where}", status_code=303)


@router.get("/studies/{study_id}/label", response_class=HTMLResponse)
def study_label_page(request: Request, study_id: int, db_session: SessionDep, user: OptionalUser):
    """The competition's labelling page for the study's participant, which leaves the study when its work
    is done (static/study.js); their completion code once they have left; 401 when their session has ended,
    404 for anyone who takes no part in the study."""
    if user is None:
        return _session_ended(request)
    study = service.get_study(db_session=db_session, study_id=study_id)
    state = progress.participation(db_session=db_session, study=study, user=user, now=utcnow())
    if state.participant.outcome is not None:
        return RedirectResponse(f"/studies/{study_id}/done", status_code=303)
    return render_label_page(
        request,
        db_session,
        user,
        db_session.get_one(Competition, study.competition_id),
        "study_label.html",
        study=study,
        images=state.work.images,
        deadline=progress.deadline(study, state.participant),
        platform=arrivals.platform_name(study),
    )


@router.get("/studies/{study_id}/done", response_class=HTMLResponse)
def study_done_page(request: Request, study_id: int, db_session: SessionDep, user: OptionalUser):
    """The participant's completion code with a button back to the platform, which the page also follows
    after a few seconds; the labelling page while they have not left; 401 and 404 as the labelling page."""
    if user is None:
        return _session_ended(request)
    study = service.get_study(db_session=db_session, study_id=study_id)
    state = progress.participation(db_session=db_session, study=study, user=user, now=utcnow())
    if state.participant.outcome is None:
        return RedirectResponse(f"/studies/{study_id}/label", status_code=303)
    return _done_page(request, study, state.participant.outcome, user)


def _done_page(request: Request, study: Study, outcome: Outcome, user: User | None) -> HTMLResponse:
    """The completion page of an outcome: its code, and the platform's completion URL carrying it."""
    code, url = service.completion(study, outcome)
    return render(
        request,
        "study_done.html",
        user=user,
        outcome=outcome.value,
        code=code,
        completion_url=url,
        platform=arrivals.platform_name(study),
    )


def _refusal(request: Request, refusal: ArrivalRefused) -> HTMLResponse:
    """The page saying, in the participant's language, why the link does not admit them."""
    page = render(
        request,
        "study_refused.html",
        status_code=refusal.status_code,
        title=translate(request, REFUSAL_TITLES[refusal.template]),
        message=translate(request, refusal.template, **refusal.values),
    )
    if "seconds" in refusal.values:
        page.headers["Retry-After"] = str(refusal.values["seconds"])
    return _without_referrer(page)


def _session_ended(request: Request) -> HTMLResponse:
    """The page of a participant whose session has ended (401): back through the study's link."""
    return render(
        request,
        "study_refused.html",
        status_code=401,
        title=translate(request, SESSION_ENDED_TITLE),
        message=translate(request, SESSION_ENDED),
    )


def _without_referrer(page: HTMLResponse) -> HTMLResponse:
    """The page, its requests sending no Referer: its address holds the study's secret and platform ids."""
    page.headers["Referrer-Policy"] = "no-referrer"
    return page
