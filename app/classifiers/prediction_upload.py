"""Read an uploaded predictions file (Parquet or NPZ, keyed by image sha256) into dense prediction arrays.

For classifiers run elsewhere. One row per image, columns (Parquet) or arrays (NPZ) named:
  sha256     hex sha256 of the image file (case-insensitive)   required
  top1       integer label in [0, num_classes)                   required
  prob       probability of top1, in [0, 1]                      required
  entropy    softmax entropy in bits, in [0, log2(num_classes)]  optional (NaN when absent)
  top5       five labels per row, best first; -1 pads             optional, together with top5_prob
  top5_prob  their probabilities, in [0, 1]                       optional, together with top5
In Parquet, top5/top5_prob are list columns of length 5; in NPZ, arrays of shape (n, 5) and sha256 a
fixed-width string array (dtype '<U64' or 'S64'). Images of the competition absent from the file get
no prediction (top1 = -1), as if they could not be decoded.
"""

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from app.classifiers.npz import NpzError, load_npz
from app.classifiers.prediction_store import NO_LABEL, TOP_K, Predictions

REQUIRED_COLUMNS = ("sha256", "top1", "prob")
OPTIONAL_COLUMNS = ("entropy", "top5", "top5_prob")
PARQUET_MAGIC = b"PAR1"
ZIP_MAGIC = b"PK\x03\x04"
MAX_BYTES_PER_ROW = 256
"""Most bytes an NPZ array may hold per image of the competition (a '<U64' hash is 256)."""
EXAMPLES_SHOWN = 3
HASH_CHARS = 64
HASH_DTYPE = np.dtype(f"S{HASH_CHARS}")
"""Hex sha256 values as fixed-width bytes, the form in which hashes are matched."""
LOWER_ASCII = np.array([ord(chr(code).lower()) if code < 128 else 0 for code in range(256)], np.uint8)
"""Each byte lowercased; a byte outside ASCII becomes 0."""
ENTROPY_SLACK_BITS = 1e-3


class PredictionUploadError(ValueError):
    """An uploaded predictions file that cannot be used; the message says what is wrong and where."""


def read_prediction_upload(path: Path, competition_hashes: np.ndarray, num_classes: int) -> Predictions:
    """Dense predictions for ordinals 0..n-1 from an uploaded Parquet or NPZ file.

    `competition_hashes` holds the sha256 of each of the competition's n images in ordinal order, as
    lowercase hex in a HASH_DTYPE array.
    """
    columns = _read_columns(path, max_rows=len(competition_hashes))
    missing = [name for name in REQUIRED_COLUMNS if name not in columns]
    if missing:
        raise PredictionUploadError(
            f"missing column(s) {', '.join(missing)}; the file has {', '.join(sorted(columns)) or 'none'}"
        )
    if ("top5" in columns) != ("top5_prob" in columns):
        raise PredictionUploadError("top5 and top5_prob must be given together")
    n_rows = _check_lengths(columns)
    ordinals = _ordinals(columns["sha256"], competition_hashes)
    rows = _validated_rows(columns, num_classes, n_rows)
    predictions = Predictions.empty(len(competition_hashes))
    for name, values in rows.arrays().items():
        getattr(predictions, name)[ordinals] = values
    return predictions


def _read_columns(path: Path, max_rows: int) -> dict[str, np.ndarray]:
    """The known columns of a Parquet or NPZ file as numpy arrays, told apart by their magic bytes; a file
    of more than max_rows rows is refused before its data is unpacked."""
    try:
        with path.open("rb") as file:
            magic = file.read(4)
    except OSError as error:
        raise PredictionUploadError(f"cannot open the predictions file: {error}") from error
    if magic == PARQUET_MAGIC:
        return _read_parquet(path, max_rows)
    if magic == ZIP_MAGIC:
        return _read_npz(path, max_rows)
    raise PredictionUploadError("the predictions file is neither Parquet nor NPZ")


def _read_parquet(path: Path, max_rows: int) -> dict[str, np.ndarray]:
    """The known columns of a Parquet file of at most max_rows rows; list columns become (n, 5) arrays."""
    try:
        metadata = pq.ParquetFile(path).metadata
        size = sum(metadata.row_group(index).total_byte_size for index in range(metadata.num_row_groups))
        if metadata.num_rows > max_rows or size > max_rows * MAX_BYTES_PER_ROW:
            raise PredictionUploadError(
                f"the file holds {metadata.num_rows:,} rows ({size:,} bytes unpacked): more than the "
                f"competition's {max_rows:,} images"
            )
        table = pq.read_table(path)
    except (pa.ArrowException, OSError) as error:
        raise PredictionUploadError(f"unreadable Parquet file: {error}") from error
    columns = {}
    for name in (*REQUIRED_COLUMNS, *OPTIONAL_COLUMNS):
        if name not in table.column_names:
            continue
        column = table.column(name).combine_chunks()
        if column.null_count:
            raise PredictionUploadError(f"column {name} has {column.null_count} empty (null) values")
        if name.startswith("top5"):
            columns[name] = _list_column(name, column)
        elif name == "sha256":
            columns[name] = _hash_column(column)
        else:
            columns[name] = column.to_numpy(False)
    return columns


def _hash_column(column: pa.Array) -> np.ndarray:
    """A Parquet column of 64-character strings as HASH_DTYPE over Arrow's buffer; any other column as
    numpy makes it (Python objects for strings of other lengths, refused later)."""
    is_text = pa.types.is_string(column.type) or pa.types.is_binary(column.type)
    if not is_text or not pc.all(pc.equal(pc.binary_length(column), HASH_CHARS)).as_py():
        return column.to_numpy(False)
    _, offsets, data = column.buffers()
    first = int(np.frombuffer(offsets, np.int32, count=1, offset=column.offset * 4)[0])
    return np.frombuffer(data, HASH_DTYPE, count=len(column), offset=first)


def _list_column(name: str, column: pa.Array) -> np.ndarray:
    """A Parquet list column with TOP_K values per row as an (n, TOP_K) array."""
    kind = column.type
    if not (pa.types.is_list(kind) or pa.types.is_large_list(kind) or pa.types.is_fixed_size_list(kind)):
        raise PredictionUploadError(f"column {name} must be a list of {TOP_K} values per row, not {kind}")
    lengths = pc.list_value_length(column).to_numpy(False)
    if len(lengths) and (lengths != TOP_K).any():
        row = int(np.flatnonzero(lengths != TOP_K)[0])
        raise PredictionUploadError(
            f"column {name} needs {TOP_K} values per row; row {row} has {lengths[row]}"
        )
    values = column.flatten()
    if values.null_count:
        raise PredictionUploadError(f"column {name} has {values.null_count} empty (null) values in its lists")
    return values.to_numpy(False).reshape(len(column), TOP_K)


def _read_npz(path: Path, max_rows: int) -> dict[str, np.ndarray]:
    """The known arrays of an NPZ file, each of at most max_rows rows' worth of bytes."""
    try:
        return load_npz(str(path), (*REQUIRED_COLUMNS, *OPTIONAL_COLUMNS), max_rows * MAX_BYTES_PER_ROW)
    except NpzError as error:
        raise PredictionUploadError(
            f"unreadable NPZ file ({error}); arrays must be numbers or fixed-width strings (sha256 as '<U64')"
        ) from error


def _check_lengths(columns: dict[str, np.ndarray]) -> int:
    """The number of rows, after checking every column has it and the documented shape."""
    n_rows = len(columns["sha256"])
    if n_rows == 0:
        raise PredictionUploadError("the predictions file has no rows")
    for name, values in columns.items():
        shape = (n_rows, TOP_K) if name.startswith("top5") else (n_rows,)
        if values.shape != shape:
            raise PredictionUploadError(f"{name} must have shape {shape}, got {values.shape}")
    return n_rows


def _ordinals(values: np.ndarray, competition_hashes: np.ndarray) -> np.ndarray:
    """The ordinal of each row's image, refusing duplicate or unknown hashes (matched by Arrow's hash
    table over the fixed-width hashes, not row by row)."""
    if values.dtype.kind not in "USO":
        raise PredictionUploadError(f"sha256 must hold hex strings, not {values.dtype}")
    if values.dtype.kind == "O":  # only Parquet hashes not all 64 characters long: a file to refuse
        values = np.array([_text(value) for value in values])
    index = pc.index_in(_fixed_width(_hashes(values)), value_set=_fixed_width(competition_hashes))
    ordinals = pc.fill_null(index, -1).to_numpy().astype(np.int64)
    unknown = np.flatnonzero(ordinals < 0)
    duplicated = _first_of_repeated(np.char.lower(values)) if len(unknown) else _first_of_repeated(ordinals)
    if len(duplicated):
        raise PredictionUploadError(
            f"{len(duplicated)} sha256 value(s) occur more than once: {_shown(values, duplicated)}"
        )
    if len(unknown):
        raise PredictionUploadError(
            f"{len(unknown)} sha256 value(s) are not images of this competition: {_shown(values, unknown)}"
        )
    return ordinals


def _hashes(values: np.ndarray) -> np.ndarray:
    """A sha256 column of strings or bytes as lowercase HASH_DTYPE, in which a value that is not 64 ASCII
    characters holds a zero byte, which no image's hash does."""
    codes: np.ndarray = values.view(np.uint32 if values.dtype.kind == "U" else np.uint8).reshape(
        len(values), -1
    )
    if codes.shape[1] != HASH_CHARS:  # a file to refuse, unless these are '<U64' strings
        too_long = codes[:, HASH_CHARS:].any(axis=1)
        codes = np.pad(codes[:, :HASH_CHARS], ((0, 0), (0, max(0, HASH_CHARS - codes.shape[1]))))
        codes[too_long, 0] = 0
    if codes.dtype != np.uint8:
        codes = np.where(codes < len(LOWER_ASCII), codes, 0).astype(np.uint8)
    return LOWER_ASCII[codes].view(HASH_DTYPE).ravel()


def _fixed_width(hashes: np.ndarray) -> pa.FixedSizeBinaryArray:
    """A HASH_DTYPE array as an Arrow array over the same memory."""
    hashes = np.ascontiguousarray(hashes)
    return pa.FixedSizeBinaryArray.from_buffers(
        pa.binary(HASH_CHARS), len(hashes), [None, pa.py_buffer(hashes)]
    )


def _first_of_repeated(keys: np.ndarray) -> np.ndarray:
    """The first row of each key that occurs more than once, in row order."""
    _, first, counts = np.unique(keys, return_index=True, return_counts=True)
    return np.sort(first[counts > 1])


def _text(value) -> str:
    """A sha256 value as lowercase text, as it is shown in messages."""
    return (value.decode("ascii", "replace") if isinstance(value, bytes) else str(value)).lower()


def _shown(values: np.ndarray, rows: np.ndarray) -> str:
    """_few of the lowercase values in these rows."""
    return _few([_text(values[row]) for row in rows[: EXAMPLES_SHOWN + 1]])


def _validated_rows(columns: dict[str, np.ndarray], num_classes: int, n_rows: int) -> Predictions:
    """The file's rows as Predictions, after checking labels, probabilities and entropies are in range."""
    top1 = _labels("top1", columns["top1"], num_classes, allow_absent=False)
    prob = _in_range("prob", columns["prob"], 0.0, 1.0)
    entropy = columns.get("entropy")
    if entropy is None:
        entropy_bits = np.full(n_rows, np.nan, np.float32)
    else:
        entropy_bits = _in_range("entropy", entropy, 0.0, np.log2(num_classes) + ENTROPY_SLACK_BITS)
    if "top5" in columns:
        top5 = _labels("top5", columns["top5"], num_classes, allow_absent=True)
        top5_prob = _in_range("top5_prob", columns["top5_prob"], 0.0, 1.0)
        disagree = np.flatnonzero(top5[:, 0] != top1)
        if len(disagree):
            raise PredictionUploadError(
                f"top5's first label differs from top1 in {len(disagree)} row(s), "
                f"e.g. row(s) {_few(disagree.tolist())}"
            )
    else:
        top5 = np.full((n_rows, TOP_K), NO_LABEL, np.int32)
        top5_prob = np.zeros((n_rows, TOP_K), np.float32)
        top5[:, 0], top5_prob[:, 0] = top1, prob
    return Predictions(top1=top1, prob=prob, entropy_bits=entropy_bits, top5=top5, top5_prob=top5_prob)


def _labels(name: str, values: np.ndarray, num_classes: int, *, allow_absent: bool) -> np.ndarray:
    """Integer labels as int32, checked to lie in [0, num_classes) (or be -1 where `allow_absent`)."""
    if values.dtype.kind not in "iu":
        raise PredictionUploadError(f"{name} must hold integer labels, not {values.dtype}")
    lowest = NO_LABEL if allow_absent else 0
    bad = np.flatnonzero(((values < lowest) | (values >= num_classes)).reshape(len(values), -1).any(axis=1))
    if len(bad):
        raise PredictionUploadError(
            f"{name} has labels outside [0, {num_classes}) in {len(bad)} row(s), "
            f"e.g. row(s) {_few(bad.tolist())} with {_few(values[bad].tolist())}"
        )
    return values.astype(np.int32)


def _in_range(name: str, values: np.ndarray, low: float, high: float) -> np.ndarray:
    """Real numbers as float32, checked to be finite and within [low, high]."""
    if values.dtype.kind not in "iuf":
        raise PredictionUploadError(f"{name} must hold numbers, not {values.dtype}")
    inside = np.isfinite(values) & (values >= low) & (values <= high)
    bad = np.flatnonzero(~inside.reshape(len(values), -1).all(axis=1))
    if len(bad):
        raise PredictionUploadError(
            f"{name} must be finite numbers in [{low:g}, {high:g}]; {len(bad)} row(s) are not, "
            f"e.g. row(s) {_few(bad.tolist())} with {_few(values[bad].tolist())}"
        )
    return values.astype(np.float32)


def _few(items: list) -> str:
    """The first EXAMPLES_SHOWN items, comma-separated, with '...' if there are more."""
    shown = ", ".join(str(item) for item in items[:EXAMPLES_SHOWN])
    return shown + (", ..." if len(items) > EXAMPLES_SHOWN else "")
