"""Read an uploaded predictions file (Parquet or NPZ, keyed by image sha256) into dense prediction arrays.

For classifiers run elsewhere, or taken from the service's own predictions export. One row per image,
columns (Parquet) or arrays (NPZ) named as in that export:
  image_sha256  hex sha256 of the image file (case-insensitive)   required (also read as sha256)
  top1          integer label in [0, num_classes)                   required
  prob          probability of top1, in [0, 1]                      required
  entropy_bits  softmax entropy in bits, in [0, log2(num_classes)]  optional (also read as entropy); NaN
                or absent: unknown
  top5          five labels per row, best first; -1 pads             optional, together with top5_prob
  top5_prob     their probabilities, in [0, 1]                       optional, together with top5
  classifier    the classifier's name, Parquet only: a table of several classifiers' rows (as the export)
                gives the rows of the one `classifier` names, or of its only one
In Parquet, top5/top5_prob are list columns of length 5; in NPZ, arrays of shape (n, 5) and the hashes a
fixed-width string array (dtype '<U64' or 'S64'). Other columns (the export's classifier_id, ordinal) are
ignored. Images of the competition absent from the file get no prediction (top1 = -1), as if they could
not be decoded.
"""

from collections import Counter
from collections.abc import Iterable
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from app.classifiers.npz import NpzError, load_npz
from app.classifiers.prediction_store import NO_LABEL, TOP_K, Predictions

SHA256, ENTROPY, CLASSIFIER = "image_sha256", "entropy_bits", "classifier"
REQUIRED_COLUMNS = (SHA256, "top1", "prob")
OPTIONAL_COLUMNS = (ENTROPY, "top5", "top5_prob")
FORMER_NAMES = {"sha256": SHA256, "entropy": ENTROPY}
"""The names the import took before it took the predictions export's, still read."""
MAX_TABLE_CLASSIFIERS = 100
"""Most classifiers' worth of rows (each at most one per image) a table of several may hold."""
READ_BATCH_ROWS = 65_536
"""Rows of a table of several classifiers read at a time, so that only the chosen one's are kept."""
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


def read_prediction_upload(
    path: Path, competition_hashes: np.ndarray, num_classes: int, classifier: str | None = None
) -> Predictions:
    """Dense predictions for ordinals 0..n-1 from an uploaded Parquet or NPZ file; from a table of several
    classifiers, those of `classifier` (needed unless it holds one).

    `competition_hashes` holds the sha256 of each of the competition's n images in ordinal order, as
    lowercase hex in a HASH_DTYPE array.
    """
    columns = _read_columns(path, max_rows=len(competition_hashes), classifier=classifier)
    names = _known_names(columns)
    missing = [_with_former_name(name) for name in REQUIRED_COLUMNS if name not in names]
    if missing:
        raise PredictionUploadError(
            f"missing column(s) {', '.join(missing)}; the file has {', '.join(sorted(columns)) or 'none'}"
        )
    if ("top5" in columns) != ("top5_prob" in columns):
        raise PredictionUploadError("top5 and top5_prob must be given together")
    n_rows = _check_lengths(columns, names[SHA256])
    ordinals = _ordinals(names[SHA256], columns[names[SHA256]], competition_hashes)
    rows = _validated_rows(columns, names, num_classes, n_rows)
    predictions = Predictions.empty(len(competition_hashes))
    for name, values in rows.arrays().items():
        getattr(predictions, name)[ordinals] = values
    return predictions


def _known_names(present: Iterable[str]) -> dict[str, str]:
    """{column: its name in the file} of each known column the file has, under its name or its former one;
    a column given under both names is refused."""
    known: dict[str, str] = {}
    for name in present:
        column = FORMER_NAMES.get(name, name)
        if column not in (*REQUIRED_COLUMNS, *OPTIONAL_COLUMNS):
            continue
        if column in known:
            raise PredictionUploadError(f"the file has both {known[column]} and {name}: keep one")
        known[column] = name
    return known


def _with_former_name(column: str) -> str:
    """A column's name, with the former one it is also read under: 'image_sha256 (or sha256)'."""
    former = [name for name, now in FORMER_NAMES.items() if now == column]
    return f"{column} (or {former[0]})" if former else column


def _read_columns(path: Path, max_rows: int, classifier: str | None) -> dict[str, np.ndarray]:
    """The known columns of a Parquet or NPZ file as numpy arrays under the file's names, told apart by their
    magic bytes; a file of more than max_rows rows (per classifier) is refused before its data is unpacked."""
    try:
        with path.open("rb") as file:
            magic = file.read(4)
    except OSError as error:
        raise PredictionUploadError(f"cannot open the predictions file: {error}") from error
    if magic == PARQUET_MAGIC:
        return _read_parquet(path, max_rows, classifier)
    if magic == ZIP_MAGIC:
        if classifier is not None:
            raise PredictionUploadError(
                f"an NPZ file holds one classifier's predictions: there is no {classifier!r} to pick; only "
                "a Parquet table (such as the predictions export) holds several"
            )
        return _read_npz(path, max_rows)
    raise PredictionUploadError(
        "the predictions file is neither Parquet nor NPZ (the predictions export comes as Parquet with "
        "?format=parquet)"
    )


def _read_parquet(path: Path, max_rows: int, classifier: str | None) -> dict[str, np.ndarray]:
    """The known columns of a Parquet file of at most max_rows rows, or of its rows of one classifier (at
    most max_rows of MAX_TABLE_CLASSIFIERS); list columns become (n, 5) arrays."""
    try:
        file = pq.ParquetFile(path)
        names = list(_known_names(file.schema_arrow.names).values())
        if CLASSIFIER in file.schema_arrow.names:
            table = _rows_of_one_classifier(file, names, classifier, max_rows)
        elif classifier is not None:
            raise PredictionUploadError(
                f"the file has no {CLASSIFIER} column to pick {classifier!r} from: it holds one "
                "classifier's predictions, so name none"
            )
        else:
            _check_size(file.metadata, max_rows, f"the competition's {max_rows:,} images")
            table = file.read(columns=names)
    except (pa.ArrowException, OSError) as error:
        raise PredictionUploadError(f"unreadable Parquet file: {error}") from error
    return {name: _numpy_column(name, table.column(name).combine_chunks()) for name in names}


def _check_size(metadata: pq.FileMetaData, max_rows: int, limit: str) -> None:
    """Refuse a file of more than max_rows rows, or more than max_rows × MAX_BYTES_PER_ROW unpacked."""
    size = sum(metadata.row_group(index).total_byte_size for index in range(metadata.num_row_groups))
    if metadata.num_rows > max_rows or size > max_rows * MAX_BYTES_PER_ROW:
        raise PredictionUploadError(
            f"the file holds {metadata.num_rows:,} rows ({size:,} bytes unpacked): more than {limit}"
        )


def _rows_of_one_classifier(
    file: pq.ParquetFile, names: list[str], classifier: str | None, max_rows: int
) -> pa.Table:
    """The columns `names` of the rows of `classifier` (or of the table's only classifier), read a batch at
    a time so that only those rows are kept."""
    tables = f"{MAX_TABLE_CLASSIFIERS} classifiers' predictions of the competition's {max_rows:,} images"
    _check_size(file.metadata, max_rows * MAX_TABLE_CLASSIFIERS, tables)
    chosen = _chosen_classifier(_classifier_rows(file), classifier, max_rows)
    batches = file.iter_batches(batch_size=READ_BATCH_ROWS, columns=[*names, CLASSIFIER])
    kept = [batch.filter(pc.equal(batch.column(CLASSIFIER), chosen)).select(names) for batch in batches]
    return pa.Table.from_batches(kept, schema=pa.schema([file.schema_arrow.field(name) for name in names]))


def _classifier_rows(file: pq.ParquetFile) -> Counter[str]:
    """Rows per classifier name of the table's classifier column, read a batch at a time."""
    kind = file.schema_arrow.field(CLASSIFIER).type
    if not (pa.types.is_string(kind) or pa.types.is_large_string(kind)):
        raise PredictionUploadError(f"column {CLASSIFIER} must hold classifier names (text), not {kind}")
    rows: Counter[str] = Counter()
    for batch in file.iter_batches(batch_size=READ_BATCH_ROWS, columns=[CLASSIFIER]):
        names = batch.column(0)
        if names.null_count:
            raise PredictionUploadError(f"column {CLASSIFIER} has empty (null) values")
        for entry in pc.value_counts(names).to_pylist():
            rows[entry["values"]] += entry["counts"]
    return rows


def _chosen_classifier(rows: Counter[str], classifier: str | None, max_rows: int) -> str | None:
    """The classifier whose rows to take: the one named, or the table's only one; refused when the table
    holds several and none is named, when it lacks the one named, or when it has too many rows."""
    held = ", ".join(f"{name} ({count:,} rows)" for name, count in sorted(rows.items()))
    if classifier is None and len(rows) > 1:
        raise PredictionUploadError(
            f"the file holds the predictions of {len(rows)} classifiers: {held}; name the one to take "
            "(`--classifier NAME` of `mad classifiers add`, the `classifier` field of the API)"
        )
    if classifier is not None and classifier not in rows:
        raise PredictionUploadError(f"the file holds no classifier {classifier!r}; it holds {held or 'none'}")
    chosen = classifier if classifier is not None else next(iter(rows), None)
    if chosen is not None and rows[chosen] > max_rows:
        raise PredictionUploadError(
            f"the file holds {rows[chosen]:,} rows of {chosen!r}: more than the competition's {max_rows:,} "
            "images"
        )
    return chosen


def _numpy_column(name: str, column: pa.Array) -> np.ndarray:
    """A known Parquet column as numpy: list columns as (n, 5), 64-character hashes as HASH_DTYPE."""
    if column.null_count:
        raise PredictionUploadError(f"column {name} has {column.null_count} empty (null) values")
    if name.startswith("top5"):
        return _list_column(name, column)
    if FORMER_NAMES.get(name, name) == SHA256:
        return _hash_column(column)
    return column.to_numpy(False)


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
    names = (*REQUIRED_COLUMNS, *OPTIONAL_COLUMNS, *FORMER_NAMES)
    try:
        return load_npz(str(path), names, max_rows * MAX_BYTES_PER_ROW)
    except NpzError as error:
        raise PredictionUploadError(
            f"unreadable NPZ file ({error}); arrays must be numbers or fixed-width strings (hashes as '<U64')"
        ) from error


def _check_lengths(columns: dict[str, np.ndarray], hashes: str) -> int:
    """The number of rows (of the column `hashes`), after checking every column has it and the documented
    shape."""
    n_rows = len(columns[hashes])
    if n_rows == 0:
        raise PredictionUploadError("the predictions file has no rows")
    for name, values in columns.items():
        shape = (n_rows, TOP_K) if name.startswith("top5") else (n_rows,)
        if values.shape != shape:
            raise PredictionUploadError(f"{name} must have shape {shape}, got {values.shape}")
    return n_rows


def _ordinals(name: str, values: np.ndarray, competition_hashes: np.ndarray) -> np.ndarray:
    """The ordinal of each row's image, refusing duplicate or unknown hashes (matched by Arrow's hash
    table over the fixed-width hashes, not row by row); `name` is the hashes' column."""
    if values.dtype.kind not in "USO":
        raise PredictionUploadError(f"{name} must hold hex strings, not {values.dtype}")
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


def _validated_rows(
    columns: dict[str, np.ndarray], names: dict[str, str], num_classes: int, n_rows: int
) -> Predictions:
    """The file's rows as Predictions, after checking labels, probabilities and entropies are in range
    (`names`: each column's name in the file; an entropy may be NaN, unknown, as the export writes it)."""
    top1 = _labels("top1", columns["top1"], num_classes, allow_absent=False)
    prob = _in_range("prob", columns["prob"], 0.0, 1.0)
    if ENTROPY not in names:
        entropy_bits = np.full(n_rows, np.nan, np.float32)
    else:
        highest = np.log2(num_classes) + ENTROPY_SLACK_BITS
        entropy_bits = _in_range(names[ENTROPY], columns[names[ENTROPY]], 0.0, highest, nan_allowed=True)
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


def _in_range(
    name: str, values: np.ndarray, low: float, high: float, *, nan_allowed: bool = False
) -> np.ndarray:
    """Real numbers as float32, checked to be finite and within [low, high], or NaN (unknown) where
    `nan_allowed`."""
    if values.dtype.kind not in "iuf":
        raise PredictionUploadError(f"{name} must hold numbers, not {values.dtype}")
    inside = np.isfinite(values) & (values >= low) & (values <= high)
    if nan_allowed:
        inside |= np.isnan(values)
    bad = np.flatnonzero(~inside.reshape(len(values), -1).all(axis=1))
    if len(bad):
        allowed = " or NaN" if nan_allowed else ""
        raise PredictionUploadError(
            f"{name} must be finite numbers in [{low:g}, {high:g}]{allowed}; {len(bad)} row(s) are not, "
            f"e.g. row(s) {_few(bad.tolist())} with {_few(values[bad].tolist())}"
        )
    return values.astype(np.float32)


def _few(items: list) -> str:
    """The first EXAMPLES_SHOWN items, comma-separated, with '...' if there are more."""
    shown = ", ".join(str(item) for item in items[:EXAMPLES_SHOWN])
    return shown + (", ..." if len(items) > EXAMPLES_SHOWN else "")
