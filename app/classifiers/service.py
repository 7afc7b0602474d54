"""Registering classifiers (timm + weights file, timm pretrained tag, uploaded predictions) and their arrays.

Registration checks everything it can before storing anything: a weights file is loaded into its
architecture with the competition's class count, a predictions file is fully validated. What only a
worker can find out (e.g. a pretrained download failing) marks the classifier failed with the reason.
The jobs of a registered classifier are queued by app.jobs.lifecycle.enqueue_classifier.
"""

import hashlib
from pathlib import Path

import numpy as np
from sqlalchemy import func, literal, select
from sqlalchemy.dialects.postgresql import aggregate_order_by
from sqlalchemy.orm import Session

from app.classifiers.enums import ClassifierSource, ClassifierStatus
from app.classifiers.models import Classifier
from app.classifiers.prediction_store import ARRAY_DTYPES, Predictions, PredictionStore, PredictionStoreError
from app.classifiers.prediction_upload import HASH_DTYPE, PredictionUploadError, read_prediction_upload
from app.competitions.models import Competition
from app.errors import Conflict, InvalidInput, NotFound, storage_errors
from app.images.models import CompetitionImage, Image
from app.images.service import competition_image_count
from app.settings import Settings
from app.storage.keys import weights_key

WEIGHTS_CONTENT_TYPE = "application/octet-stream"
HASHES_PER_QUERY = 1_000_000
"""Image hashes joined into one string by Postgres (64 MB; a text value may hold 1 GB)."""


def get_classifier(*, db_session: Session, classifier_id: int) -> Classifier:
    """The classifier with this id, or NotFound."""
    classifier = db_session.get(Classifier, classifier_id)
    if classifier is None:
        raise NotFound(f"no classifier with id {classifier_id}")
    return classifier


def list_classifiers(*, db_session: Session, competition_id: int) -> list[Classifier]:
    """A competition's classifiers in registration order (the row order of matrices A and B)."""
    return list(
        db_session.scalars(
            select(Classifier).where(Classifier.competition_id == competition_id).order_by(Classifier.id)
        )
    )


def _new_classifier(
    *, db_session: Session, competition: Competition, name: str, reported_accuracy: float | None, **fields
) -> Classifier:
    """Add a classifier row after checking its name is free in the competition."""
    taken = db_session.scalar(
        select(Classifier.id).where(Classifier.competition_id == competition.id, Classifier.name == name)
    )
    if taken is not None:
        raise Conflict(f"competition {competition.name!r} already has a classifier named {name!r}")
    if reported_accuracy is not None and not 0 <= reported_accuracy <= 100:
        raise InvalidInput("reported_accuracy is a top-1 accuracy in percent, between 0 and 100")
    classifier = Classifier(
        competition_id=competition.id, name=name, reported_accuracy=reported_accuracy, **fields
    )
    db_session.add(classifier)
    db_session.flush()
    return classifier


def register_timm_weights(
    *,
    db_session: Session,
    settings: Settings,
    competition: Competition,
    name: str,
    architecture: str,
    weights_file: Path,
    weights_filename: str,
    data_config: dict | None = None,
    reported_accuracy: float | None = None,
) -> Classifier:
    """A timm architecture with a local weights file, checked by loading it with the competition's classes.

    `data_config` (a DataConfig overlay) sets preprocessing the weights were trained with, e.g. a 32 px input.
    """
    # torch and timm load here, not at import: the server and the CLI start in a fraction of the time.
    from app.classifiers.timm_source import (
        WEIGHTS_FORMATS,
        ClassifierSourceError,
        load_weights_file,
        weights_format,
    )

    stored_format = weights_format(weights_filename)
    if stored_format is None:
        raise InvalidInput(f"weights file {weights_filename!r}: use {', '.join(WEIGHTS_FORMATS)}")
    try:
        load_weights_file(
            architecture,
            weights_file,
            len(competition.class_keys),
            data_config,
            shown_name=weights_filename,
        )
    except ClassifierSourceError as error:
        raise InvalidInput(str(error)) from None
    sha256 = hashlib.sha256(weights_file.read_bytes()).hexdigest()
    classifier = _new_classifier(
        db_session=db_session,
        competition=competition,
        name=name,
        reported_accuracy=reported_accuracy,
        source=ClassifierSource.timm_weights,
        architecture=architecture,
        weights_sha256=sha256,
        weights_format=stored_format,
        data_config=data_config or None,
    )
    stored = weights_key(sha256, stored_format)
    with storage_errors("the weights file"):
        if not settings.blob_store.exists(stored):
            settings.blob_store.put_file(stored, weights_file, content_type=WEIGHTS_CONTENT_TYPE)
    PredictionStore(settings.blob_store).delete(classifier.id)
    return classifier


def register_timm_pretrained(
    *,
    db_session: Session,
    settings: Settings,
    competition: Competition,
    name: str,
    pretrained_tag: str,
    reported_accuracy: float | None = None,
) -> Classifier:
    """A timm pretrained tag (e.g. resnet50.a1_in1k); a worker downloads the weights where it is online."""
    import timm  # loaded on use, as in register_timm_weights
    from timm.models import get_pretrained_cfg

    try:
        config = get_pretrained_cfg(pretrained_tag) if timm.is_model(pretrained_tag) else None
    except RuntimeError:  # timm's answer to a known architecture with an unknown tag
        config = None
    if config is None:
        raise InvalidInput(f"timm has no pretrained tag {pretrained_tag!r} (see timm.list_pretrained())")
    if config.num_classes != len(competition.class_keys):
        raise InvalidInput(
            f"{pretrained_tag!r} predicts {config.num_classes} classes, competition {competition.name!r} has "
            f"{len(competition.class_keys)}"
        )
    classifier = _new_classifier(
        db_session=db_session,
        competition=competition,
        name=name,
        reported_accuracy=reported_accuracy,
        source=ClassifierSource.timm_pretrained,
        architecture=pretrained_tag.split(".")[0],
        pretrained_tag=pretrained_tag,
    )
    PredictionStore(settings.blob_store).delete(classifier.id)
    return classifier


def competition_hashes(*, db_session: Session, competition_id: int) -> np.ndarray:
    """The sha256 of each image of the competition in ordinal order (0..n-1), as HASH_DTYPE; on Postgres
    joined into one string per HASHES_PER_QUERY images (string_agg), not fetched as a million rows."""
    statement = (
        select(Image.sha256)
        .join(CompetitionImage, CompetitionImage.image_id == Image.id)
        .where(CompetitionImage.competition_id == competition_id)
    )
    if db_session.get_bind().dialect.name != "postgresql":
        rows = db_session.scalars(statement.order_by(CompetitionImage.ordinal)).all()
        return np.array(rows, dtype=HASH_DTYPE)
    joined = statement.with_only_columns(
        func.string_agg(Image.sha256, aggregate_order_by(literal(""), CompetitionImage.ordinal))
    )
    n_images = competition_image_count(db_session=db_session, competition_id=competition_id)
    parts = [
        db_session.execute(
            joined.where(
                CompetitionImage.ordinal >= start, CompetitionImage.ordinal < start + HASHES_PER_QUERY
            )
        )
        .scalar_one()
        .encode()
        for start in range(0, n_images, HASHES_PER_QUERY)
    ]
    return np.frombuffer(b"".join(parts), HASH_DTYPE)


def ordinal_by_sha256(*, db_session: Session, competition_id: int) -> dict[str, int]:
    """Each image of the competition by its hash."""
    rows = db_session.execute(
        select(Image.sha256, CompetitionImage.ordinal)
        .join(CompetitionImage, CompetitionImage.image_id == Image.id)
        .where(CompetitionImage.competition_id == competition_id)
    )
    return dict(rows.all())


def register_predictions_file(
    *,
    db_session: Session,
    settings: Settings,
    competition: Competition,
    name: str,
    predictions_file: Path,
    reported_accuracy: float | None = None,
    classifier_in_file: str | None = None,
) -> Classifier:
    """Predictions made elsewhere (Parquet or NPZ keyed by image SHA-256), validated whole, then stored;
    from a table of several classifiers (the predictions export), those of `classifier_in_file`."""
    hashes = competition_hashes(db_session=db_session, competition_id=competition.id)
    if not len(hashes):
        raise InvalidInput(f"competition {competition.name!r} has no images yet: import them first")
    try:
        predictions = read_prediction_upload(
            predictions_file, hashes, len(competition.class_keys), classifier=classifier_in_file
        )
    except PredictionUploadError as error:
        raise InvalidInput(f"predictions file: {error}") from None
    classifier = _new_classifier(
        db_session=db_session,
        competition=competition,
        name=name,
        reported_accuracy=reported_accuracy,
        source=ClassifierSource.predictions_file,
        status=ClassifierStatus.ready,
    )
    store = PredictionStore(settings.blob_store)
    store.delete(classifier.id)
    with storage_errors("the predictions file"):
        store.write_shard(classifier.id, 0, predictions)
    return classifier


def read_predictions(*, settings: Settings, classifier: Classifier, n_images: int) -> Predictions:
    """A classifier's predictions for ordinals 0..n-1; ordinals it has not predicted (yet) get none."""
    return Predictions(
        **read_prediction_arrays(
            settings=settings, classifier=classifier, n_images=n_images, names=tuple(ARRAY_DTYPES)
        )
    )


def read_prediction_arrays(
    *, settings: Settings, classifier: Classifier, n_images: int, names: tuple[str, ...]
) -> dict[str, np.ndarray]:
    """The named arrays of read_predictions, only those read."""
    try:
        return PredictionStore(settings.blob_store).read_available_arrays(classifier.id, n_images, names)
    except PredictionStoreError as error:
        raise Conflict(f"predictions of classifier {classifier.name!r} are unusable: {error}") from None


def readable_predictions(settings: Settings, classifier: Classifier, n_images: int) -> Predictions:
    """A classifier's predictions, or none at all while a shard is missing in the middle (shards finish in
    any order while new images are being predicted)."""
    try:
        return read_predictions(settings=settings, classifier=classifier, n_images=n_images)
    except Conflict:
        return Predictions.empty(n_images)
