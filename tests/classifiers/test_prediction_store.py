"""Prediction shards: atomic writes, idempotent re-writes, and a reader that refuses gaps and overlaps."""

import errno

import numpy as np
import pytest

from app.classifiers import prediction_store
from app.classifiers.prediction_store import Predictions, PredictionStore, PredictionStoreError
from app.storage import open_blob_store


def random_predictions(n: int, seed: int) -> Predictions:
    """`n` rows of plausible predictions over 10 classes."""
    rng = np.random.default_rng(seed)
    probabilities = rng.dirichlet(np.ones(10), size=n).astype(np.float32)
    top5 = np.argsort(-probabilities, axis=1)[:, :5].astype(np.int32)
    top5_prob = np.take_along_axis(probabilities, top5, axis=1)
    return Predictions(
        top1=top5[:, 0].copy(),
        prob=top5_prob[:, 0].copy(),
        entropy_bits=(-(probabilities * np.log2(probabilities)).sum(axis=1)).astype(np.float32),
        top5=top5,
        top5_prob=top5_prob,
    )


def assert_equal(actual: Predictions, expected: Predictions) -> None:
    """Same arrays, same dtypes."""
    for name, array in expected.arrays().items():
        np.testing.assert_array_equal(getattr(actual, name), array, err_msg=name)
        assert getattr(actual, name).dtype == array.dtype


@pytest.fixture(params=["local", "s3"])
def store(request, tmp_path) -> PredictionStore:
    """A prediction store on a local directory and on S3 (moto)."""
    url = request.getfixturevalue("s3_storage_url") if request.param == "s3" else ""
    return PredictionStore(open_blob_store(url, tmp_path))


def shard_names(store: PredictionStore, classifier_id) -> list[str]:
    """The names of one classifier's stored shards."""
    return [key.rsplit("/", 1)[-1] for key in store.blobs.list_keys(store.prefix(classifier_id))]


def test_shards_written_in_any_order_read_back_as_one_array(store):
    full = random_predictions(10, seed=1)
    parts = {
        start: Predictions(**{k: v[start:end] for k, v in full.arrays().items()})
        for start, end in [(0, 4), (4, 7), (7, 10)]
    }
    for start in (7, 0, 4):
        store.write_shard(3, start, parts[start])

    assert store.shard_ranges(3) == [(0, 4), (4, 7), (7, 10)]
    assert_equal(store.read(3, 10), full)
    assert shard_names(store, 3) == [
        "shard-0000000000-0000000004.npz",
        "shard-0000000004-0000000007.npz",
        "shard-0000000007-0000000010.npz",
    ]


def test_rewriting_a_shard_replaces_it_whole(store):
    store.write_shard("c1", 0, random_predictions(5, seed=1))
    second = random_predictions(5, seed=2)
    store.write_shard("c1", 0, second)

    assert_equal(store.read("c1", 5), second)
    assert shard_names(store, "c1") == ["shard-0000000000-0000000005.npz"]


def test_no_prediction_rows_survive_a_round_trip(store):
    empty = Predictions.empty(3)
    store.write_shard(1, 0, empty)

    read = store.read(1, 3)
    assert (read.top1 == -1).all() and np.isnan(read.entropy_bits).all() and (read.prob == 0).all()


def test_a_gap_is_named(store):
    store.write_shard(1, 0, random_predictions(4, seed=1))
    store.write_shard(1, 6, random_predictions(4, seed=2))

    with pytest.raises(PredictionStoreError, match=r"ordinals 4\.\.5 have no stored predictions"):
        store.read(1, 10)


def test_missing_tail_and_missing_classifier_are_named(store):
    store.write_shard(1, 0, random_predictions(8, seed=1))

    with pytest.raises(PredictionStoreError, match=r"ordinals 8\.\.9 have no"):
        store.read(1, 10)
    with pytest.raises(PredictionStoreError, match=r"classifier 2: ordinals 0\.\.9 have no"):
        store.read(2, 10)


def test_overlapping_shards_are_refused(store):
    store.write_shard(1, 0, random_predictions(5, seed=1))
    store.write_shard(1, 3, random_predictions(7, seed=2))

    with pytest.raises(PredictionStoreError, match=r"ordinals 3\.\.4 are stored twice"):
        store.read(1, 10)


def test_shards_beyond_the_competition_are_refused(store):
    store.write_shard(1, 0, random_predictions(12, seed=1))

    with pytest.raises(PredictionStoreError, match="reach ordinal 11, but the competition has 10 images"):
        store.read(1, 10)


def test_failed_write_leaves_no_file_and_keeps_the_previous_shard(store, monkeypatch):
    first = random_predictions(6, seed=1)
    store.write_shard(1, 0, first)

    def savez_until_disk_full(file, **arrays):
        file.write(b"PK\x03\x04 half a zip")
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(prediction_store.np, "savez", savez_until_disk_full)
    with pytest.raises(OSError, match="No space left"):
        store.write_shard(1, 0, random_predictions(6, seed=2))
    with pytest.raises(OSError, match="No space left"):
        store.write_shard(1, 6, random_predictions(4, seed=3))

    assert shard_names(store, 1) == ["shard-0000000000-0000000006.npz"]
    monkeypatch.undo()
    assert_equal(store.read(1, 6), first)


def test_a_damaged_shard_file_is_named(store):
    store.write_shard(1, 0, random_predictions(4, seed=1))
    key = "predictions/1/shard-0000000000-0000000004.npz"
    store.blobs.put(key, store.blobs.get(key)[:100], content_type="application/octet-stream", immutable=False)

    with pytest.raises(PredictionStoreError, match="shard-0000000000-0000000004.npz is unreadable"):
        store.read(1, 4)


def test_delete_removes_every_shard(store):
    store.write_shard(1, 0, random_predictions(4, seed=1))
    store.delete(1)

    assert store.shard_ranges(1) == []


def test_classifier_ids_cannot_leave_the_root(store):
    with pytest.raises(ValueError, match="letters, digits"):
        store.write_shard("../elsewhere", 0, random_predictions(1, seed=1))


def test_predictions_check_dtypes_and_shapes():
    good = random_predictions(3, seed=1).arrays()
    with pytest.raises(ValueError, match="top1 must be int32"):
        Predictions(**{**good, "top1": good["top1"].astype(np.int64)})
    with pytest.raises(ValueError, match=r"top5_prob must be float32 \(3, 5\)"):
        Predictions(**{**good, "top5_prob": good["top5_prob"][:, :4]})
