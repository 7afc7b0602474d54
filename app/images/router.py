"""Images: upload into a competition (admin), list a corpus, serve files and thumbnails by hash."""

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Annotated

from fastapi import APIRouter, File, Query, Request, UploadFile, status
from fastapi.responses import FileResponse, Response
from sqlalchemy import select

from app.competitions.dependencies import CompetitionDep
from app.db.session import SessionDep
from app.errors import NotFound
from app.images import service
from app.images.models import CompetitionImage, Image
from app.images.schemas import ImageExclusion, ImageRead, ImportReportRead
from app.images.sources import (
    Candidate,
    ImportEntry,
    ReadLimits,
    Rejected,
    archive_entries,
    is_archive_name,
    printable,
)
from app.images.store import CONTENT_TYPES, THUMBNAIL_CONTENT_TYPE, ImageStore, check_sha256
from app.jobs.service import enqueue_competition_predictions
from app.labelling.subsets import discard_image
from app.settings import Settings
from app.storage.blobs import IMMUTABLE as IMMUTABLE_CACHE_CONTROL
from app.storage.keys import image_key, thumbnail_key
from app.storage.responses import blob_response
from app.users.auth import AdminUser
from app.web.dependencies import SettingsDep
from app.web.errors import error_responses

router = APIRouter(tags=["images"])

IMMUTABLE = {"Cache-Control": IMMUTABLE_CACHE_CONTROL}
UPLOAD_THREADS = 2


def _limits(settings: Settings) -> service.ImageLimits:
    """The image limits from the settings."""
    return service.ImageLimits(settings.max_image_bytes, settings.max_image_pixels, settings.thumbnail_size)


def _upload_entries(files: list[UploadFile], limits: ReadLimits) -> Iterator[ImportEntry]:
    """Uploaded images, and the members of uploaded zip or tar archives."""
    max_bytes = limits.max_file_bytes
    for upload in files:
        name = printable(upload.filename or "upload")
        if is_archive_name(name):
            yield from archive_entries(upload.file, name, limits)
            continue
        data = upload.file.read(max_bytes + 1)
        if len(data) > max_bytes:
            yield Rejected(name, f"file is over the {max_bytes:,}-byte limit")
        else:
            yield Candidate(name, data)


@router.post(
    "/api/v1/competitions/{competition_id}/images",
    status_code=status.HTTP_201_CREATED,
    summary="Upload images or zip/tar archives into a competition (admin)",
    responses=error_responses(401, 403, 404, 413, 422, 503),
)
def upload_images(
    files: Annotated[
        list[UploadFile], File(description="JPEG, PNG or WebP files, or zip/tar archives of them.")
    ],
    request: Request,
    db_session: SessionDep,
    settings: SettingsDep,
    _admin: AdminUser,
    competition: CompetitionDep,
) -> ImportReportRead:
    """Store new images once by SHA-256; report duplicates and rejected files by name. One transaction.

    Classifiers already in the competition get prediction jobs for the new images.
    """
    limits = _limits(settings)
    with ThreadPoolExecutor(UPLOAD_THREADS) as executor:
        report = service.import_entries(
            db_session=db_session,
            store=ImageStore(settings.blob_store),
            competition=competition,
            entries=_upload_entries(files, ReadLimits.from_settings(settings)),
            limits=limits,
            executor=executor,
        )
    enqueue_competition_predictions(
        db_session=db_session,
        competition_id=competition.id,
        max_attempts=settings.job_max_attempts,
        shard_size=settings.predict_shard_size,
    )
    return ImportReportRead.from_report(report)


@router.get(
    "/api/v1/competitions/{competition_id}/images",
    summary="List a competition's images by ordinal",
    responses=error_responses(404, 422),
)
def list_images(
    db_session: SessionDep,
    competition: CompetitionDep,
    offset: Annotated[int, Query(ge=0)] = 0,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
) -> list[ImageRead]:
    """A page of the corpus in ordinal order (the order of every prediction array)."""
    rows = db_session.execute(
        select(Image, CompetitionImage)
        .join(CompetitionImage, CompetitionImage.image_id == Image.id)
        .where(CompetitionImage.competition_id == competition.id)
        .order_by(CompetitionImage.ordinal)
        .offset(offset)
        .limit(limit)
    )
    return [_image_read(image, link) for image, link in rows]


def _image_read(image: Image, link: CompetitionImage) -> ImageRead:
    """The API view of an image of a competition."""
    return ImageRead(
        ordinal=link.ordinal,
        sha256=image.sha256,
        format=image.format,
        width=image.width,
        height=image.height,
        bytes=image.bytes,
        original_name=image.original_name,
        source_uri=image.source_uri,
        source_url=image.source_url,
        license=image.license,
        author=image.author,
        excluded=link.excluded,
        url=f"/images/{image.sha256}",
        thumbnail_url=f"/thumbnails/{image.sha256}",
    )


@router.post(
    "/api/v1/competitions/{competition_id}/images/{sha256}/exclude",
    summary="Exclude an image from a competition (admin)",
    responses=error_responses(401, 403, 404, 422),
)
def exclude_image(
    sha256: str, body: ImageExclusion, db_session: SessionDep, _admin: AdminUser, competition: CompetitionDep
) -> ImageRead:
    """The image never enters a selection again; pairs that selected it discard it and label their next
    reserve image instead. Excluding is one-way for the pairs (they keep the replacement)."""
    image, link = service.exclude_image(
        db_session=db_session, competition=competition, sha256=check_sha256(sha256), reason=body.reason
    )
    discard_image(db_session=db_session, competition=competition, image_id=image.id)
    return _image_read(image, link)


def _stored_image(db_session, sha256: str) -> Image:
    """The image with this hash, or NotFound."""
    image = db_session.scalar(select(Image).where(Image.sha256 == check_sha256(sha256)))
    if image is None:
        raise NotFound(f"no image with hash {sha256}")
    return image


@router.get(
    "/images/{sha256}",
    response_class=FileResponse,
    responses={200: {"content": {mime: {} for mime in CONTENT_TYPES.values()}}, **error_responses(404, 422)},
    summary="An image file by its SHA-256",
)
def get_image(sha256: str, request: Request, db_session: SessionDep) -> Response:
    """The original bytes with the stored content type; immutable, so cached for a year."""
    image = _stored_image(db_session, sha256)
    return blob_response(
        request.app.state.settings.blob_store,
        image_key(image.sha256, image.format),
        media_type=CONTENT_TYPES[image.format],
        headers=IMMUTABLE,
    )


@router.get(
    "/thumbnails/{sha256}",
    response_class=FileResponse,
    responses={200: {"content": {THUMBNAIL_CONTENT_TYPE: {}}}, **error_responses(404, 422)},
    summary="An image's WebP thumbnail by its SHA-256",
)
def get_thumbnail(sha256: str, request: Request, db_session: SessionDep) -> Response:
    """The thumbnail made at import; immutable, so cached for a year."""
    image = _stored_image(db_session, sha256)
    return blob_response(
        request.app.state.settings.blob_store,
        thumbnail_key(image.sha256),
        media_type=THUMBNAIL_CONTENT_TYPE,
        headers=IMMUTABLE,
    )
