"""Importing images into a competition: hash, de-duplicate, check, store, and give each a stable ordinal."""

import hashlib
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Executor
from dataclasses import dataclass, field
from itertools import islice

from sqlalchemy import func, select
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
    """Import one batch: check and store new files, link known ones, give each new link the next ordinal."""
    candidates = [entry for entry in entries if isinstance(entry, Candidate)]
    report.rejected += [(entry.name, entry.reason) for entry in entries if isinstance(entry, Rejected)]
    hashes = list(executor.map(_sha256, (candidate.data for candidate in candidates)))

    known_images = {
        image.sha256: image
        for image in db_session.scalars(select(Image).where(Image.sha256.in_(set(hashes))))
    }
    linked_image_ids = set(
        db_session.scalars(
            select(CompetitionImage.image_id).where(
                CompetitionImage.competition_id == competition.id,
                CompetitionImage.image_id.in_([image.id for image in known_images.values()]),
            )
        )
    )
    to_link: list[tuple[Candidate, str]] = []
    copies: list[tuple[Candidate, str, str]] = []
    for candidate, sha256 in zip(candidates, hashes, strict=True):
        first_name = report.first_name_of_hash.get(sha256)
        known = known_images.get(sha256)
        if first_name is not None:
            copies.append((candidate, sha256, first_name))
        elif known is not None and known.id in linked_image_ids:
            report.duplicates.append((candidate.name, "already in this competition"))
            report.first_name_of_hash[sha256] = candidate.name
        else:
            report.first_name_of_hash[sha256] = candidate.name
            to_link.append((candidate, sha256))

    new = [(candidate, sha256) for candidate, sha256 in to_link if sha256 not in known_images]
    checks = executor.map(lambda pair: _check(pair[0].data, limits), new)
    refused: dict[str, str] = {}
    for (candidate, sha256), checked in zip(new, checks, strict=True):
        if isinstance(checked, str):
            report.rejected.append((candidate.name, checked))
            refused[sha256] = checked
            del report.first_name_of_hash[sha256]
            continue
        with storage_errors(f"image {candidate.name}"):
            store.put(sha256, checked.format, candidate.data, checked.thumbnail)
        image = Image(
            sha256=sha256,
            format=checked.format,
            width=checked.width,
            height=checked.height,
            bytes=len(candidate.data),
            original_name=candidate.name.rsplit("/", 1)[-1][-MAX_NAME_LENGTH:],
        )
        db_session.add(image)
        known_images[sha256] = image
    db_session.flush()
    for candidate, sha256, first_name in copies:  # a copy of a refused file is refused for the same reason
        if sha256 in refused:
            report.rejected.append((candidate.name, refused[sha256]))
        else:
            report.duplicates.append((candidate.name, f"same content as {first_name}"))

    accepted = [(candidate, sha256) for candidate, sha256 in to_link if sha256 in report.first_name_of_hash]
    next_ordinal = _lock_next_ordinal(db_session=db_session, competition=competition)
    for offset, (candidate, sha256) in enumerate(accepted):
        db_session.add(
            CompetitionImage(
                competition_id=competition.id, image_id=known_images[sha256].id, ordinal=next_ordinal + offset
            )
        )
        report.added.append((candidate.name, sha256))
    db_session.flush()


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
    """Import every entry in batches; on_batch runs after each (the CLI commits there and moves its bar)."""
    report = ImportReport()
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
