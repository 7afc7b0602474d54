"""Dense per-classifier prediction arrays aligned to a competition's image ordinals, stored as shards.

Arrays (row i = image ordinal start + i):
  top1          int32 (n,)     predicted label; -1 = no prediction (e.g. an undecodable image)
  prob          float32 (n,)   probability of top1; 0 where there is no prediction
  entropy_bits  float32 (n,)   softmax entropy in bits, -sum p log2 p; NaN where unknown
  top5          int32 (n, 5)   five most probable labels, best first; -1 where absent
  top5_prob     float32 (n, 5) their probabilities; 0 where absent

Layout in the blob store: predictions/<classifier_id>/shard-<start>-<end>.npz, start and end zero-padded to
10 digits, holding the five arrays (uncompressed npz) for ordinals [start, end). Blob writes are atomic, so
a crash or a full disk never leaves a partial shard and re-writing a shard replaces it whole.
"""

import io
import re
import zipfile
from dataclasses import dataclass

import numpy as np

from app.storage import BlobStore
from app.storage.keys import prediction_shard_key, predictions_prefix

NO_LABEL = -1
TOP_K = 5
SHARD_NAME = re.compile(r"shard-(\d{10})-(\d{10})\.npz")
SHARD_CONTENT_TYPE = "application/octet-stream"
CLASSIFIER_DIR_NAME = re.compile(r"[A-Za-z0-9_-]+")
ARRAY_DTYPES = {
    "top1": np.int32,
    "prob": np.float32,
    "entropy_bits": np.float32,
    "top5": np.int32,
    "top5_prob": np.float32,
}


class PredictionStoreError(RuntimeError):
    """Stored predictions are incomplete, overlapping or unreadable; the message names ordinals or file."""


EMPTY_VALUES = {"top1": NO_LABEL, "prob": 0, "entropy_bits": np.nan, "top5": NO_LABEL, "top5_prob": 0}
"""What each array holds where there is no prediction."""


def empty_array(name: str, n: int) -> np.ndarray:
    """One array of `n` rows of no prediction."""
    shape = (n, TOP_K) if name.startswith("top5") else (n,)
    return np.full(shape, EMPTY_VALUES[name], ARRAY_DTYPES[name])


def check_array(name: str, array: np.ndarray, n: int) -> None:
    """Raise ValueError unless `array` has the dtype and shape of `name` for n rows."""
    shape = (n, TOP_K) if name.startswith("top5") else (n,)
    if array.dtype != ARRAY_DTYPES[name] or array.shape != shape:
        raise ValueError(
            f"{name} must be {np.dtype(ARRAY_DTYPES[name])} {shape}, got {array.dtype} {array.shape}"
        )


@dataclass(frozen=True, eq=False)
class Predictions:
    """One classifier's predictions for a run of images, one row per image (layout: module docstring)."""

    top1: np.ndarray
    prob: np.ndarray
    entropy_bits: np.ndarray
    top5: np.ndarray
    top5_prob: np.ndarray

    def __post_init__(self) -> None:
        """Check every array's dtype and shape against the layout."""
        for name in ARRAY_DTYPES:
            check_array(name, getattr(self, name), len(self.top1))

    def __len__(self) -> int:
        """Number of images."""
        return len(self.top1)

    @classmethod
    def empty(cls, n: int) -> "Predictions":
        """`n` rows of no prediction."""
        return cls(**{name: empty_array(name, n) for name in ARRAY_DTYPES})

    @classmethod
    def concatenate(cls, parts: list["Predictions"]) -> "Predictions":
        """The rows of `parts`, one after another."""
        return cls(**{name: np.concatenate([getattr(part, name) for part in parts]) for name in ARRAY_DTYPES})

    def arrays(self) -> dict[str, np.ndarray]:
        """The five arrays by name."""
        return {name: getattr(self, name) for name in ARRAY_DTYPES}


class PredictionStore:
    """Prediction shards of every classifier, in one blob store."""

    def __init__(self, blobs: BlobStore) -> None:
        self.blobs = blobs

    def prefix(self, classifier_id: int | str) -> str:
        """The key prefix of one classifier's shards."""
        name = str(classifier_id)
        if not CLASSIFIER_DIR_NAME.fullmatch(name):
            raise ValueError(f"classifier id {name!r} must be letters, digits, '_' or '-'")
        return predictions_prefix(name)

    def write_shard(self, classifier_id: int | str, start: int, predictions: Predictions) -> str:
        """Atomically store predictions for ordinals [start, start + len), replacing the same shard."""
        if start < 0 or len(predictions) == 0:
            raise ValueError(f"a shard needs start >= 0 and rows; got start {start}, {len(predictions)} rows")
        self.prefix(classifier_id)
        key = prediction_shard_key(classifier_id, start, start + len(predictions))
        buffer = io.BytesIO()
        np.savez(buffer, allow_pickle=False, **predictions.arrays())
        self.blobs.put(key, buffer.getvalue(), content_type=SHARD_CONTENT_TYPE, immutable=False)
        return key

    def shard_ranges(self, classifier_id: int | str) -> list[tuple[int, int]]:
        """The [start, end) ordinal ranges of one classifier's stored shards, sorted."""
        keys = self.blobs.list_keys(self.prefix(classifier_id))
        matches = (SHARD_NAME.fullmatch(key.rsplit("/", 1)[-1]) for key in keys)
        return sorted((int(match[1]), int(match[2])) for match in matches if match)

    def read(self, classifier_id: int | str, n_images: int) -> Predictions:
        """One classifier's predictions for ordinals 0..n_images-1, checking each is stored exactly once."""
        ranges = self.shard_ranges(classifier_id)
        _check_coverage(ranges, n_images, classifier_id)
        parts = [
            Predictions(**arrays) for arrays in self._read_shards(classifier_id, ranges, tuple(ARRAY_DTYPES))
        ]
        return Predictions.concatenate(parts) if parts else Predictions.empty(0)

    def read_available(self, classifier_id: int | str, n_images: int) -> Predictions:
        """Predictions for ordinals 0..n_images-1, with no-prediction rows where no shard is stored (yet)."""
        return Predictions(**self.read_available_arrays(classifier_id, n_images, tuple(ARRAY_DTYPES)))

    def read_available_arrays(
        self, classifier_id: int | str, n_images: int, names: tuple[str, ...]
    ) -> dict[str, np.ndarray]:
        """The named arrays of read_available, reading only those from each shard (a selection needs two
        of the five)."""
        ranges = self.shard_ranges(classifier_id)
        _check_no_overlap_or_overrun(ranges, n_images, classifier_id)
        arrays = {name: empty_array(name, n_images) for name in names}
        for (start, end), shard in zip(ranges, self._read_shards(classifier_id, ranges, names), strict=True):
            for name, values in shard.items():
                arrays[name][start:end] = values
        return arrays

    def _read_shards(
        self, classifier_id: int | str, ranges: list[tuple[int, int]], names: tuple[str, ...]
    ) -> list[dict[str, np.ndarray]]:
        """The named arrays of the shards of these ranges, fetched together."""
        keys = [prediction_shard_key(classifier_id, start, end) for start, end in ranges]
        blobs = self.blobs.get_many(keys)
        return [
            _read_shard(key, data, end - start, names)
            for key, data, (start, end) in zip(keys, blobs, ranges, strict=True)
        ]

    def delete(self, classifier_id: int | str) -> None:
        """Remove every shard of one classifier (e.g. before storing an upload that replaces them)."""
        self.blobs.delete_prefix(self.prefix(classifier_id))


def _check_coverage(ranges: list[tuple[int, int]], n_images: int, classifier_id: int | str) -> None:
    """Raise PredictionStoreError naming the first gap, overlap or overrun in sorted shard `ranges`."""
    _check_no_overlap_or_overrun(ranges, n_images, classifier_id)
    covered = 0
    for start, end in [*ranges, (n_images, n_images)]:
        if start > covered:
            raise PredictionStoreError(
                f"classifier {classifier_id}: ordinals {covered}..{start - 1} have no stored predictions"
            )
        covered = end


def _check_no_overlap_or_overrun(
    ranges: list[tuple[int, int]], n_images: int, classifier_id: int | str
) -> None:
    """Raise PredictionStoreError when sorted shard `ranges` overlap or reach past n_images."""
    covered = 0
    for start, end in ranges:
        if start < covered:
            raise PredictionStoreError(
                f"classifier {classifier_id}: ordinals {start}..{min(end, covered) - 1} are stored twice "
                f"(shard {start}-{end} overlaps an earlier shard)"
            )
        covered = end
    if covered > n_images:
        raise PredictionStoreError(
            f"classifier {classifier_id}: shards reach ordinal {covered - 1}, "
            f"but the competition has {n_images} images"
        )


def _read_shard(key: str, data: bytes, n_rows: int, names: tuple[str, ...]) -> dict[str, np.ndarray]:
    """The named arrays in one shard blob, each checked to hold `n_rows` rows of the documented layout."""
    try:
        with np.load(io.BytesIO(data), allow_pickle=False) as shard:
            arrays = {name: shard[name] for name in names}
    except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile) as error:
        raise PredictionStoreError(f"prediction shard {key} is unreadable: {error}") from error
    rows = len(arrays[names[0]])
    try:
        for name, array in arrays.items():
            check_array(name, array, rows)
    except ValueError as error:
        raise PredictionStoreError(f"prediction shard {key} is unreadable: {error}") from error
    if rows != n_rows:
        raise PredictionStoreError(f"prediction shard {key} has {rows} rows, expected {n_rows}")
    return arrays
