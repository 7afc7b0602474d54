"""The keys of each kind of blob, built only from validated hashes, known formats and integer ids."""

import re

SHA256_PATTERN = re.compile(r"[0-9a-f]{64}")
IMAGE_EXTENSIONS = {"jpeg": "jpg", "png": "png", "webp": "webp"}


def check_sha256(sha256: str) -> str:
    """The hash itself if it is 64 lowercase hex characters, else ValueError."""
    if not SHA256_PATTERN.fullmatch(sha256):
        raise ValueError("a hash is 64 lowercase hexadecimal characters")
    return sha256


def image_key(sha256: str, image_format: str) -> str:
    """images/<sha[:2]>/<sha>.<ext>: an image's original bytes."""
    return f"images/{check_sha256(sha256)[:2]}/{sha256}.{IMAGE_EXTENSIONS[image_format]}"


def thumbnail_key(sha256: str) -> str:
    """thumbnails/<sha[:2]>/<sha>.webp: an image's thumbnail."""
    return f"thumbnails/{check_sha256(sha256)[:2]}/{sha256}.webp"


def weights_key(sha256: str, weights_format: str) -> str:
    """weights/<sha>.<format>: a classifier's weights file."""
    if not weights_format.isalnum():
        raise ValueError(f"unknown weights format {weights_format!r}")
    return f"weights/{check_sha256(sha256)}.{weights_format}"


def predictions_prefix(classifier_id: int | str) -> str:
    """predictions/<classifier id>/: one classifier's prediction shards."""
    return f"predictions/{classifier_id}/"


def prediction_shard_key(classifier_id: int | str, start: int, end: int) -> str:
    """predictions/<classifier id>/shard-<start>-<end>.npz, start and end zero-padded to 10 digits."""
    return f"{predictions_prefix(classifier_id)}shard-{start:010d}-{end:010d}.npz"
