"""Blobs in S3-compatible object storage (AWS S3, MinIO, Cloudflare R2, GCS's interoperability endpoint).

MAD_STORAGE_URL=s3://bucket/prefix. The protocol is s3fs's (botocore underneath), so the endpoint, region
and credentials come from the standard AWS environment variables (AWS_ENDPOINT_URL, AWS_ACCESS_KEY_ID,
AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN, AWS_DEFAULT_REGION, AWS_PROFILE) and config files (~/.aws/config,
~/.aws/credentials). A PUT, and a multipart upload once completed, replaces an object whole: no reader
ever sees part of one. Listings are never cached, so processes sharing the bucket see each other's writes.
"""

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import s3fs
from botocore.exceptions import BotoCoreError

from app.storage.blobs import CHUNK_BYTES, IMMUTABLE, BlobNotFound, BlobStore, check_key


@contextmanager
def _os_errors() -> Iterator[None]:
    """botocore's own errors (no endpoint, no credentials) as OSError, which callers report as 503."""
    try:
        yield
    except BotoCoreError as error:
        raise OSError(str(error)) from error


def s3_filesystem() -> s3fs.S3FileSystem:
    """An s3fs client configured from the AWS environment: one GET per read (no HEAD first, which s3fs
    makes to split large reads) and no cached listings (other processes write to the same bucket)."""
    return s3fs.S3FileSystem(use_listings_cache=False, max_concurrency=1)


class S3BlobStore(BlobStore):
    """Blobs as objects under s3://bucket/prefix/<key>."""

    def __init__(self, url: str) -> None:
        self.url = url.rstrip("/")
        self.base = self.url.removeprefix("s3://")
        self.fs = s3_filesystem()

    def _path(self, key: str) -> str:
        """The bucket/key path of a blob key."""
        return f"{self.base}/{check_key(key)}"

    def put(self, key: str, data: bytes, *, content_type: str, immutable: bool) -> None:
        headers = {"ContentType": content_type} | ({"CacheControl": IMMUTABLE} if immutable else {})
        with _os_errors():
            self.fs.pipe_file(self._path(key), data, **headers)

    def put_file(self, key: str, path: Path, *, content_type: str) -> None:
        with _os_errors():
            self.fs.put_file(str(path), self._path(key), ContentType=content_type, CacheControl=IMMUTABLE)

    def get(self, key: str) -> bytes:
        try:
            with _os_errors():
                return self.fs.cat_file(self._path(key))
        except FileNotFoundError:
            raise BlobNotFound(key) from None

    def get_many(self, keys: list[str]) -> list[bytes]:
        """The blobs under keys, fetched concurrently (s3fs runs the GETs on its event loop)."""
        paths = [self._path(key) for key in keys]
        with _os_errors():
            found = self.fs.cat(paths, on_error="return")
        for key, path in zip(keys, paths, strict=True):
            if isinstance(found[path], FileNotFoundError):
                raise BlobNotFound(key)
            if isinstance(found[path], Exception):
                raise OSError(f"could not read {key}: {found[path]}") from found[path]
        return [found[path] for path in paths]

    def iter_chunks(self, key: str) -> Iterator[bytes]:
        try:
            with _os_errors():
                file = self.fs.open(self._path(key), "rb", block_size=CHUNK_BYTES * 8)
        except FileNotFoundError:
            raise BlobNotFound(key) from None
        with file:
            while chunk := file.read(CHUNK_BYTES):
                yield chunk

    def exists(self, key: str) -> bool:
        with _os_errors():
            return self.fs.isfile(self._path(key))

    def list_keys(self, prefix: str) -> list[str]:
        root = (self._path(prefix.rstrip("/")) if prefix else self.base) + "/"
        with _os_errors():
            paths = self.fs.find(root)
        return sorted(path.removeprefix(f"{self.base}/") for path in paths)

    def delete(self, keys: list[str]) -> None:
        if keys:
            with _os_errors():
                self.fs.rm([self._path(key) for key in keys])
