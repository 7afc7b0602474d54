"""What a job does and where it stands; shared by the models, the API and workers."""

from enum import StrEnum


class JobKind(StrEnum):
    """Predict a shard of ordinals [shard_start, shard_end) or select the subset of a classifier pair."""

    predict = "predict"
    select = "select"


class JobStatus(StrEnum):
    """queued → running (leased) → done, or back to queued on a lost lease, or failed after max_attempts,
    or cancelled when its classifier is retired."""

    queued = "queued"
    running = "running"
    done = "done"
    failed = "failed"
    cancelled = "cancelled"
