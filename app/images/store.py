"""Images and thumbnails in the blob store, addressed by SHA-256.

Keys: images/<sha[:2]>/<sha>.<ext> and thumbnails/<sha[:2]>/<sha>.webp (app.storage.keys), built only from
a validated SHA-256 and a known format, never from user input. Both are immutable once stored.
"""

import re

from app.errors import InvalidInput, storage_errors
from app.storage import BlobStore, LocalBlobStore
from app.storage.keys import image_key, thumbnail_key

SHA256_PATTERN = re.compile(r"^[0-9a-f]{64}$")
CONTENT_TYPES = {"jpeg": "image/jpeg", "png": "image/png", "webp": "image/webp"}
THUMBNAIL_CONTENT_TYPE = "image/webp"


def check_sha256(sha256: str) -> str:
    """The hash itself if it is 64 lowercase hex characters, else InvalidInput."""
    if not SHA256_PATTERN.fullmatch(sha256):
        raise InvalidInput("an image hash is 64 lowercase hexadecimal characters")
    return sha256


class ImageStore:
    """The original bytes and the WebP thumbnail of every image, in one blob store."""

    def __init__(self, blobs: BlobStore):
        self.blobs = blobs

    def put(self, sha256: str, image_format: str, data: bytes, thumbnail: bytes) -> None:
        """Store an image and its thumbnail (a copy already there has the same bytes: replaced whole)."""
        self.blobs.put(
            image_key(sha256, image_format), data, content_type=CONTENT_TYPES[image_format], immutable=True
        )
        self.blobs.put(thumbnail_key(sha256), thumbnail, content_type=THUMBNAIL_CONTENT_TYPE, immutable=True)

    @property
    def writes_locally(self) -> bool:
        """Whether its blobs are files on this machine (each write's fsyncs cost CPU; S3 writes wait)."""
        return isinstance(self.blobs, LocalBlobStore)

    def remove(self, sha256: str, image_format: str) -> None:
        """Delete an image and its thumbnail if present (undoing a put whose database row goes away)."""
        self.blobs.delete([image_key(sha256, image_format), thumbnail_key(sha256)])

    def read(self, sha256: str, image_format: str) -> bytes:
        """The original bytes of a stored image."""
        return self.blobs.get(image_key(sha256, image_format))


def store_images(store: ImageStore, files: list[tuple[str, str, str, bytes, bytes]]) -> None:
    """Store each (name, sha256, format, data, thumbnail): a task for an import's threads or processes; a
    write that fails for want of room is ServiceUnavailable, naming the file."""
    for name, sha256, image_format, data, thumbnail in files:
        with storage_errors(f"image {name}"):
            store.put(sha256, image_format, data, thumbnail)
