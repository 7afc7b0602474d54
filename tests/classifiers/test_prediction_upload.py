"""Uploaded predictions files (Parquet, NPZ) become dense arrays, or a clear error; a table of several
classifiers (the predictions export) gives the one named."""

import hashlib
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from app.classifiers.prediction_upload import PredictionUploadError, read_prediction_upload

NUM_CLASSES = 10
HASHES = [hashlib.sha256(f"image {i}".encode()).hexdigest() for i in range(6)]
COMPETITION = np.array(HASHES, dtype="S64")
"""The competition's image hashes in ordinal order."""


def full_columns() -> dict[str, np.ndarray]:
    """Predictions for images 4, 1 and 3 (in that order), with every optional column."""
    return {
        "sha256": np.array([HASHES[4], HASHES[1], HASHES[3]]),
        "top1": np.array([7, 0, 9], np.int64),
        "prob": np.array([0.9, 0.5, 0.25]),
        "entropy": np.array([0.6, 1.5, 3.0]),
        "top5": np.array([[7, 1, 2, 3, 4], [0, 9, 8, 7, 6], [9, 0, 1, 2, 3]], np.int64),
        "top5_prob": np.array(
            [[0.9, 0.05, 0.02, 0.02, 0.01], [0.5, 0.2, 0.1, 0.1, 0.1], [0.25, 0.2, 0.2, 0.2, 0.1]]
        ),
    }


def write_parquet(path: Path, columns: dict[str, np.ndarray]) -> Path:
    """A Parquet file with one column per entry; (n, 5) arrays become list columns."""
    table = pa.table({name: list(values) if values.ndim == 2 else values for name, values in columns.items()})
    pq.write_table(table, path)
    return path


def write_npz(path: Path, columns: dict[str, np.ndarray]) -> Path:
    """An NPZ file with one array per entry."""
    np.savez(path, **columns)
    return path


@pytest.fixture(params=["parquet", "npz"])
def write(request, tmp_path):
    """Writes columns in one of the two accepted formats and returns the file."""
    writer = write_parquet if request.param == "parquet" else write_npz
    return lambda columns: writer(tmp_path / f"predictions.{request.param}", columns)


def test_full_file_lands_on_the_images_ordinals(write):
    predictions = read_prediction_upload(write(full_columns()), COMPETITION, NUM_CLASSES)

    assert predictions.top1.tolist() == [-1, 0, -1, 9, 7, -1]
    np.testing.assert_allclose(predictions.prob, [0, 0.5, 0, 0.25, 0.9, 0])
    np.testing.assert_allclose(predictions.entropy_bits[[1, 3, 4]], [1.5, 3.0, 0.6])
    assert np.isnan(predictions.entropy_bits[[0, 2, 5]]).all()
    assert predictions.top5[4].tolist() == [7, 1, 2, 3, 4]
    assert predictions.top5[0].tolist() == [-1] * 5
    np.testing.assert_allclose(predictions.top5_prob[1], [0.5, 0.2, 0.1, 0.1, 0.1])
    assert predictions.top1.dtype == np.int32 and predictions.prob.dtype == np.float32


def test_minimal_file_with_uppercase_hashes(write):
    columns = {name: full_columns()[name] for name in ("sha256", "top1", "prob")}
    columns["sha256"] = np.char.upper(columns["sha256"])

    predictions = read_prediction_upload(write(columns), COMPETITION, NUM_CLASSES)

    assert predictions.top1.tolist() == [-1, 0, -1, 9, 7, -1]
    assert predictions.top5[4].tolist() == [7, -1, -1, -1, -1]
    np.testing.assert_allclose(predictions.top5_prob[4], [0.9, 0, 0, 0, 0])
    assert np.isnan(predictions.entropy_bits).all()


def test_npz_with_byte_string_hashes(tmp_path):
    columns = full_columns()
    columns["sha256"] = columns["sha256"].astype("S64")

    predictions = read_prediction_upload(write_npz(tmp_path / "p.npz", columns), COMPETITION, NUM_CLASSES)

    assert predictions.top1.tolist() == [-1, 0, -1, 9, 7, -1]


def test_missing_columns_are_listed(write):
    columns = full_columns()
    del columns["prob"]

    with pytest.raises(PredictionUploadError, match="missing column.*prob; the file has"):
        read_prediction_upload(write(columns), COMPETITION, NUM_CLASSES)


def test_unknown_hashes_are_listed(write):
    columns = full_columns()
    columns["sha256"][1] = "f" * 64

    with pytest.raises(
        PredictionUploadError, match=f"1 sha256 value.*not images of this competition: {'f' * 64}"
    ):
        read_prediction_upload(write(columns), COMPETITION, NUM_CLASSES)


@pytest.mark.parametrize(
    "values",
    [
        [HASHES[4] + "0", HASHES[1][:63], "\u0161" + HASHES[3][1:]],  # too long, too short, not ASCII
        [HASHES[4] + "0", HASHES[4] + "1", HASHES[3]],  # different, though equal in their first 64
    ],
)
def test_hashes_that_are_not_64_hex_characters_are_unknown_not_cut_or_merged(write, values):
    columns = full_columns()
    columns["sha256"] = np.array(values)

    with pytest.raises(PredictionUploadError, match="not images of this competition"):
        read_prediction_upload(write(columns), COMPETITION, NUM_CLASSES)


def test_duplicate_hashes_are_refused(write):
    columns = full_columns()
    columns["sha256"][2] = columns["sha256"][0]

    with pytest.raises(PredictionUploadError, match=f"occur more than once: {HASHES[4]}"):
        read_prediction_upload(write(columns), COMPETITION, NUM_CLASSES)


@pytest.mark.parametrize(
    ("column", "row", "value", "message"),
    [
        ("top1", 2, 10, r"top1 has labels outside \[0, 10\) in 1 row.*row\(s\) 2 with 10"),
        ("top1", 0, -1, r"top1 has labels outside \[0, 10\)"),
        ("prob", 1, np.nan, r"prob must be finite numbers in \[0, 1\]; 1 row.*row\(s\) 1 with nan"),
        ("prob", 0, 1.5, r"prob must be finite numbers in \[0, 1\]"),
        ("entropy", 0, 4.0, r"entropy must be finite numbers in \[0, 3.32"),
        ("top5", 1, [0, 9, 8, 7, 12], r"top5 has labels outside"),
        ("top5", 1, [1, 9, 8, 7, 6], r"top5's first label differs from top1 in 1 row"),
        ("top5_prob", 0, [0.9, -0.1, 0, 0, 0], r"top5_prob must be finite numbers in \[0, 1\]"),
    ],
)
def test_out_of_range_values_are_named(write, column, row, value, message):
    columns = full_columns()
    columns[column][row] = value

    with pytest.raises(PredictionUploadError, match=message):
        read_prediction_upload(write(columns), COMPETITION, NUM_CLASSES)


def test_float_labels_are_refused(write):
    columns = full_columns()
    columns["top1"] = columns["top1"].astype(float)

    with pytest.raises(PredictionUploadError, match="top1 must hold integer labels, not float64"):
        read_prediction_upload(write(columns), COMPETITION, NUM_CLASSES)


def test_top5_without_top5_prob(write):
    columns = full_columns()
    del columns["top5_prob"]

    with pytest.raises(PredictionUploadError, match="top5 and top5_prob must be given together"):
        read_prediction_upload(write(columns), COMPETITION, NUM_CLASSES)


def test_npz_with_wrong_shapes(tmp_path):
    columns = full_columns()
    columns["top5"] = columns["top5"][:, :4]
    with pytest.raises(PredictionUploadError, match=r"top5 must have shape \(3, 5\), got \(3, 4\)"):
        read_prediction_upload(write_npz(tmp_path / "a.npz", columns), COMPETITION, NUM_CLASSES)

    columns = full_columns()
    columns["prob"] = columns["prob"][:2]
    with pytest.raises(PredictionUploadError, match=r"prob must have shape \(3,\), got \(2,\)"):
        read_prediction_upload(write_npz(tmp_path / "b.npz", columns), COMPETITION, NUM_CLASSES)


def test_parquet_list_of_the_wrong_length(tmp_path):
    columns = full_columns()
    table = pa.table(
        {
            **{k: v for k, v in columns.items() if v.ndim == 1},
            "top5": [[7, 1], [0, 9, 8, 7, 6], [9]],
            "top5_prob": list(columns["top5_prob"]),
        }
    )
    pq.write_table(table, tmp_path / "p.parquet")

    with pytest.raises(PredictionUploadError, match="top5 needs 5 values per row; row 0 has 2"):
        read_prediction_upload(tmp_path / "p.parquet", COMPETITION, NUM_CLASSES)


def test_parquet_nulls_are_refused(tmp_path):
    columns = full_columns()
    table = pa.table({"sha256": columns["sha256"], "top1": [7, None, 9], "prob": columns["prob"]})
    pq.write_table(table, tmp_path / "p.parquet")

    with pytest.raises(PredictionUploadError, match=r"column top1 has 1 empty \(null\) value"):
        read_prediction_upload(tmp_path / "p.parquet", COMPETITION, NUM_CLASSES)


def test_npz_with_pickled_objects_is_refused(tmp_path):
    columns = full_columns()
    columns["sha256"] = columns["sha256"].astype(object)

    with pytest.raises(PredictionUploadError, match="unreadable NPZ file.*fixed-width strings"):
        read_prediction_upload(write_npz(tmp_path / "p.npz", columns), COMPETITION, NUM_CLASSES)


def test_unreadable_files(tmp_path):
    parquet = write_parquet(tmp_path / "p.parquet", full_columns())
    parquet.write_bytes(parquet.read_bytes()[:200])
    with pytest.raises(PredictionUploadError, match="unreadable Parquet file"):
        read_prediction_upload(parquet, COMPETITION, NUM_CLASSES)

    npz = write_npz(tmp_path / "p.npz", full_columns())
    npz.write_bytes(npz.read_bytes()[:300])
    with pytest.raises(PredictionUploadError, match="unreadable NPZ file"):
        read_prediction_upload(npz, COMPETITION, NUM_CLASSES)

    (tmp_path / "p.csv").write_text("sha256,top1,prob\n")
    with pytest.raises(PredictionUploadError, match="neither Parquet nor NPZ"):
        read_prediction_upload(tmp_path / "p.csv", COMPETITION, NUM_CLASSES)

    with pytest.raises(PredictionUploadError, match="cannot open"):
        read_prediction_upload(tmp_path / "absent.parquet", COMPETITION, NUM_CLASSES)


def test_empty_file_is_refused(write):
    columns = {name: full_columns()[name][:0] for name in ("sha256", "top1", "prob")}

    with pytest.raises(PredictionUploadError, match="no rows"):
        read_prediction_upload(write(columns), COMPETITION, NUM_CLASSES)


def export_columns() -> dict[str, np.ndarray]:
    """full_columns under the names of the predictions export (image_sha256, entropy_bits)."""
    columns = full_columns()
    columns["image_sha256"], columns["entropy_bits"] = columns.pop("sha256"), columns.pop("entropy")
    return columns


def test_the_export_names_are_read_and_a_nan_entropy_is_unknown(write):
    columns = export_columns()
    columns["entropy_bits"][1] = np.nan  # the export writes NaN where the source gave no entropy

    predictions = read_prediction_upload(write(columns), COMPETITION, NUM_CLASSES)

    assert predictions.top1.tolist() == [-1, 0, -1, 9, 7, -1]
    np.testing.assert_allclose(predictions.entropy_bits[[3, 4]], [3.0, 0.6])
    assert np.isnan(predictions.entropy_bits[1])


def test_a_column_under_both_names_is_refused(write):
    columns = export_columns()
    columns["sha256"] = columns["image_sha256"]

    with pytest.raises(PredictionUploadError, match=r"both (image_)?sha256 and (image_)?sha256: keep one"):
        read_prediction_upload(write(columns), COMPETITION, NUM_CLASSES)


def test_a_missing_hash_column_names_both_its_names(write):
    columns = export_columns()
    del columns["image_sha256"]

    with pytest.raises(PredictionUploadError, match=r"missing column\(s\) image_sha256 \(or sha256\)"):
        read_prediction_upload(write(columns), COMPETITION, NUM_CLASSES)


def table_of_three(path: Path, row_group_size: int | None = None) -> Path:
    """A table like the predictions export: alpha predicts images 4, 1, 3; beta every image; gamma 0 and 5
    (beta's rows between alpha's and gamma's), in row groups of `row_group_size` rows."""
    rows = [("alpha", HASHES[4], 7), ("alpha", HASHES[1], 0), ("alpha", HASHES[3], 9)]
    rows += [("beta", sha256, index) for index, sha256 in enumerate(HASHES)]
    rows += [("gamma", HASHES[0], 2), ("gamma", HASHES[5], 3)]
    table = pa.table(
        {
            "classifier_id": [ord(name[0]) for name, _, _ in rows],
            "classifier": [name for name, _, _ in rows],
            "image_sha256": [sha256 for _, sha256, _ in rows],
            "top1": pa.array([label for _, _, label in rows], pa.int32()),
            "prob": pa.array([0.5] * len(rows), pa.float32()),
            "entropy_bits": pa.array([np.nan] * len(rows), pa.float32()),
        }
    )
    pq.write_table(table, path, row_group_size=row_group_size)
    return path


@pytest.mark.parametrize("row_group_size", [None, 2])
def test_one_classifier_is_taken_from_a_table_of_several(tmp_path, row_group_size):
    path = table_of_three(tmp_path / "export.parquet", row_group_size)

    alpha = read_prediction_upload(path, COMPETITION, NUM_CLASSES, classifier="alpha")
    beta = read_prediction_upload(path, COMPETITION, NUM_CLASSES, classifier="beta")

    assert alpha.top1.tolist() == [-1, 0, -1, 9, 7, -1]
    assert beta.top1.tolist() == [0, 1, 2, 3, 4, 5]
    assert np.isnan(beta.entropy_bits).all()


def test_a_table_of_several_needs_a_name_and_one_it_holds(tmp_path):
    path = table_of_three(tmp_path / "export.parquet")

    listed = r"3 classifiers: alpha \(3 rows\), beta \(6 rows\), gamma \(2 rows\); name the one to take"
    with pytest.raises(PredictionUploadError, match=listed):
        read_prediction_upload(path, COMPETITION, NUM_CLASSES)
    with pytest.raises(
        PredictionUploadError, match=r"holds no classifier 'delta'; it holds alpha \(3 rows\)"
    ):
        read_prediction_upload(path, COMPETITION, NUM_CLASSES, classifier="delta")


def test_a_table_of_one_classifier_needs_no_name(tmp_path):
    table = pq.read_table(table_of_three(tmp_path / "export.parquet"))
    pq.write_table(table.filter(pc.equal(table.column("classifier"), "gamma")), tmp_path / "gamma.parquet")

    predictions = read_prediction_upload(tmp_path / "gamma.parquet", COMPETITION, NUM_CLASSES)

    assert predictions.top1.tolist() == [2, -1, -1, -1, -1, 3]


def test_a_name_for_a_file_of_one_classifier_is_refused(tmp_path):
    parquet = write_parquet(tmp_path / "p.parquet", export_columns())
    with pytest.raises(PredictionUploadError, match="no classifier column to pick 'alpha' from"):
        read_prediction_upload(parquet, COMPETITION, NUM_CLASSES, classifier="alpha")

    npz = write_npz(tmp_path / "p.npz", export_columns())
    with pytest.raises(PredictionUploadError, match="an NPZ file holds one classifier's predictions"):
        read_prediction_upload(npz, COMPETITION, NUM_CLASSES, classifier="alpha")


def test_a_classifier_with_more_rows_than_images_is_refused(tmp_path):
    path = table_of_three(tmp_path / "export.parquet")

    with pytest.raises(PredictionUploadError, match="holds 6 rows of 'beta': more than the competition's 5"):
        read_prediction_upload(path, COMPETITION[:5], NUM_CLASSES, classifier="beta")


def test_a_classifier_column_without_names_is_refused(tmp_path):
    columns = {**export_columns(), "classifier": np.array([1, 1, 2])}
    with pytest.raises(PredictionUploadError, match="classifier must hold classifier names"):
        read_prediction_upload(write_parquet(tmp_path / "a.parquet", columns), COMPETITION, NUM_CLASSES)

    columns = {name: export_columns()[name] for name in ("image_sha256", "top1", "prob")}
    pq.write_table(pa.table({**columns, "classifier": ["alpha", None, "alpha"]}), tmp_path / "b.parquet")
    with pytest.raises(PredictionUploadError, match=r"column classifier has empty \(null\) values"):
        read_prediction_upload(tmp_path / "b.parquet", COMPETITION, NUM_CLASSES)
