"""Both blob stores keep one contract: whole blobs by safe keys, listing, deleting, several at once.

The S3 store runs through s3fs against the session's moto server (test ids contain 's3', so
`pytest -k s3` selects them).
"""

import pytest

from app.storage import BlobNotFound, LocalBlobStore, open_blob_store
from app.storage.blobs import IMMUTABLE


@pytest.fixture(params=["local", "s3"])
def blobs(request, tmp_path):
    if request.param == "local":
        return open_blob_store("", tmp_path / "data")
    return open_blob_store(request.getfixturevalue("s3_storage_url"), tmp_path / "unused")


def test_blobs_round_trip_list_and_delete(blobs, tmp_path):
    blobs.put("images/ab/one.jpg", b"one", content_type="image/jpeg", immutable=True)
    blobs.put("images/cd/two.png", b"two" * 1000, content_type="image/png", immutable=True)
    source = tmp_path / "weights.bin"
    source.write_bytes(bytes(range(256)) * 10_000)
    blobs.put_file("weights/w.bin", source, content_type="application/octet-stream")

    assert blobs.get("images/ab/one.jpg") == b"one"
    assert blobs.get_many(["images/cd/two.png", "images/ab/one.jpg"]) == [b"two" * 1000, b"one"]
    assert b"".join(blobs.iter_chunks("weights/w.bin")) == source.read_bytes()
    assert blobs.list_keys("images/") == ["images/ab/one.jpg", "images/cd/two.png"]
    assert blobs.exists("images/ab/one.jpg") and not blobs.exists("images/ab/none.jpg")

    blobs.put("images/ab/one.jpg", b"replaced", content_type="image/jpeg", immutable=True)
    assert blobs.get("images/ab/one.jpg") == b"replaced"
    blobs.delete(["images/ab/one.jpg", "images/ab/never-stored.jpg"])
    blobs.delete_prefix("weights/")
    assert blobs.list_keys("") == ["images/cd/two.png"]
    with pytest.raises(BlobNotFound):
        blobs.get("images/ab/one.jpg")
    with pytest.raises(BlobNotFound):
        blobs.get_many(["images/cd/two.png", "weights/w.bin"])


@pytest.mark.parametrize("key", ["../escape", "/abs/key", "a/../../b", "images/.hidden", "a//b", "", "a\\b"])
def test_no_key_leaves_the_store(blobs, key):
    with pytest.raises(ValueError, match="unsafe blob key"):
        blobs.put(key, b"x", content_type="text/plain", immutable=False)
    with pytest.raises(ValueError, match="unsafe blob key"):
        blobs.get(key)


def test_a_local_store_leaves_no_temporary_file_and_writes_readable_files(tmp_path):
    blobs = LocalBlobStore(tmp_path)
    blobs.put("a/b.bin", b"data", content_type="application/octet-stream", immutable=False)
    assert [p.name for p in tmp_path.rglob("*") if p.is_file()] == ["b.bin"]
    assert (tmp_path / "a" / "b.bin").stat().st_mode & 0o777 == 0o644
    assert blobs.url == tmp_path.resolve().as_uri()


def test_s3_objects_carry_their_content_type_and_immutable_cache_header(s3_storage_url, tmp_path):
    blobs = open_blob_store(s3_storage_url, tmp_path)
    blobs.put("thumbnails/ab/x.webp", b"webp", content_type="image/webp", immutable=True)
    blobs.put("predictions/1/shard.npz", b"npz", content_type="application/octet-stream", immutable=False)
    thumbnail = blobs.fs.info(f"{blobs.base}/thumbnails/ab/x.webp")
    head = blobs.fs.call_s3("head_object", Bucket=blobs.base.split("/")[0], Key="mad/thumbnails/ab/x.webp")
    assert thumbnail["ContentType"] == "image/webp" and head["CacheControl"] == IMMUTABLE
    head = blobs.fs.call_s3("head_object", Bucket=blobs.base.split("/")[0], Key="mad/predictions/1/shard.npz")
    assert "CacheControl" not in head
    assert blobs.url == s3_storage_url
