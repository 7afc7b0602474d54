"""Content-addressed blob store for images and thumbnails under the data dir.

Layout: images/<sha[:2]>/<sha>.<ext> and thumbnails/<sha[:2]>/<sha>.webp. Paths are built only from
a validated SHA-256 and a known format, never from user input. Writes are atomic (temp file + rename).
"""

import os
import re
import tempfile
from pathlib import Path

from app.errors import InvalidInput

SHA256_PATTERN = re.compile(r"^[0-9a-f]{64}$")
EXTENSIONS = {"jpeg": "jpg", "png": "png", "webp": "webp"}
CONTENT_TYPES = {"jpeg": "image/jpeg", "png": "image/png", "webp": "image/webp"}
THUMBNAIL_CONTENT_TYPE = "image/webp"


def check_sha256(sha256: str) -> str:
    """The hash itself if it is 64 lowercase hex characters, else InvalidInput."""
    if not SHA256_PATTERN.fullmatch(sha256):
        raise InvalidInput("an image hash is 64 lowercase hexadecimal characters")
    return sha256


def write_atomically(path: Path, data: bytes) -> None:
    """Write bytes so that readers see the old file or the whole new one, never a partial file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(dir=path.parent, prefix=".tmp-", suffix=path.suffix)
    try:
        with os.fdopen(fd, "wb") as tmp:
            tmp.write(data)
            tmp.flush()
            os.fsync(tmp.fileno())
        os.replace(tmp_name, path)
    except BaseException:
        Path(tmp_name).unlink(missing_ok=True)
        raise


class ImageStore:
    """Images and thumbnails on the local file system, addressed by SHA-256."""

    def __init__(self, root: Path):
        self.root = root

    def image_path(self, sha256: str, image_format: str) -> Path:
        """Where the original bytes of an image live."""
        check_sha256(sha256)
        return self.root / "images" / sha256[:2] / f"{sha256}.{EXTENSIONS[image_format]}"

    def thumbnail_path(self, sha256: str) -> Path:
        """Where the WebP thumbnail of an image lives."""
        check_sha256(sha256)
        return self.root / "thumbnails" / sha256[:2] / f"{sha256}.webp"

    def put(self, sha256: str, image_format: str, data: bytes, thumbnail: bytes) -> None:
        """Store an image and its thumbnail unless already present (same hash, same bytes)."""
        image_path = self.image_path(sha256, image_format)
        if not image_path.exists():
            write_atomically(image_path, data)
        thumbnail_path = self.thumbnail_path(sha256)
        if not thumbnail_path.exists():
            write_atomically(thumbnail_path, thumbnail)

    def remove(self, sha256: str, image_format: str) -> None:
        """Delete an image and its thumbnail if present (undoing a put whose database row goes away)."""
        self.image_path(sha256, image_format).unlink(missing_ok=True)
        self.thumbnail_path(sha256).unlink(missing_ok=True)

    def read(self, sha256: str, image_format: str) -> bytes:
        """The original bytes of a stored image."""
        return self.image_path(sha256, image_format).read_bytes()
