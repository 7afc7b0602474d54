"""Where a classifier's predictions come from and where it stands; shared by models, API and workers."""

from enum import StrEnum


class ClassifierSource(StrEnum):
    """How predictions are made: timm + a weights file, a timm pretrained tag, or an uploaded file."""

    timm_weights = "timm-weights"
    timm_pretrained = "timm-pretrained"
    predictions_file = "predictions-file"


class ClassifierStatus(StrEnum):
    """Lifecycle: pending → predicting → ready, or failed (with the reason), or retired by an admin."""

    pending = "pending"
    predicting = "predicting"
    ready = "ready"
    failed = "failed"
    retired = "retired"
