"""Importing images into a competition: hash, de-duplicate, check, store, and give each a stable ordinal."""

import hashlib
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Executor
from dataclasses import dataclass, field
from itertools import islice

from sqlalchemy import func, select
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session

from app.competitions.models import Competition
from app.errors import NotFound, storage_errors
from app.images.decode import BadImage, CheckedImage, check_image
from app.images.models import CompetitionImage, Image
from app.images.sources import Candidate, ImportEntry, Rejected
from app.images.store import ImageStore
from app.labelling.service import discard_image

IMPORT_BATCH_SIZE = 256
MAX_NAME_LENGTH = 255


@dataclass(frozen=True)
class ImageLimits:
    """What an acceptable image is: file size, pixel count, and the thumbnail's size."""

    max_bytes: int
    max_pixels: int
    thumbnail_size: int


@dataclass
class ImportReport:
    """What an import did, file by file: added, duplicates (stored once) and rejected with the reason."""

    added: list[tuple[str, str]] = field(default_factory=list)
    duplicates: list[tuple[str, str]] = field(default_factory=list)
    rejected: list[tuple[str, str]] = field(default_factory=list)
    first_name_of_hash: dict[str, str] = field(default_factory=dict, repr=False)
    unconfirmed: list[tuple[str, str]] = field(default_factory=list, repr=False)
    """(sha256, format) of the images whose rows this import inserted since the last on_batch."""

    @property
    def processed(self) -> int:
        """How many entries this report accounts for."""
        return len(self.added) + len(self.duplicates) + len(self.rejected)


def batched(entries: Iterable[ImportEntry], size: int) -> Iterator[list[ImportEntry]]:
    """Consecutive lists of at most size entries."""
    iterator = iter(entries)
    while batch := list(islice(iterator, size)):
        yield batch


def _sha256(data: bytes) -> str:
    """Hex SHA-256 of the bytes."""
    return hashlib.sha256(data).hexdigest()


def _check(data: bytes, limits: ImageLimits) -> CheckedImage | str:
    """The checked image, or the reason it is refused."""
    try:
        return check_image(data, max_pixels=limits.max_pixels, thumbnail_size=limits.thumbnail_size)
    except BadImage as error:
        return str(error)


def import_batch(
    *,
    db_session: Session,
    store: ImageStore,
    competition: Competition,
    entries: list[ImportEntry],
    limits: ImageLimits,
    executor: Executor,
    report: ImportReport,
) -> None:
    """Import one batch: check new files, then under the competition's lock store them, link the images
    not yet in the competition and give each new link the next ordinal.

    Concurrent imports of the same files are safe: imports into one competition take turns at its lock,
    and an image row another import inserted meanwhile is used as is (its files are that import's).
    """
    candidates = [entry for entry in entries if isinstance(entry, Candidate)]
    report.rejected += [(entry.name, entry.reason) for entry in entries if isinstance(entry, Rejected)]
    hashes = list(executor.map(_sha256, (candidate.data for candidate in candidates)))
    image_ids = _image_ids(db_session, set(hashes))
    firsts: list[tuple[Candidate, str]] = []
    copies: list[tuple[Candidate, str, str]] = []
    for candidate, sha256 in zip(candidates, hashes, strict=True):
        first_name = report.first_name_of_hash.get(sha256)
        if first_name is not None:
            copies.append((candidate, sha256, first_name))
        else:
            report.first_name_of_hash[sha256] = candidate.name
            firsts.append((candidate, sha256))

    new = [(candidate, sha256) for candidate, sha256 in firsts if sha256 not in image_ids]
    checks = list(executor.map(lambda pair: _check(pair[0].data, limits), new))
    next_ordinal = _lock_next_ordinal(db_session=db_session, competition=competition)
    refused = _add_images(
        db_session=db_session, store=store, new=new, checks=checks, image_ids=image_ids, report=report
    )
    for candidate, sha256, first_name in copies:  # a copy of a refused file is refused for the same reason
        if sha256 in refused:
            report.rejected.append((candidate.name, refused[sha256]))
        else:
            report.duplicates.append((candidate.name, f"same content as {first_name}"))

    accepted = [(candidate, sha256) for candidate, sha256 in firsts if sha256 not in refused]
    linked = set(
        db_session.scalars(
            select(CompetitionImage.image_id).where(
                CompetitionImage.competition_id == competition.id,
                CompetitionImage.image_id.in_([image_ids[sha256] for _, sha256 in accepted]),
            )
        )
    )
    for candidate, sha256 in accepted:
        if image_ids[sha256] in linked:
            report.duplicates.append((candidate.name, "already in this competition"))
            continue
        db_session.add(
            CompetitionImage(competition_id=competition.id, image_id=image_ids[sha256], ordinal=next_ordinal)
        )
        next_ordinal += 1
        report.added.append((candidate.name, sha256))
    db_session.flush()


def _image_ids(db_session: Session, hashes: set[str]) -> dict[str, int]:
    """The id of every stored image among these hashes."""
    return dict(db_session.execute(select(Image.sha256, Image.id).where(Image.sha256.in_(hashes))).all())


def _add_images(
    *,
    db_session: Session,
    store: ImageStore,
    new: list[tuple[Candidate, str]],
    checks: list[CheckedImage | str],
    image_ids: dict[str, int],
    report: ImportReport,
) -> dict[str, str]:
    """Insert a row for each good new file and store the files of the rows inserted here (a row another
    import inserted meanwhile comes with its files); the reason of each refused hash."""
    refused: dict[str, str] = {}
    good: dict[str, tuple[Candidate, CheckedImage]] = {}
    for (candidate, sha256), checked in zip(new, checks, strict=True):
        if isinstance(checked, str):
            report.rejected.append((candidate.name, checked))
            refused[sha256] = checked
            del report.first_name_of_hash[sha256]
        else:
            good[sha256] = (candidate, checked)
    if not good:
        return refused
    rows = [
        {
            "sha256": sha256,
            "format": checked.format,
            "width": checked.width,
            "height": checked.height,
            "bytes": len(candidate.data),
            "original_name": candidate.name.rsplit("/", 1)[-1][-MAX_NAME_LENGTH:],
        }
        for sha256, (candidate, checked) in sorted(good.items())  # one lock order for every import
    ]
    inserted = _insert_missing_images(db_session, rows)
    for sha256, (candidate, checked) in good.items():
        if sha256 in inserted:
            report.unconfirmed.append((sha256, checked.format))
            with storage_errors(f"image {candidate.name}"):
                store.put(sha256, checked.format, candidate.data, checked.thumbnail)
    image_ids.update(inserted)
    image_ids.update(_image_ids(db_session, good.keys() - inserted.keys()))
    return refused


def _insert_missing_images(db_session: Session, rows: list[dict]) -> dict[str, int]:
    """INSERT ... ON CONFLICT (sha256) DO NOTHING: the hash and id of each row inserted; a hash another
    transaction holds uncommitted waits for it (Postgres; SQLite has one writer) and is then skipped."""
    insert = postgresql.insert if db_session.get_bind().dialect.name == "postgresql" else sqlite.insert
    statement = (
        insert(Image)
        .values(rows)
        .on_conflict_do_nothing(index_elements=[Image.sha256])
        .returning(Image.sha256, Image.id)
    )
    return dict(db_session.execute(statement).all())


def _lock_next_ordinal(*, db_session: Session, competition: Competition) -> int:
    """Lock the competition row (SQLite serialises writers anyway) and return the next free ordinal."""
    db_session.execute(select(Competition.id).where(Competition.id == competition.id).with_for_update())
    highest = db_session.scalar(
        select(func.max(CompetitionImage.ordinal)).where(CompetitionImage.competition_id == competition.id)
    )
    return 0 if highest is None else highest + 1


def import_entries(
    *,
    db_session: Session,
    store: ImageStore,
    competition: Competition,
    entries: Iterable[ImportEntry],
    limits: ImageLimits,
    executor: Executor,
    on_batch: Callable[[ImportReport], None] | None = None,
) -> ImportReport:
    """Import every entry in batches; on_batch runs after each and may commit it (the CLI does, and moves
    its bar). If the import fails, the files of the rows inserted since the last on_batch are removed
    before the error reaches the caller, whose rollback removes the rows: no file is left without its row.
    """
    report = ImportReport()
    try:
        for batch in batched(entries, IMPORT_BATCH_SIZE):
            import_batch(
                db_session=db_session,
                store=store,
                competition=competition,
                entries=batch,
                limits=limits,
                executor=executor,
                report=report,
            )
            if on_batch is not None:
                on_batch(report)
                report.unconfirmed.clear()
    except BaseException:
        for sha256, image_format in report.unconfirmed:
            store.remove(sha256, image_format)
        raise
    return report


def exclude_image(
    *, db_session: Session, competition: Competition, sha256: str, reason: str
) -> tuple[Image, CompetitionImage]:
    """Keep an image out of every future selection and discard it from the pairs that selected it, each
    pair's next reserve image taking its place (as when annotators find it too difficult). One-way: a
    pair that discarded it keeps its replacement."""
    row = db_session.execute(
        select(Image, CompetitionImage)
        .join(CompetitionImage, CompetitionImage.image_id == Image.id)
        .where(CompetitionImage.competition_id == competition.id, Image.sha256 == sha256)
        .with_for_update(of=CompetitionImage)
    ).first()
    if row is None:
        raise NotFound(f"no image {sha256} in competition {competition.name!r}")
    image, link = row
    link.excluded = True
    link.excluded_reason = reason
    db_session.flush()
    discard_image(db_session=db_session, competition=competition, image_id=image.id)
    return image, link
