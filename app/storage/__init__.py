"""Where every blob lives: a local directory (the default, MAD_DATA_DIR) or S3-compatible object storage
(MAD_STORAGE_URL=s3://bucket/prefix), behind one interface, `BlobStore`. Imports neither FastAPI nor
SQLAlchemy, so workers use it too."""

from pathlib import Path

from app.storage.blobs import BlobNotFound, BlobStore, check_key
from app.storage.local import LocalBlobStore

__all__ = ["BlobNotFound", "BlobStore", "LocalBlobStore", "check_key", "open_blob_store"]


def open_blob_store(storage_url: str, data_dir: Path | None = None) -> BlobStore:
    """The store at storage_url: '' for data_dir itself, file:///abs/path, or s3://bucket/prefix."""
    if not storage_url and data_dir is not None:
        return LocalBlobStore(data_dir)
    if storage_url.startswith("file://"):
        return LocalBlobStore(Path(storage_url.removeprefix("file://")))
    if storage_url.startswith("s3://"):
        from app.storage.s3 import S3BlobStore  # botocore and aiohttp load only for an S3 store

        return S3BlobStore(storage_url)
    raise ValueError(f"storage URL {storage_url!r}: use s3://bucket/prefix or file:///absolute/path")
