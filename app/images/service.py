"""Importing images into a competition: hash, de-duplicate, check, store, and give each a stable ordinal.

Files found but not read yet (Pending) are first looked up by uri: those this competition already has
from an earlier run are skipped unread, so an interrupted import is simply run again; the rest are read
by the executor's threads, a few ahead of the batch being formed. Decoding, thumbnails and pHashes run on
a checker (the CLI's processes) while one thread writes the database (docs/architecture.md).
"""

import hashlib
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Executor, Future, wait
from dataclasses import dataclass, field
from typing import TypeVar

import numpy as np
from sqlalchemy import func, insert, select
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session

from app.competitions.models import Competition
from app.core.near_duplicates import near_duplicate_pairs
from app.errors import NotFound
from app.images.decode import CheckedImage, check_images
from app.images.models import CompetitionImage, Image
from app.images.sources import Candidate, ImportEntry, ImportItem, Pending, Rejected, read_entry
from app.images.store import ImageStore, store_images

IMPORT_BATCH_SIZE = 32
"""Files hashed, looked up, checked, written and committed together: checking starts once a few are read."""
IMPORT_BATCH_BYTES = 64 * 1024 * 1024
"""A batch also ends once its files hold this many bytes, and batches waiting for their checks are written
once they hold more: an import holds at most about twice this in files."""
BATCHES_AHEAD = 4
"""Batches whose checks run while the oldest is written (the checkers' work while this thread writes)."""
URI_WINDOW = 256
"""Pending files looked up by uri at a time (skip_imported)."""
CHECK_CHUNK = 8
"""Files per check task: few enough that the checking processes end a batch together, enough that handing
files to a process costs little beside decoding them."""
MAX_NAME_LENGTH = 255
NEAR_DUPLICATE_BITS = 4
"""Two images are near-duplicates when their 64-bit pHashes differ in at most this many bits."""


@dataclass(frozen=True)
class ImageLimits:
    """What an acceptable image is: file size, pixel count, and the thumbnail's size."""

    max_bytes: int
    max_pixels: int
    thumbnail_size: int

    @property
    def check(self) -> tuple[int, int]:
        """check_images' limits: (max_pixels, thumbnail_size)."""
        return self.max_pixels, self.thumbnail_size


@dataclass
class ImportReport:
    """What an import did, file by file: added, duplicates (stored once) and rejected with the reason."""

    added: list[tuple[str, str]] = field(default_factory=list)
    duplicates: list[tuple[str, str]] = field(default_factory=list)
    rejected: list[tuple[str, str]] = field(default_factory=list)
    skipped: list[tuple[str, str]] = field(default_factory=list)
    """Files whose uri an earlier import already brought into the competition (not read again)."""
    near_duplicates: list[tuple[str, str]] = field(default_factory=list)
    """Added images whose pHash is within NEAR_DUPLICATE_BITS of another image of the competition."""
    first_name_of_hash: dict[str, str] = field(default_factory=dict, repr=False)
    refused: dict[str, str] = field(default_factory=dict, repr=False)
    """The reason each hash this import refused was refused for (its copies are refused alike)."""
    unconfirmed: list[tuple[str, str]] = field(default_factory=list, repr=False)
    """(sha256, format) of the images whose rows this import inserted and has not committed."""

    @property
    def processed(self) -> int:
        """How many entries this report accounts for."""
        return len(self.added) + len(self.duplicates) + len(self.rejected) + len(self.skipped)


Entry = TypeVar("Entry", bound=ImportItem)


def batched(entries: Iterable[Entry], size: int, max_bytes: int) -> Iterator[list[Entry]]:
    """Consecutive lists of at most `size` entries, each ending early once its files hold max_bytes."""
    batch: list[Entry] = []
    held = 0
    for entry in entries:
        batch.append(entry)
        held += len(entry.data) if isinstance(entry, Candidate) else 0
        if len(batch) == size or held >= max_bytes:
            yield batch
            batch, held = [], 0
    if batch:
        yield batch


def read_ahead(items: list[ImportItem], executor: Executor, ahead: int) -> Iterator[ImportEntry]:
    """The items in order, Pending ones read by the executor with at most `ahead` reads in flight or done
    and not yet taken (so at most `ahead` files are held beyond the batch being formed)."""
    queue: deque[Future | ImportEntry] = deque()
    for item in items:
        queue.append(executor.submit(read_entry, item) if isinstance(item, Pending) else item)
        if len(queue) > ahead:
            first = queue.popleft()
            yield first.result() if isinstance(first, Future) else first
    for first in queue:
        yield first.result() if isinstance(first, Future) else first


def skip_imported(
    db_session: Session, competition: Competition, window: list[ImportItem], report: ImportReport
) -> list[ImportItem]:
    """The window without the Pending files the competition already has from the same uri, with the same
    size where the source tells it (a file replaced by another of a new size is read again)."""
    uris = [item.provenance.uri for item in window if isinstance(item, Pending)]
    size_of = dict(
        db_session.execute(
            select(Image.source_uri, Image.bytes)
            .join(CompetitionImage, CompetitionImage.image_id == Image.id)
            .where(CompetitionImage.competition_id == competition.id, Image.source_uri.in_(uris))
        ).all()
    )

    def done(item: ImportItem) -> bool:
        return (
            isinstance(item, Pending)
            and item.provenance.uri in size_of
            and item.size in (None, size_of[item.provenance.uri])
        )

    report.skipped += [(item.name, "imported by an earlier run") for item in window if done(item)]
    return [item for item in window if not done(item)]


def _provenance_columns(candidate: Candidate) -> dict[str, str | None]:
    """The provenance columns of an image row: where the file was read, and a manifest's details."""
    provenance = candidate.provenance
    if provenance is None:
        return {"source_uri": candidate.name[:2048], "source_url": None, "license": None, "author": None}
    return {
        "source_uri": provenance.uri,
        "source_url": provenance.source_url,
        "license": provenance.license,
        "author": provenance.author,
    }


def _sha256(data: bytes) -> str:
    """Hex SHA-256 of the bytes."""
    return hashlib.sha256(data).hexdigest()


@dataclass
class PreparedBatch:
    """A batch hashed and looked up, with the checks of its new files under way: `firsts` are the files
    whose hash this import meets first, `copies` the others (with the first's name), `new` the firsts
    not stored yet, whose checks (lists of CheckedImage or reason, CHECK_CHUNK files each) are `checks`."""

    firsts: list[tuple[Candidate, str]]
    copies: list[tuple[Candidate, str, str]]
    new: list[tuple[Candidate, str]]
    checks: list[Future]
    image_ids: dict[str, int]

    @property
    def nbytes(self) -> int:
        """Bytes of the files this batch holds."""
        return sum(len(candidate.data) for candidate, _ in self.firsts) + sum(
            len(candidate.data) for candidate, _, _ in self.copies
        )


def prepare_batch(
    *,
    db_session: Session,
    entries: list[ImportEntry],
    limits: ImageLimits,
    executor: Executor,
    checker: Executor,
    report: ImportReport,
) -> PreparedBatch:
    """Hash a batch (executor's threads), look its hashes up, and start the checks of the new files on
    checker (processes in the CLI); only reads the database."""
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
    checks = [
        checker.submit(
            check_images, [candidate.data for candidate, _ in new[start : start + CHECK_CHUNK]], *limits.check
        )
        for start in range(0, len(new), CHECK_CHUNK)
    ]
    return PreparedBatch(firsts, copies, new, checks, image_ids)


def store_batch(
    *,
    db_session: Session,
    store: ImageStore,
    competition: Competition,
    batch: PreparedBatch,
    storer: Executor,
    report: ImportReport,
) -> None:
    """Once its checks are done, under the competition's lock store a batch's good new files, link the
    images not yet in the competition and give each new link the next ordinal.

    Concurrent imports of the same files are safe: imports into one competition take turns at its lock,
    and an image row another import inserted meanwhile is used as is (its files are that import's).
    """
    checks = [checked for future in batch.checks for checked in future.result()]
    next_ordinal = _lock_next_ordinal(db_session=db_session, competition=competition)
    _add_images(
        db_session=db_session,
        store=store,
        new=batch.new,
        checks=checks,
        image_ids=batch.image_ids,
        report=report,
        storer=storer,
    )
    for candidate, sha256, first_name in batch.copies:  # a refused file's copies are refused alike
        if sha256 in report.refused:
            report.rejected.append((candidate.name, report.refused[sha256]))
        else:
            report.duplicates.append((candidate.name, f"same content as {first_name}"))

    image_ids = batch.image_ids
    accepted = [(candidate, sha256) for candidate, sha256 in batch.firsts if sha256 not in report.refused]
    linked = set(
        db_session.scalars(
            select(CompetitionImage.image_id).where(
                CompetitionImage.competition_id == competition.id,
                CompetitionImage.image_id.in_([image_ids[sha256] for _, sha256 in accepted]),
            )
        )
    )
    links: list[dict[str, int]] = []
    for candidate, sha256 in accepted:
        if image_ids[sha256] in linked:
            report.duplicates.append((candidate.name, "already in this competition"))
            continue
        ordinal = next_ordinal + len(links)
        links.append({"competition_id": competition.id, "image_id": image_ids[sha256], "ordinal": ordinal})
        report.added.append((candidate.name, sha256))
    if links:
        db_session.execute(insert(CompetitionImage), links)


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
    storer: Executor,
) -> None:
    """Insert a row for each good new file and store the files of the rows inserted here, CHECK_CHUNK at a
    time on the storer (a row another import inserted meanwhile comes with its files); refused hashes go to
    report.refused with their reason."""
    good: dict[str, tuple[Candidate, CheckedImage]] = {}
    for (candidate, sha256), checked in zip(new, checks, strict=True):
        if isinstance(checked, str):
            report.rejected.append((candidate.name, checked))
            report.refused[sha256] = checked
        else:
            good[sha256] = (candidate, checked)
    if not good:
        return
    rows = [
        {
            "sha256": sha256,
            "format": checked.format,
            "width": checked.width,
            "height": checked.height,
            "bytes": len(candidate.data),
            "original_name": candidate.name.rsplit("/", 1)[-1][-MAX_NAME_LENGTH:],
            **_provenance_columns(candidate),
            "phash": checked.phash,
        }
        for sha256, (candidate, checked) in sorted(good.items())  # one lock order for every import
    ]
    inserted = _insert_missing_images(db_session, rows)
    to_store = [
        (candidate.name, sha256, checked.format, candidate.data, checked.thumbnail)
        for sha256, (candidate, checked) in good.items()
        if sha256 in inserted
    ]
    report.unconfirmed += [(sha256, image_format) for _, sha256, image_format, _, _ in to_store]
    stores = [
        storer.submit(store_images, store, to_store[start : start + CHECK_CHUNK])
        for start in range(0, len(to_store), CHECK_CHUNK)
    ]
    wait(stores)  # every write ends before a failure is raised, so that none outlives the cleanup
    for stored in stores:
        stored.result()
    image_ids.update(inserted)
    image_ids.update(_image_ids(db_session, good.keys() - inserted.keys()))


def _insert_missing_images(db_session: Session, rows: list[dict]) -> dict[str, int]:
    """INSERT ... ON CONFLICT (sha256) DO NOTHING: the hash and id of each row inserted; a hash another
    transaction holds uncommitted waits for it (Postgres; SQLite has one writer) and is then skipped."""
    dialect = postgresql if db_session.get_bind().dialect.name == "postgresql" else sqlite
    statement = (
        dialect.insert(Image)
        .on_conflict_do_nothing(index_elements=[Image.sha256])
        .returning(Image.sha256, Image.id)
    )
    return dict(db_session.execute(statement, rows).all())  # many rows, one statement compiled once


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
    entries: Iterable[ImportItem],
    limits: ImageLimits,
    executor: Executor,
    checker: Executor | None = None,
    commit_batches: bool = False,
    on_batch: Callable[[ImportReport], None] | None = None,
    ahead: int = 4,
) -> ImportReport:
    """Import every entry in batches: the executor's threads read and hash files, the checker (processes in
    the CLI; the executor by default) decodes them and writes them to a local store (the executor writes to
    S3), and this thread alone writes the database.

    Up to BATCHES_AHEAD batches are read and being checked while the oldest is written, so checking does
    not wait for the database or the store. With commit_batches, each batch is committed on its own and no
    transaction stays open while files are read, downloaded or checked (SQLite's write lock is held only to
    write); otherwise the caller's one transaction holds the import. on_batch runs after each batch is
    written (the CLI moves its bar). If the import fails, the files of the rows inserted since the last
    commit are removed before the error reaches the caller, whose rollback removes the rows: no file is
    left without its row. Pending files are read `ahead` at a time; the added images' near-duplicates are
    reported at the end.
    """
    report = ImportReport()
    checker = checker or executor
    storer = checker if store.writes_locally else executor  # fsyncs spend CPU; S3 writes wait on the network
    queued: deque[PreparedBatch] = deque()

    def end_reads() -> None:
        if commit_batches:
            db_session.commit()

    def write_oldest() -> None:
        store_batch(
            db_session=db_session,
            store=store,
            competition=competition,
            batch=queued.popleft(),
            storer=storer,
            report=report,
        )
        if commit_batches:
            db_session.commit()
            report.unconfirmed.clear()
        if on_batch is not None:
            on_batch(report)

    end_reads()
    try:
        for window in batched(entries, URI_WINDOW, IMPORT_BATCH_BYTES):
            todo = skip_imported(db_session, competition, window, report)
            end_reads()
            read = read_ahead(todo, executor, ahead)
            for entries_read in batched(read, IMPORT_BATCH_SIZE, IMPORT_BATCH_BYTES):
                queued.append(
                    prepare_batch(
                        db_session=db_session,
                        entries=entries_read,
                        limits=limits,
                        executor=executor,
                        checker=checker,
                        report=report,
                    )
                )
                end_reads()
                while len(queued) > BATCHES_AHEAD or sum(b.nbytes for b in queued) > IMPORT_BATCH_BYTES:
                    write_oldest()
        while queued:
            write_oldest()
    except BaseException:
        for sha256, image_format in report.unconfirmed:
            store.remove(sha256, image_format)
        raise
    report.near_duplicates = near_duplicates_of(db_session, competition, report.added)
    return report


def near_duplicates_of(
    db_session: Session, competition: Competition, added: list[tuple[str, str]]
) -> list[tuple[str, str]]:
    """(name, which image it nearly duplicates and by how many bits) for each pair of the competition's
    images within NEAR_DUPLICATE_BITS pHash bits of which at least one was just added."""
    if not added:
        return []
    rows = db_session.execute(
        select(Image.sha256, Image.phash, Image.original_name)
        .join(CompetitionImage, CompetitionImage.image_id == Image.id)
        .where(CompetitionImage.competition_id == competition.id, Image.phash.is_not(None))
        .order_by(CompetitionImage.ordinal)
    ).all()
    name_of_new = {sha256: name for name, sha256 in added}
    hashes = np.array([phash for _, phash, _ in rows], dtype=np.int64).view(np.uint64)
    is_new = np.array([sha256 in name_of_new for sha256, _, _ in rows], dtype=bool)
    names = [name_of_new.get(sha256, f"{original_name} ({sha256[:12]})") for sha256, _, original_name in rows]
    return [
        (names[j], f"{distance} of 64 pHash bits from {names[i]}")
        if is_new[j] and not is_new[i]
        else (names[i], f"{distance} of 64 pHash bits from {names[j]}")
        for i, j, distance in near_duplicate_pairs(hashes, is_new, NEAR_DUPLICATE_BITS)
    ]


def image_counts(*, db_session: Session) -> dict[int, int]:
    """Number of images per competition id."""
    rows = db_session.execute(
        select(CompetitionImage.competition_id, func.count()).group_by(CompetitionImage.competition_id)
    )
    return dict(rows.all())


def competition_image_count(*, db_session: Session, competition_id: int) -> int:
    """Number of images (ordinals 0..n-1) in a competition: its last ordinal + 1, found in the (competition,
    ordinal) index instead of counting a million rows (ordinals are dense and links never removed)."""
    last = db_session.scalar(
        select(func.max(CompetitionImage.ordinal)).where(CompetitionImage.competition_id == competition_id)
    )
    return 0 if last is None else last + 1


def image_id_in_competition(*, db_session: Session, competition: Competition, sha256: str) -> int:
    """The id of the competition's image with this hash, or NotFound."""
    image_id = db_session.scalar(
        select(Image.id)
        .join(CompetitionImage, CompetitionImage.image_id == Image.id)
        .where(Image.sha256 == sha256, CompetitionImage.competition_id == competition.id)
    )
    if image_id is None:
        raise NotFound(f"no image {sha256} in this competition")
    return image_id


def exclude_image(
    *, db_session: Session, competition: Competition, sha256: str, reason: str
) -> tuple[Image, CompetitionImage]:
    """Keep an image out of every future selection (labelling's discard_image then takes it from the pairs
    that selected it)."""
    row = db_session.execute(
        select(Image, CompetitionImage)
        .join(CompetitionImage, CompetitionImage.image_id == Image.id)
        .where(CompetitionImage.competition_id == competition.id, Image.sha256 == sha256)
        .with_for_update(of=CompetitionImage)
    ).first()
    if row is None:
        raise NotFound(f"no image {sha256} in competition {competition.name!r}")
    link = row.CompetitionImage
    link.excluded = True
    link.excluded_reason = reason
    db_session.flush()
    return row.Image, link
