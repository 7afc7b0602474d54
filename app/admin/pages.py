"""Admin pages: competitions, images, classifiers (Algorithm 2 runs on its own), job progress, annotators,
gold questions and quality control.

The pages only read; their forms call the REST API from static/forms.js with the page's CSRF token, so
every admin action has one implementation (and one set of checks) behind the API.
"""

from datetime import date
from urllib.parse import urlencode

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, RedirectResponse
from sqlalchemy import select
from sqlalchemy.orm import Session

from app.classifiers.enums import ClassifierSource
from app.classifiers.service import list_classifiers
from app.competitions import service as competitions_service
from app.competitions.dependencies import CompetitionDep
from app.competitions.members import list_members
from app.competitions.models import Competition
from app.competitions.translations import competition_translations, coverage
from app.core.taxonomy_sources import BUILTIN_TAXONOMIES
from app.db.base import utcnow
from app.db.session import SessionDep
from app.i18n import language_name
from app.images.models import CompetitionImage, Image
from app.images.service import image_counts
from app.jobs import workers
from app.jobs.progress import competition_progress
from app.jobs.selections import survivors_line
from app.labelling.models import QualityFlagKind
from app.labelling.quality_control import adjudication
from app.labelling.quality_control.annotators import annotator_stats
from app.labelling.quality_control.gold import gold_questions
from app.labelling.quality_control.quality import list_flags
from app.labelling.quality_control.work_records import ACTIVE_SECONDS_CAP, span, work_records
from app.labelling.types import LabellingSettings
from app.leaderboard import snapshots
from app.leaderboard.agreement import competition_quality
from app.leaderboard.standings import by_rank, compute_leaderboard
from app.users import invitations
from app.users import service as users_service
from app.users.auth import ADMIN_ROLES, OptionalUser, page_user
from app.users.models import Role
from app.web.templating import render

router = APIRouter(include_in_schema=False)

EXCLUDED_SHOWN = 200
RECENT_IMAGES_SHOWN = 20


@router.get("/admin", response_class=HTMLResponse)
def admin_home(request: Request, db_session: SessionDep, user: OptionalUser):
    """Competitions (and a form to create one), accounts (create, pause, exclude votes), their API tokens
    (issue, revoke), invitations, and a warning when no worker has been seen for a job lease."""
    admin = page_user(request, user, *ADMIN_ROLES)
    if isinstance(admin, RedirectResponse):
        return admin
    presence = workers.presence(
        db_session=db_session,
        now=utcnow(),
        lost_after_s=request.app.state.settings.job_lease_s,
        jobs_waiting=workers.queued_count(db_session=db_session),
    )
    return render(
        request,
        "admin.html",
        user=admin,
        competitions=competitions_service.list_competitions(db_session=db_session),
        image_counts=image_counts(db_session=db_session),
        users=users_service.list_users(db_session=db_session),
        tokens=users_service.list_api_tokens(db_session=db_session),
        invitations=[
            (invitation, username, invitations.invitation_status(invitation))
            for invitation, username in invitations.list_invitations(db_session=db_session)
        ],
        roles=[role.value for role in Role],
        taxonomies=[*BUILTIN_TAXONOMIES, "wordnet", "custom"],
        worker_warning=presence.warning,
    )


@router.get("/admin/competitions/{competition_id}", response_class=HTMLResponse)
def admin_competition(
    request: Request, db_session: SessionDep, user: OptionalUser, competition: CompetitionDep
):
    """A competition: progress, classifiers (add, retire), images (upload, exclude), who may label
    (members), annotators, snapshots, and the sampling (with the active policy's last failed rerun, as this
    server process saw it)."""
    admin = page_user(request, user, *ADMIN_ROLES)
    if isinstance(admin, RedirectResponse):
        return admin
    excluded = db_session.execute(
        select(Image.sha256, CompetitionImage.ordinal, CompetitionImage.excluded_reason)
        .join(CompetitionImage, CompetitionImage.image_id == Image.id)
        .where(CompetitionImage.competition_id == competition.id, CompetitionImage.excluded)
        .order_by(CompetitionImage.ordinal)
        .limit(EXCLUDED_SHOWN)
    ).all()
    recent = db_session.execute(
        select(Image, CompetitionImage.ordinal)
        .join(CompetitionImage, CompetitionImage.image_id == Image.id)
        .where(CompetitionImage.competition_id == competition.id)
        .order_by(CompetitionImage.ordinal.desc())
        .limit(RECENT_IMAGES_SHOWN)
    ).all()
    members = list_members(db_session=db_session, competition=competition)
    member_ids = {member.user_id for member in members}
    progress = competition_progress(
        db_session=db_session,
        competition_id=competition.id,
        lost_after_s=request.app.state.settings.job_lease_s,
    )
    board = compute_leaderboard(db_session=db_session, competition=competition)
    return render(
        request,
        "admin_competition.html",
        members=members,
        candidates=[
            account
            for account in users_service.list_users(db_session=db_session)
            if account.role == Role.annotator and account.is_active and account.id not in member_ids
        ],
        user=admin,
        competition=competition,
        progress=progress,
        pair_rows=[(pair, survivors_line(pair)) for pair in progress["pairs"]],
        classifiers=list_classifiers(db_session=db_session, competition_id=competition.id),
        sources=[source.value for source in ClassifierSource],
        board=board,
        standings=by_rank(board),
        annotators=annotator_stats(db_session=db_session, competition=LabellingSettings.of(competition)),
        excluded=excluded,
        recent_images=recent,
        coverage=language_coverage(db_session, competition),
        policy_failure=request.app.state.policy_runner.failures.get(competition.id),
        snapshots=[
            snapshots.snapshot_read(s)
            for s in snapshots.list_snapshots(db_session=db_session, competition_id=competition.id)
        ],
    )


@router.get("/admin/competitions/{competition_id}/gold", response_class=HTMLResponse)
def admin_gold(request: Request, db_session: SessionDep, user: OptionalUser, competition: CompetitionDep):
    """Gold questions: those with known answers, by image, and a form to add more."""
    admin = page_user(request, user, *ADMIN_ROLES)
    if isinstance(admin, RedirectResponse):
        return admin
    by_image: dict[str, list[tuple[str, bool]]] = {}
    questions = gold_questions(db_session=db_session, competition=competition)
    for found in sorted(questions, key=lambda found: found.Question.class_index):
        question = found.Question
        name = str(competition.class_names[question.class_index])
        by_image.setdefault(found.sha256, []).append((name, bool(question.gold_answer)))
    return render(
        request,
        "admin_gold.html",
        user=admin,
        competition=competition,
        gold=by_image,
        classes=list(enumerate(competition.class_names)),
    )


FLAG_KINDS = {
    QualityFlagKind.gold: "gold accuracy (paused)",
    QualityFlagKind.fast: "fast answers",
    QualityFlagKind.run: "run of one answer",
}


@router.get("/admin/competitions/{competition_id}/quality", response_class=HTMLResponse)
def admin_quality(request: Request, db_session: SessionDep, user: OptionalUser, competition: CompetitionDep):
    """Quality control (its settings, and the flags on annotators' answers with a decision on each), and the
    agreement and reliability of the votes with the ranking from Dawid–Skene labels."""
    admin = page_user(request, user, *ADMIN_ROLES)
    if isinstance(admin, RedirectResponse):
        return admin
    return render(
        request,
        "admin_quality.html",
        user=admin,
        competition=competition,
        flags=list_flags(db_session=db_session, competition=competition),
        kinds=FLAG_KINDS,
        quality=competition_quality(db_session=db_session, competition=competition),
    )


@router.get("/admin/competitions/{competition_id}/review", response_class=HTMLResponse)
def admin_review(request: Request, db_session: SessionDep, user: OptionalUser, competition: CompetitionDep):
    """Adjudication: the review queue, a verdict form on each entry, and the verdicts recorded."""
    admin = page_user(request, user, *ADMIN_ROLES)
    if isinstance(admin, RedirectResponse):
        return admin
    return render(
        request,
        "admin_review.html",
        user=admin,
        competition=competition,
        queue=adjudication.review_queue(db_session=db_session, competition=competition),
        verdicts=adjudication.adjudications(db_session=db_session, competition=competition),
    )


@router.get("/admin/work-records", response_class=HTMLResponse)
def admin_work_records(
    request: Request,
    db_session: SessionDep,
    user: OptionalUser,
    since: date | None = None,
    until: date | None = None,
    competition_id: int | None = None,
):
    """Annotators' work per day (answers, active time, gold accuracy) over a span of days, in one
    competition or all, with the same rows as CSV from the API."""
    admin = page_user(request, user, *ADMIN_ROLES)
    if isinstance(admin, RedirectResponse):
        return admin
    since, until = span(since, until)
    if competition_id is not None:
        competitions_service.get_competition(db_session=db_session, competition_id=competition_id)
    records = work_records(db_session=db_session, since=since, until=until, competition_id=competition_id)
    query = {"since": since, "until": until, "format": "csv"}
    if competition_id is not None:
        query["competition_id"] = competition_id
    return render(
        request,
        "admin_work_records.html",
        user=admin,
        records=records,
        since=since,
        until=until,
        competition_id=competition_id,
        competitions=competitions_service.list_competitions(db_session=db_session),
        cap=ACTIVE_SECONDS_CAP,
        csv_url="/api/v1/work-records?" + urlencode(query),
    )


def language_coverage(db_session: Session, competition: Competition) -> list[tuple[str, str, float]]:
    """(code, name, share of the classes named in it) for each language the pages come in."""
    given = competition_translations(db_session=db_session, competition=competition)
    shares = coverage(given, len(competition.class_keys))
    return [(code, language_name(code), share) for code, share in shares.items()]
