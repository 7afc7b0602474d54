"""Competitions: create them with a resolved label set, find them, and rebuild their taxonomy."""

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from app.competitions.models import Competition, CompetitionVersion
from app.competitions.schemas import SELECTION_FIELDS, CompetitionCreate, CompetitionRead, CompetitionUpdate
from app.core import taxonomy_sources
from app.core.taxonomy import Taxonomy, TaxonomyError
from app.core.taxonomy_sources import BUILTIN_TAXONOMIES, cached_taxonomy
from app.errors import Conflict, InvalidInput, NotFound


def build_taxonomy(kind: str, source: str | None) -> Taxonomy:
    """The taxonomy a competition names: a shipped one, WordNet synsets, or a custom file's text."""
    if kind not in BUILTIN_TAXONOMIES and (not source or not source.strip()):
        raise InvalidInput(f"taxonomy {kind!r} needs taxonomy_source")
    try:
        return taxonomy_sources.build_taxonomy(kind, source)
    except TaxonomyError as error:
        raise InvalidInput(f"taxonomy: {error}") from None


def competition_taxonomy(competition: Competition) -> Taxonomy:
    """The taxonomy of a competition, built once per process."""
    try:
        return cached_taxonomy(competition.taxonomy, competition.taxonomy_source)
    except TaxonomyError as error:
        raise InvalidInput(f"taxonomy: {error}") from None


def class_definitions(competition: Competition) -> tuple[str, ...]:
    """What each class means, in class order ("" where the taxonomy says nothing, or its data is missing on
    this machine)."""
    try:
        taxonomy = cached_taxonomy(competition.taxonomy, competition.taxonomy_source)
    except TaxonomyError:
        return ("",) * len(competition.class_keys)
    return tuple(taxonomy.definition(index) for index in range(len(competition.class_keys)))


def create_competition(*, db_session: Session, spec: CompetitionCreate) -> Competition:
    """Add a competition after resolving its label set; 409 if the name is taken."""
    if db_session.scalar(select(Competition.id).where(Competition.name == spec.name)) is not None:
        raise Conflict(f"a competition named {spec.name!r} already exists")
    source = spec.taxonomy_source if spec.taxonomy not in BUILTIN_TAXONOMIES else None
    taxonomy = build_taxonomy(spec.taxonomy, source)
    competition = Competition(
        **spec.model_dump(exclude={"taxonomy_source"}),
        taxonomy_source=source,
        class_keys=list(taxonomy.classes),
        class_names=list(taxonomy.names),
    )
    db_session.add(competition)
    db_session.flush()
    return competition


def get_competition(*, db_session: Session, competition_id: int) -> Competition:
    """The competition with this id, or NotFound."""
    competition = db_session.get(Competition, competition_id)
    if competition is None:
        raise NotFound(f"no competition with id {competition_id}")
    return competition


def data_version(*, db_session: Session, competition_id: int) -> int:
    """The competition's data version: Σ of its CompetitionVersion rows, raised by every committed change
    to what its public reads show (0 before the first)."""
    return db_session.execute(
        select(func.coalesce(func.sum(CompetitionVersion.version), 0)).where(
            CompetitionVersion.competition_id == competition_id
        )
    ).scalar_one()


def update_competition(*, db_session: Session, competition: Competition, change: CompetitionUpdate) -> None:
    """Set the description, guidelines, quality settings and members_only given (None leaves one as it is;
    the selection settings are app/jobs/reselection.py's)."""
    for field, value in change.model_dump(
        exclude_none=True, exclude={*SELECTION_FIELDS, "dry_run", "confirm"}
    ).items():
        setattr(competition, field, value)
    db_session.flush()


def get_competition_by_name(*, db_session: Session, name: str) -> Competition:
    """The competition with this name, or NotFound saying how to list them."""
    competition = db_session.scalar(select(Competition).where(Competition.name == name))
    if competition is None:
        raise NotFound(f"no competition named {name!r} (see `mad competitions list`)")
    return competition


def list_competitions(*, db_session: Session) -> list[Competition]:
    """Every competition, oldest first."""
    return list(db_session.scalars(select(Competition).order_by(Competition.id)))


def lock_competition(*, db_session: Session, competition_id: int) -> None:
    """Serialise changes within a competition, e.g. job creation (row lock on Postgres; SQLite serialises
    writers)."""
    db_session.execute(select(Competition.id).where(Competition.id == competition_id).with_for_update())


def to_read(competition: Competition, image_count: int) -> CompetitionRead:
    """The API view of a competition."""
    return CompetitionRead(
        id=competition.id,
        name=competition.name,
        description=competition.description,
        guidelines=competition.guidelines,
        taxonomy=competition.taxonomy,
        num_classes=len(competition.class_keys),
        k=competition.k,
        confidence_threshold=competition.confidence_threshold,
        threshold_rule=competition.threshold_rule,
        max_per_label=competition.max_per_label,
        panel_size=competition.panel_size,
        smoothing=competition.smoothing,
        gold_rate=competition.gold_rate,
        gold_threshold=competition.gold_threshold,
        gold_min_answers=competition.gold_min_answers,
        members_only=competition.members_only,
        sampling=competition.sampling,
        created_at=competition.created_at,
        image_count=image_count,
    )
