"""The default blob store: a local directory (MAD_DATA_DIR), one file per key.

A blob is written to a hidden temporary file in its directory, fsynced and renamed over its key, and the
directory is fsynced: readers see the old file or the whole new one, and a crash or a full disk never
leaves part of a file under a key.
"""

import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import BinaryIO

from app.storage.blobs import CHUNK_BYTES, BlobNotFound, BlobStore, check_key

FILE_MODE = 0o644
"""mkstemp makes 0600 files; a worker or server process running as another user must read them."""


def write_atomically(path: Path, data: bytes) -> None:
    """Write bytes so that readers see the old file or the whole new one, never a partial file."""
    _replace_atomically(path, lambda file: file.write(data))


def _replace_atomically(path: Path, fill: Callable[[BinaryIO], object]) -> None:
    """Fill a temporary file beside path, fsync it, rename it over path and fsync the directory."""
    path.parent.mkdir(parents=True, exist_ok=True)
    descriptor, temporary = tempfile.mkstemp(dir=path.parent, prefix=".tmp-", suffix=path.suffix)
    try:
        with os.fdopen(descriptor, "wb") as file:
            os.fchmod(file.fileno(), FILE_MODE)
            fill(file)
            file.flush()
            os.fsync(file.fileno())
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
    _fsync_directory(path.parent)


def _fsync_directory(directory: Path) -> None:
    """Make a rename inside `directory` durable (POSIX: fsync the directory itself)."""
    descriptor = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


class LocalBlobStore(BlobStore):
    """Blobs as files under a root directory, at root/<key>."""

    def __init__(self, root: Path) -> None:
        self.root = root.resolve()
        self.url = self.root.as_uri()

    def _path(self, key: str) -> Path:
        """The file of a key."""
        return self.root / check_key(key)

    def put(self, key: str, data: bytes, *, content_type: str, immutable: bool) -> None:
        write_atomically(self._path(key), data)

    def put_file(self, key: str, path: Path, *, content_type: str) -> None:
        with path.open("rb") as source:
            _replace_atomically(self._path(key), lambda file: shutil.copyfileobj(source, file, CHUNK_BYTES))

    def get(self, key: str) -> bytes:
        try:
            return self._path(key).read_bytes()
        except FileNotFoundError:
            raise BlobNotFound(key) from None

    def read_many_into(self, keys: list[str], buffers: list[memoryview]) -> None:
        """Each file read straight into its buffer: one copy, no bytes object in between."""
        for key, buffer in zip(keys, buffers, strict=True):
            try:
                file = open(os.path.join(self.root, check_key(key)), "rb", buffering=0)  # noqa: SIM115
            except FileNotFoundError:
                raise BlobNotFound(key) from None
            with file:
                filled = 0
                while filled < len(buffer) and (read := file.readinto(buffer[filled:])):
                    filled += read
                if filled != len(buffer) or file.read(1):
                    raise ValueError(f"blob {key} is not the {len(buffer)} bytes expected")

    def iter_chunks(self, key: str) -> Iterator[bytes]:
        try:
            file = self._path(key).open("rb")
        except FileNotFoundError:
            raise BlobNotFound(key) from None
        with file:
            while chunk := file.read(CHUNK_BYTES):
                yield chunk

    def exists(self, key: str) -> bool:
        return self._path(key).is_file()

    def list_keys(self, prefix: str) -> list[str]:
        directory = self._path(prefix.rstrip("/")) if prefix else self.root
        if not directory.is_dir():
            return []
        files = (path for path in directory.rglob("*") if path.is_file() and not path.name.startswith("."))
        return sorted(path.relative_to(self.root).as_posix() for path in files)

    def delete(self, keys: list[str]) -> None:
        for key in keys:
            self._path(key).unlink(missing_ok=True)

    def local_path(self, key: str) -> Path:
        return self._path(key)
