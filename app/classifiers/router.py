"""Classifiers API: register (admin), list (public), and the files workers download."""

import io
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated

import numpy as np
from fastapi import APIRouter, File, Form, Query, UploadFile, status
from fastapi.responses import FileResponse, Response
from pydantic import ValidationError

from app.classifiers import service
from app.classifiers.enums import ClassifierSource
from app.classifiers.models import Classifier
from app.classifiers.prediction_store import ARRAY_DTYPES
from app.classifiers.schemas import ClassifierRead, DataConfig
from app.competitions.dependencies import CompetitionDep, VisibleCompetitionDep
from app.competitions.members import check_visible
from app.competitions.service import get_competition
from app.db.session import SessionDep
from app.errors import InvalidInput
from app.images.service import competition_image_count
from app.jobs import lifecycle
from app.storage.keys import weights_key
from app.storage.responses import blob_response
from app.users.auth import AdminUser, OptionalUser, WorkerUser
from app.users.models import Role
from app.web.dependencies import SettingsDep
from app.web.errors import error_responses

router = APIRouter(prefix="/api/v1", tags=["classifiers"])

NPZ_MEDIA_TYPE = "application/octet-stream"


@contextmanager
def _spooled_to_disk(upload: UploadFile) -> Iterator[Path]:
    """The upload as a temporary file keeping its name's suffix (loaders look at it), removed afterwards."""
    suffix = Path(upload.filename or "").suffix
    with tempfile.TemporaryDirectory(prefix="mad-upload-") as directory:
        path = Path(directory) / f"upload{suffix}"
        with path.open("wb") as target:  # its size is bounded by MAD_MAX_UPLOAD_BYTES (app.web.body_guard)
            shutil.copyfileobj(upload.file, target, length=1024 * 1024)
        yield path


def _data_config(text: str | None) -> dict | None:
    """The validated preprocessing overlay of a registration form, or None."""
    if not text:
        return None
    try:
        return DataConfig.model_validate_json(text).overlay()
    except ValidationError as error:
        raise InvalidInput(f"data_config: {error.errors()[0]['msg']} at {error.errors()[0]['loc']}") from None


@router.post(
    "/competitions/{competition_id}/classifiers",
    status_code=status.HTTP_201_CREATED,
    summary="Register a classifier (admin)",
    responses=error_responses(401, 403, 404, 409, 413, 422, 503),
)
def register_classifier(
    db_session: SessionDep,
    settings: SettingsDep,
    _admin: AdminUser,
    competition: CompetitionDep,
    name: Annotated[str, Form(min_length=1, max_length=100)],
    source: Annotated[ClassifierSource, Form()],
    architecture: Annotated[str | None, Form(description="timm architecture, with timm-weights")] = None,
    pretrained_tag: Annotated[
        str | None, Form(description="e.g. resnet50.a1_in1k, with timm-pretrained")
    ] = None,
    reported_accuracy: Annotated[float | None, Form(description="ImageNet top-1 in %, for Table 1")] = None,
    data_config: Annotated[
        str | None, Form(description='Preprocessing overrides as JSON, e.g. {"input_size": [3, 32, 32]}')
    ] = None,
    file: Annotated[
        UploadFile | None, File(description="Weights (.safetensors, .pth, .pt, .bin) or predictions")
    ] = None,
    classifier: Annotated[
        str | None,
        Form(
            description="With predictions-file: whose rows to take from a table of several classifiers' "
            "predictions (its `classifier` column), such as the predictions export; needed when it holds "
            "several"
        ),
    ] = None,
) -> ClassifierRead:
    """Check the source, store it, queue its predictions (or, for a predictions file, its pair selections).

    timm-weights needs `architecture` and a weights `file` with one output per competition class;
    timm-pretrained needs `pretrained_tag`; predictions-file needs a Parquet/NPZ `file` keyed by image sha256
    (`image_sha256` or `sha256`, `top1`, `prob`, optionally `entropy_bits` or `entropy`, `top5`,
    `top5_prob`): the predictions export (`GET …/exports/predictions?format=parquet`) is taken as it is,
    one classifier of it chosen by `classifier`. Errors say what is wrong and nothing is stored.
    """
    common = dict(
        db_session=db_session,
        settings=settings,
        competition=competition,
        name=name,
        reported_accuracy=reported_accuracy,
    )
    if classifier is not None and source != ClassifierSource.predictions_file:
        raise InvalidInput("classifier picks the rows of a predictions file: it goes with predictions-file")
    registered = _register(source, architecture, pretrained_tag, data_config, file, classifier, common)
    lifecycle.enqueue_classifier(db_session=db_session, settings=settings, classifier=registered)
    return ClassifierRead.shown_to(registered, admin=True)


def _register(
    source: ClassifierSource,
    architecture: str | None,
    pretrained_tag: str | None,
    data_config: str | None,
    file: UploadFile | None,
    classifier_in_file: str | None,
    common: dict,
) -> Classifier:
    """Check and store a classifier from the source the form names."""
    if source == ClassifierSource.timm_pretrained:
        if not pretrained_tag:
            raise InvalidInput("timm-pretrained needs pretrained_tag")
        return service.register_timm_pretrained(pretrained_tag=pretrained_tag, **common)
    if file is None:
        raise InvalidInput(f"{source.value} needs a file")
    with _spooled_to_disk(file) as path:
        if source == ClassifierSource.timm_weights:
            if not architecture:
                raise InvalidInput("timm-weights needs architecture")
            return service.register_timm_weights(
                architecture=architecture,
                weights_file=path,
                weights_filename=file.filename or "",
                data_config=_data_config(data_config),
                **common,
            )
        return service.register_predictions_file(
            predictions_file=path, classifier_in_file=classifier_in_file, **common
        )


@router.get(
    "/competitions/{competition_id}/classifiers",
    summary="List a competition's classifiers",
    responses=error_responses(401, 403, 404, 422),
)
def list_classifiers(
    db_session: SessionDep, user: OptionalUser, competition: VisibleCompetitionDep
) -> list[ClassifierRead]:
    """In registration order, with status and why a failed one failed (in one line; admins also get the
    worker's whole report in error_detail)."""
    return [
        ClassifierRead.shown_to(c, admin=_is_admin(user))
        for c in service.list_classifiers(db_session=db_session, competition_id=competition.id)
    ]


@router.get(
    "/classifiers/{classifier_id}", summary="Read a classifier", responses=error_responses(401, 403, 404, 422)
)
def read_classifier(classifier_id: int, db_session: SessionDep, user: OptionalUser) -> ClassifierRead:
    """One classifier with its status (a failure's detail for admins only, as in the list; a members-only
    competition's to its members and admins)."""
    classifier = service.get_classifier(db_session=db_session, classifier_id=classifier_id)
    competition = get_competition(db_session=db_session, competition_id=classifier.competition_id)
    check_visible(db_session=db_session, competition=competition, user=user)
    return ClassifierRead.shown_to(classifier, admin=_is_admin(user))


def _is_admin(user) -> bool:
    """Whether the caller is a signed-in admin."""
    return user is not None and user.role == Role.admin


@router.post(
    "/classifiers/{classifier_id}/retire",
    summary="Retire a classifier (admin)",
    responses=error_responses(401, 403, 404, 422),
)
def retire_classifier(classifier_id: int, db_session: SessionDep, _admin: AdminUser) -> ClassifierRead:
    """The classifier leaves the leaderboard and its pairs are ignored; its queued and running jobs are
    cancelled. Its stored predictions, selections and votes are kept. Retiring twice is harmless."""
    classifier = service.get_classifier(db_session=db_session, classifier_id=classifier_id)
    retired = lifecycle.retire_classifier(db_session=db_session, classifier=classifier)
    return ClassifierRead.shown_to(retired, admin=True)


@router.get(
    "/classifiers/{classifier_id}/weights",
    response_class=FileResponse,
    responses={200: {"content": {NPZ_MEDIA_TYPE: {}}}, **error_responses(401, 403, 404, 422)},
    summary="Download a classifier's weights file (worker)",
)
def download_weights(classifier_id: int, db_session: SessionDep, settings: SettingsDep, _worker: WorkerUser):
    """The weights file registered with a timm-weights classifier."""
    classifier = service.get_classifier(db_session=db_session, classifier_id=classifier_id)
    if classifier.weights_sha256 is None or classifier.weights_format is None:
        raise InvalidInput(f"classifier {classifier.name!r} has no weights file ({classifier.source.value})")
    key = weights_key(classifier.weights_sha256, classifier.weights_format)
    return blob_response(
        settings.blob_store,
        key,
        media_type=NPZ_MEDIA_TYPE,
        headers={},
        filename=key.rsplit("/", 1)[-1],
    )


@router.get(
    "/classifiers/{classifier_id}/predictions",
    response_class=Response,
    responses={200: {"content": {NPZ_MEDIA_TYPE: {}}}, **error_responses(401, 403, 404, 409, 422)},
    summary="Download a classifier's prediction arrays as .npz (worker)",
)
def download_predictions(
    classifier_id: int,
    db_session: SessionDep,
    settings: SettingsDep,
    _worker: WorkerUser,
    fields: Annotated[list[str] | None, Query(description="Arrays to include (default: all)")] = None,
) -> Response:
    """Arrays over the competition's ordinals 0..n-1; ordinals not predicted (yet) have top1 = -1."""
    fields = fields or list(ARRAY_DTYPES)
    unknown = sorted(set(fields) - set(ARRAY_DTYPES))
    if unknown:
        raise InvalidInput(f"unknown fields {unknown}; choose from {list(ARRAY_DTYPES)}")
    classifier = service.get_classifier(db_session=db_session, classifier_id=classifier_id)
    n_images = competition_image_count(db_session=db_session, competition_id=classifier.competition_id)
    arrays = service.read_prediction_arrays(
        settings=settings, classifier=classifier, n_images=n_images, names=tuple(dict.fromkeys(fields))
    )
    buffer = io.BytesIO()
    np.savez(buffer, allow_pickle=False, **arrays)
    return Response(buffer.getvalue(), media_type=NPZ_MEDIA_TYPE)
