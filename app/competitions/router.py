"""Competitions API: create (admin), list and read (public), the label set, and members (admin)."""

from fastapi import APIRouter, status

from app.competitions import members, service
from app.competitions.dependencies import CompetitionDep
from app.competitions.schemas import (
    ClassRead,
    CompetitionCreate,
    CompetitionRead,
    CompetitionUpdate,
    MemberRead,
)
from app.db.session import SessionDep
from app.images.service import image_counts
from app.users.auth import AdminUser
from app.users.service import get_user
from app.web.errors import error_responses

router = APIRouter(prefix="/api/v1/competitions", tags=["competitions"])


@router.post(
    "",
    status_code=status.HTTP_201_CREATED,
    summary="Create a competition (admin)",
    responses=error_responses(401, 403, 409, 422),
)
def create_competition(body: CompetitionCreate, db_session: SessionDep, _admin: AdminUser) -> CompetitionRead:
    """Resolve the taxonomy into the label set and store the MAD parameters; 409 if the name is taken."""
    competition = service.create_competition(db_session=db_session, spec=body)
    return service.to_read(competition, image_count=0)


@router.get("", summary="List competitions")
def list_competitions(db_session: SessionDep) -> list[CompetitionRead]:
    """Every competition with its parameters and image count."""
    counts = image_counts(db_session=db_session)
    return [service.to_read(c, counts.get(c.id, 0)) for c in service.list_competitions(db_session=db_session)]


@router.get("/{competition_id}", summary="Read a competition", responses=error_responses(404, 422))
def read_competition(competition: CompetitionDep, db_session: SessionDep) -> CompetitionRead:
    """One competition with its parameters and image count."""
    return service.to_read(competition, image_counts(db_session=db_session).get(competition.id, 0))


@router.patch(
    "/{competition_id}",
    summary="Change a competition's description, guidelines, quality control or openness (admin)",
    responses=error_responses(401, 403, 404, 422),
)
def update_competition(
    body: CompetitionUpdate, db_session: SessionDep, _admin: AdminUser, competition: CompetitionDep
) -> CompetitionRead:
    """Set the description, the annotators' guidelines, the gold accuracy threshold that pauses an annotator
    and the gold answers it needs first, and members_only (whether only the competition's members may label;
    fields left out stay as they are)."""
    service.update_competition(db_session=db_session, competition=competition, change=body)
    return service.to_read(competition, image_counts(db_session=db_session).get(competition.id, 0))


@router.get(
    "/{competition_id}/classes",
    summary="The label set in model output order",
    responses=error_responses(404, 422),
)
def list_classes(competition: CompetitionDep) -> list[ClassRead]:
    """Class index (what classifiers output), key (e.g. WordNet id), display name and definition (a WordNet
    gloss, or a custom taxonomy's description)."""
    definitions = service.class_definitions(competition)
    classes = zip(competition.class_keys, competition.class_names, definitions, strict=True)
    return [
        ClassRead(index=index, key=key, name=name, definition=definition)
        for index, (key, name, definition) in enumerate(classes)
    ]


@router.get(
    "/{competition_id}/members",
    summary="List a competition's members (admin)",
    responses=error_responses(401, 403, 404, 422),
)
def list_members(db_session: SessionDep, _admin: AdminUser, competition: CompetitionDep) -> list[MemberRead]:
    """The annotators who may label in the competition when it is members-only, by username."""
    return members.list_members(db_session=db_session, competition=competition)


@router.put(
    "/{competition_id}/members/{user_id}",
    summary="Add a member (admin)",
    responses=error_responses(401, 403, 404, 422),
)
def add_member(
    user_id: int, db_session: SessionDep, _admin: AdminUser, competition: CompetitionDep
) -> MemberRead:
    """Let an annotator label in the competition when it is members-only (again: no change); 422 for an
    admin (admins label everywhere) or a worker."""
    user = get_user(db_session=db_session, user_id=user_id)
    return members.add_member(db_session=db_session, competition=competition, user=user)


@router.delete(
    "/{competition_id}/members/{user_id}",
    status_code=status.HTTP_204_NO_CONTENT,
    summary="Remove a member (admin)",
    responses=error_responses(401, 403, 404, 422),
)
def remove_member(
    user_id: int, db_session: SessionDep, _admin: AdminUser, competition: CompetitionDep
) -> None:
    """Take an annotator out of the members: in a members-only competition their next labelling request is
    refused (403); 404 when they are not a member."""
    members.remove_member(db_session=db_session, competition=competition, user_id=user_id)
