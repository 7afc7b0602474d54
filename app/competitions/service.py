"""Competitions: create them with a resolved label set, find them, and rebuild their taxonomy."""

from functools import lru_cache

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from app.competitions.models import Competition
from app.competitions.schemas import CompetitionCreate, CompetitionRead
from app.core import taxonomy as core_taxonomy
from app.core.taxonomy import Taxonomy, TaxonomyError
from app.errors import Conflict, InvalidInput, NotFound
from app.images.models import CompetitionImage


def build_taxonomy(kind: str, source: str | None) -> Taxonomy:
    """The taxonomy a competition names: a shipped one, WordNet synsets, or a custom file's text."""
    try:
        if kind in core_taxonomy.BUILTIN_TAXONOMIES:
            return core_taxonomy.load_taxonomy(kind)
        if not source or not source.strip():
            raise InvalidInput(f"taxonomy {kind!r} needs taxonomy_source")
        if kind == "wordnet":
            return core_taxonomy.from_wordnet([line.strip() for line in source.splitlines() if line.strip()])
        return core_taxonomy.from_text(source)
    except TaxonomyError as error:
        raise InvalidInput(f"taxonomy: {error}") from None


@lru_cache(maxsize=16)
def cached_taxonomy(kind: str, source: str | None) -> Taxonomy:
    """build_taxonomy, remembered per process (the distance matrix is cached on the object)."""
    return build_taxonomy(kind, source)


def competition_taxonomy(competition: Competition) -> Taxonomy:
    """The taxonomy of a competition, built once per process."""
    return cached_taxonomy(competition.taxonomy, competition.taxonomy_source)


def create_competition(*, db_session: Session, spec: CompetitionCreate) -> Competition:
    """Add a competition after resolving its label set; 409 if the name is taken."""
    if db_session.scalar(select(Competition.id).where(Competition.name == spec.name)) is not None:
        raise Conflict(f"a competition named {spec.name!r} already exists")
    source = spec.taxonomy_source if spec.taxonomy not in core_taxonomy.BUILTIN_TAXONOMIES else None
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


def get_competition_by_name(*, db_session: Session, name: str) -> Competition:
    """The competition with this name, or NotFound saying how to list them."""
    competition = db_session.scalar(select(Competition).where(Competition.name == name))
    if competition is None:
        raise NotFound(f"no competition named {name!r} (see `mad competitions list`)")
    return competition


def list_competitions(*, db_session: Session) -> list[Competition]:
    """Every competition, oldest first."""
    return list(db_session.scalars(select(Competition).order_by(Competition.id)))


def image_counts(*, db_session: Session) -> dict[int, int]:
    """Number of images per competition id."""
    rows = db_session.execute(
        select(CompetitionImage.competition_id, func.count()).group_by(CompetitionImage.competition_id)
    )
    return dict(rows.all())


def to_read(competition: Competition, image_count: int) -> CompetitionRead:
    """The API view of a competition."""
    return CompetitionRead(
        id=competition.id,
        name=competition.name,
        description=competition.description,
        taxonomy=competition.taxonomy,
        num_classes=len(competition.class_keys),
        k=competition.k,
        confidence_threshold=competition.confidence_threshold,
        max_per_label=competition.max_per_label,
        panel_size=competition.panel_size,
        smoothing=competition.smoothing,
        gold_rate=competition.gold_rate,
        created_at=competition.created_at,
        image_count=image_count,
    )
