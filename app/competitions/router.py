"""Competitions API: create (admin), list and read (public, members-only ones for their members and admins),
the label set, and members (admin)."""

from typing import Annotated

from fastapi import APIRouter, File, UploadFile, status
from sqlalchemy.orm import Session

from app.competitions import members, service, translations
from app.competitions.dependencies import CompetitionDep, VisibleCompetitionDep
from app.competitions.models import Competition
from app.competitions.schemas import (
    ClassRead,
    CompetitionCreate,
    CompetitionRead,
    CompetitionUpdate,
    CompetitionUpdated,
    MemberRead,
    TranslationsRead,
)
from app.db.session import SessionDep
from app.images.service import image_counts
from app.jobs import reselection
from app.users.auth import AdminUser, OptionalUser
from app.users.service import get_user
from app.web.dependencies import SettingsDep
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


@router.get("", summary="List competitions", responses=error_responses(401))
def list_competitions(db_session: SessionDep, user: OptionalUser) -> list[CompetitionRead]:
    """Every competition the caller may see (members-only ones to their members and admins) with its
    parameters and image count."""
    counts = image_counts(db_session=db_session)
    shown = members.competitions_of(db_session=db_session, user=user)
    return [service.to_read(c, counts.get(c.id, 0)) for c in shown]


@router.get("/{competition_id}", summary="Read a competition", responses=error_responses(401, 403, 404, 422))
def read_competition(competition: VisibleCompetitionDep, db_session: SessionDep) -> CompetitionRead:
    """One competition with its parameters and image count."""
    return service.to_read(competition, image_counts(db_session=db_session).get(competition.id, 0))


@router.patch(
    "/{competition_id}",
    summary="Change a competition's description, guidelines, quality control, openness or selection (admin)",
    responses=error_responses(401, 403, 404, 409, 422),
)
def update_competition(
    body: CompetitionUpdate,
    db_session: SessionDep,
    settings: SettingsDep,
    _admin: AdminUser,
    competition: CompetitionDep,
) -> CompetitionUpdated:
    """Set the description, the annotators' guidelines, the gold accuracy threshold that pauses an annotator
    and the gold answers it needs first, members_only (whether only the competition's members may label) and
    the selection settings k, confidence_threshold, threshold_rule and max_per_label (fields left out stay as
    they are).

    A change of the selection settings selects every pair again from the stored predictions, by select jobs
    (no inference; `mad jobs` and …/progress follow them). Votes on questions the new selection still asks
    are kept; `reselection` says how many are kept and dropped. A change that would drop votes is refused
    with 409 (saying how many) unless `confirm` is true; `dry_run` changes nothing and only says it. 409 too
    while a select job of the competition runs."""
    found = reselection.update_competition(
        db_session=db_session, settings=settings, competition=competition, update=body
    )
    shown = service.to_read(competition, image_counts(db_session=db_session).get(competition.id, 0))
    return CompetitionUpdated(**shown.model_dump(), reselection=found)


@router.get(
    "/{competition_id}/classes",
    summary="The label set in model output order",
    responses=error_responses(401, 403, 404, 422),
)
def list_classes(competition: VisibleCompetitionDep) -> list[ClassRead]:
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


@router.put(
    "/{competition_id}/translations",
    summary="Import class names in other languages (admin)",
    responses=error_responses(401, 403, 404, 413, 422),
)
def import_translations(
    db_session: SessionDep,
    _admin: AdminUser,
    competition: CompetitionDep,
    settings: SettingsDep,
    file: Annotated[UploadFile, File(description="CSV, YAML or JSON: class_id, locale, name, description.")],
) -> TranslationsRead:
    """Take a translation file for the label set: CSV with the header `class_id,locale,name,description`
    (by its .csv name), else YAML or JSON holding a list of mappings with those keys. `class_id` is a class
    key of the label set, `locale` a language the pages come in (not `en`). Each language in the file replaces
    that language's earlier import; a bad row is refused (422), a file over MAD_MAX_TRANSLATION_BYTES too
    (413), and nothing is stored. Annotators are asked in their language from their next image on."""
    translations.check_file_size(file.size or 0, settings.max_translation_bytes)
    rows = translations.parse_translation_file(file.file.read(), file.filename or "")
    taken = translations.import_translations(db_session=db_session, competition=competition, rows=rows)
    return TranslationsRead(imported=taken, coverage=translation_coverage(db_session, competition))


@router.get(
    "/{competition_id}/translations",
    summary="The share of the classes each language names (admin)",
    responses=error_responses(401, 403, 404, 422),
)
def read_translations(
    db_session: SessionDep, _admin: AdminUser, competition: CompetitionDep
) -> TranslationsRead:
    """Per language the pages come in, the share of the classes with a name in it."""
    return TranslationsRead(coverage=translation_coverage(db_session, competition))


def translation_coverage(db_session: Session, competition: Competition) -> dict[str, float]:
    """The share of the classes each language names."""
    given = translations.competition_translations(db_session=db_session, competition=competition)
    return translations.coverage(given, len(competition.class_keys))
