"""The one interface every stored file goes through: images, thumbnails, weights and prediction shards.

A blob is the whole content of one key. Keys are built by the code from validated hashes, formats and ids
(`app.storage.keys`), never from user input, and checked again here: segments of letters, digits, '_', '-'
and '.', none starting with '.', joined by '/'. Writes are atomic (a reader sees the old blob or the new one,
never part of one), so several server processes and workers can share one store.
"""

import re
from abc import ABC, abstractmethod
from collections.abc import Iterator
from pathlib import Path

KEY_PATTERN = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9_.-]*(/[A-Za-z0-9_-][A-Za-z0-9_.-]*)*")
IMMUTABLE = "public, max-age=31536000, immutable"
"""Cache-Control of content-addressed blobs: their bytes never change under their key."""
CHUNK_BYTES = 1024 * 1024


class BlobNotFound(FileNotFoundError):
    """No blob is stored under the key."""


def check_key(key: str) -> str:
    """The key itself if it is a safe relative key (see the module docstring), else ValueError."""
    if not KEY_PATTERN.fullmatch(key):
        raise ValueError(f"unsafe blob key {key!r}")
    return key


class BlobStore(ABC):
    """Blobs by key in one place (a directory or a bucket prefix), shared by every process that opens it."""

    url: str
    """Where the store is, without credentials: file:///abs/path or s3://bucket/prefix."""

    @abstractmethod
    def put(self, key: str, data: bytes, *, content_type: str, immutable: bool) -> None:
        """Store data under key atomically, replacing any blob there."""

    @abstractmethod
    def put_file(self, key: str, path: Path, *, content_type: str) -> None:
        """Store a local file's content under key atomically (immutable: used for content-addressed files)."""

    @abstractmethod
    def get(self, key: str) -> bytes:
        """The blob under key; BlobNotFound when there is none."""

    def get_many(self, keys: list[str]) -> list[bytes]:
        """The blobs under keys, in order (a backend may fetch them in parallel)."""
        return [self.get(key) for key in keys]

    def read_many_into(self, keys: list[str], buffers: list[memoryview]) -> None:
        """Fill each buffer with the blob under its key, which must be exactly as long (ValueError if not)."""
        for key, buffer, data in zip(keys, buffers, self.get_many(keys), strict=True):
            if len(data) != len(buffer):
                raise ValueError(f"blob {key} holds {len(data)} bytes, not the {len(buffer)} expected")
            buffer[:] = data

    @abstractmethod
    def iter_chunks(self, key: str) -> Iterator[bytes]:
        """The blob under key in pieces of about CHUNK_BYTES, for streaming large blobs."""

    @abstractmethod
    def exists(self, key: str) -> bool:
        """Whether a blob is stored under key."""

    @abstractmethod
    def list_keys(self, prefix: str) -> list[str]:
        """Every key below prefix (a key ending in '/', or '' for all), sorted."""

    @abstractmethod
    def delete(self, keys: list[str]) -> None:
        """Remove the blobs under keys; keys with no blob are ignored."""

    def delete_prefix(self, prefix: str) -> None:
        """Remove every blob below prefix."""
        self.delete(self.list_keys(prefix))

    def local_path(self, key: str) -> Path | None:
        """The file holding the blob when the store is a local directory, else None."""
        return None
