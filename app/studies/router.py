"""Crowd studies API: admins open, change, close and delete studies, give them new links, and read their
participants and bonus file; a participant reads their progress and leaves with their completion code."""

from typing import Annotated, Literal

from fastapi import APIRouter, Query, Request, Response, status
from sqlalchemy.orm import Session

from app.db.base import utcnow
from app.db.session import SessionDep
from app.studies import payments, progress, service
from app.studies.models import Study
from app.studies.schemas import (
    FinishRead,
    ParticipantRead,
    ParticipationRead,
    StudyCreate,
    StudyCreated,
    StudyLinkRead,
    StudyRead,
    StudyUpdate,
)
from app.users.auth import AdminUser, CurrentUser
from app.web.errors import error_responses

router = APIRouter(prefix="/api/v1/studies", tags=["studies"])


def study_read(db_session: Session, study: Study) -> StudyRead:
    """The API view of a study, with its participants counted by outcome."""
    count, outcomes = service.outcome_counts(db_session=db_session, study=study)
    return StudyRead.model_validate(
        {
            **{name: getattr(study, name) for name in StudyRead.model_fields if hasattr(study, name)},
            "codes": service.codes_of(study),
            "participants": count,
            "outcomes": outcomes,
        }
    )


@router.post(
    "",
    status_code=status.HTTP_201_CREATED,
    summary="Open a study of a competition on a crowd platform (admin)",
    responses=error_responses(401, 403, 404, 422),
)
def create_study(
    body: StudyCreate, request: Request, db_session: SessionDep, _admin: AdminUser
) -> StudyCreated:
    """A new open study and its secret link, shown this once (only a hash of its secret is kept): give it
    to the platform as the study's URL. Prolific's parameter names and completion URL are the defaults;
    another platform gives its own. 404 for an unknown competition; 422 for settings that do not fit
    (four different codes, max_images not below required_images, a completion URL with {code} on https)."""
    study, link = service.create_study(db_session=db_session, spec=body, base_url=str(request.base_url))
    return StudyCreated(**study_read(db_session, study).model_dump(), **vars(link))


@router.get("", summary="List studies (admin)", responses=error_responses(401, 403, 422))
def list_studies(
    db_session: SessionDep,
    _admin: AdminUser,
    competition_id: Annotated[int | None, Query(description="One competition's (default: all).")] = None,
) -> list[StudyRead]:
    """Every study, newest first, with its participants counted by outcome."""
    return [
        study_read(db_session, study)
        for study in service.list_studies(db_session=db_session, competition_id=competition_id)
    ]


@router.get("/{study_id}", summary="A study (admin)", responses=error_responses(401, 403, 404, 422))
def read_study(study_id: int, db_session: SessionDep, _admin: AdminUser) -> StudyRead:
    """The study's settings and its participants counted by outcome."""
    return study_read(db_session, service.get_study(db_session=db_session, study_id=study_id))


@router.patch(
    "/{study_id}",
    summary="Change, close or reopen a study (admin)",
    responses=error_responses(401, 403, 404, 422),
)
def update_study(study_id: int, body: StudyUpdate, db_session: SessionDep, _admin: AdminUser) -> StudyRead:
    """Change the fields given; `is_open: false` closes the study to new participants (those in it go on
    to the end), true reopens it. 422 when the result does not fit together."""
    study = service.get_study(db_session=db_session, study_id=study_id)
    return study_read(db_session, service.update_study(db_session=db_session, study=study, change=body))


@router.post(
    "/{study_id}/link",
    summary="Give a study a new secret link (admin)",
    responses=error_responses(401, 403, 404, 422),
)
def new_link(study_id: int, request: Request, db_session: SessionDep, _admin: AdminUser) -> StudyLinkRead:
    """A new link, shown this once; the old one stops working (a leaked link). Participants come back
    through the new one to the same accounts: put it on the platform."""
    study = service.get_study(db_session=db_session, study_id=study_id)
    link = service.new_link(db_session=db_session, study=study, base_url=str(request.base_url))
    return StudyLinkRead(**vars(link))


@router.delete(
    "/{study_id}",
    status_code=status.HTTP_204_NO_CONTENT,
    summary="Delete a study with its participants' platform ids (admin)",
    responses=error_responses(401, 403, 404, 422),
)
def delete_study(study_id: int, db_session: SessionDep, _admin: AdminUser) -> Response:
    """Delete the study and every platform id it holds (personal data, on request): its participants'
    accounts keep their votes under usernames that name nobody, and an account no other study holds is
    deactivated. The participants table and bonus file are gone with it: download them first."""
    service.delete_study(
        db_session=db_session, study=service.get_study(db_session=db_session, study_id=study_id)
    )
    return Response(status_code=status.HTTP_204_NO_CONTENT)


@router.get(
    "/{study_id}/participants",
    summary="A study's participants, for paying them (admin; JSON or CSV)",
    response_model=list[ParticipantRead],
    responses={200: {"content": {"text/csv": {}}}, **error_responses(401, 403, 404, 422)},
)
def read_participants(
    study_id: int,
    db_session: SessionDep,
    _admin: AdminUser,
    format: Annotated[Literal["json", "csv"], Query(description="json or csv")] = "json",
) -> list[ParticipantRead] | Response:
    """Each participant in the order they arrived: their platform ids (personal data), the account that
    labelled, the images answered, active time by the server's clock (each answer's seconds capped at
    60 s) and gold accuracy in the study, the outcome and the bonus by the study's rule. `format=csv`
    gives the same rows as CSV."""
    study = service.get_study(db_session=db_session, study_id=study_id)
    rows = payments.participant_rows(db_session=db_session, study=study, now=utcnow())
    if format == "json":
        return [ParticipantRead(**vars(row)) for row in rows]
    return Response(
        payments.participants_csv(rows),
        media_type="text/csv; charset=utf-8",
        headers={"Content-Disposition": f'attachment; filename="study-{study.id}-participants.csv"'},
    )


@router.get(
    "/{study_id}/bonuses",
    summary="A study's bulk bonus file (admin)",
    response_class=Response,
    responses={200: {"content": {"text/csv": {}}}, **error_responses(401, 403, 404, 422)},
)
def read_bonuses(study_id: int, db_session: SessionDep, _admin: AdminUser) -> Response:
    """`participant_id,amount` a line, no header, for every bonus above zero: paste it into the platform's
    bulk bonus form (Prolific: the study's "Bulk bonus payments")."""
    study = service.get_study(db_session=db_session, study_id=study_id)
    rows = payments.participant_rows(db_session=db_session, study=study, now=utcnow())
    return Response(
        payments.bonus_file(rows),
        media_type="text/csv; charset=utf-8",
        headers={"Content-Disposition": f'attachment; filename="study-{study.id}-bonuses.csv"'},
    )


@router.get(
    "/{study_id}/me",
    summary="My progress in a study (its participant)",
    responses=error_responses(401, 404, 422),
)
def read_my_participation(study_id: int, db_session: SessionDep, user: CurrentUser) -> ParticipationRead:
    """The caller's images answered in the study, what it requires and allows, their deadline, and how they
    would leave now (`outcome_due`; null while there is work to do). 404 for anyone who takes no part in
    it."""
    state = progress.participation(
        db_session=db_session,
        study=service.get_study(db_session=db_session, study_id=study_id),
        user=user,
        now=utcnow(),
    )
    return ParticipationRead(
        study_id=study_id,
        required_images=state.study.required_images,
        max_images=state.study.max_images,
        images=state.work.images,
        deadline=progress.deadline(state.study, state.participant),
        outcome=state.participant.outcome,
        outcome_due=state.due,
        may_finish=state.may_finish,
    )


@router.post(
    "/{study_id}/me/finish",
    summary="Leave a study with its completion code (its participant)",
    responses=error_responses(401, 403, 404, 409, 422),
)
def finish(study_id: int, db_session: SessionDep, user: CurrentUser) -> FinishRead:
    """Leave with the outcome due (screened out by quality control, the upper limit reached, the time up,
    nothing left), or as completed once the required images are answered (409 before): the outcome is
    recorded once, the caller's labelling in the competition ends, and the answer carries the outcome's
    code and the platform's completion URL. 404 for anyone who takes no part in the study."""
    study = service.get_study(db_session=db_session, study_id=study_id)
    outcome = progress.finish(db_session=db_session, study=study, user=user, now=utcnow())
    code, url = service.completion(study, outcome)
    return FinishRead(outcome=outcome, code=code, completion_url=url)
