"""Competitions API: create (admin), list and read (public), and the label set."""

from fastapi import APIRouter, status

from app.competitions import service
from app.competitions.schemas import ClassRead, CompetitionCreate, CompetitionRead
from app.db import SessionDep
from app.users.auth import AdminUser

router = APIRouter(prefix="/api/v1/competitions", tags=["competitions"])


@router.post("", status_code=status.HTTP_201_CREATED, summary="Create a competition (admin)")
def create_competition(body: CompetitionCreate, db_session: SessionDep, _admin: AdminUser) -> CompetitionRead:
    """Resolve the taxonomy into the label set and store the MAD parameters; 409 if the name is taken."""
    competition = service.create_competition(db_session=db_session, spec=body)
    return service.to_read(competition, image_count=0)


@router.get("", summary="List competitions")
def list_competitions(db_session: SessionDep) -> list[CompetitionRead]:
    """Every competition with its parameters and image count."""
    counts = service.image_counts(db_session=db_session)
    return [service.to_read(c, counts.get(c.id, 0)) for c in service.list_competitions(db_session=db_session)]


@router.get("/{competition_id}", summary="Read a competition")
def read_competition(competition_id: int, db_session: SessionDep) -> CompetitionRead:
    """One competition with its parameters and image count."""
    competition = service.get_competition(db_session=db_session, competition_id=competition_id)
    return service.to_read(competition, service.image_counts(db_session=db_session).get(competition.id, 0))


@router.get("/{competition_id}/classes", summary="The label set in model output order")
def list_classes(competition_id: int, db_session: SessionDep) -> list[ClassRead]:
    """Class index (what classifiers output), key (e.g. WordNet id) and display name."""
    competition = service.get_competition(db_session=db_session, competition_id=competition_id)
    return [
        ClassRead(index=index, key=key, name=name)
        for index, (key, name) in enumerate(zip(competition.class_keys, competition.class_names, strict=True))
    ]
