"""A predict shard's images as one streamed tar archive: how a worker that cannot read the blob store gets
its images in a few requests instead of one request per image.

Members are `<ordinal>.<ext>` in ordinal order, each a plain ustar entry (header, bytes, zero padding to
512), ended by two zero blocks: any tar reader can follow the stream. Blobs are fetched ARCHIVE_FETCH at a
time (in parallel from object storage) and sent in pieces of about CHUNK_BYTES.
"""

import tarfile
from collections.abc import Iterator

from app.storage import BlobStore
from app.storage.keys import IMAGE_EXTENSIONS, image_key

ARCHIVE_FETCH = 64
CHUNK_BYTES = 1024 * 1024
BLOCK = tarfile.BLOCKSIZE


def member_name(ordinal: int, image_format: str) -> str:
    """The archive member of the image at an ordinal."""
    return f"{ordinal}.{IMAGE_EXTENSIONS[image_format]}"


def _member(name: str, data: bytes) -> bytes:
    """One tar member: its ustar header, its bytes and the padding to a whole block."""
    info = tarfile.TarInfo(name)
    info.size = len(data)
    info.mode = 0o644
    return info.tobuf(format=tarfile.USTAR_FORMAT) + data + bytes(-len(data) % BLOCK)


def shard_archive(blobs: BlobStore, images: list[tuple[int, str, str]]) -> Iterator[bytes]:
    """The tar stream of (ordinal, sha256, format) images, in pieces of about CHUNK_BYTES."""
    pending: list[bytes] = []
    held = 0
    for first in range(0, len(images), ARCHIVE_FETCH):
        group = images[first : first + ARCHIVE_FETCH]
        contents = blobs.get_many([image_key(sha256, image_format) for _, sha256, image_format in group])
        for (ordinal, _, image_format), data in zip(group, contents, strict=True):
            pending.append(_member(member_name(ordinal, image_format), data))
            held += len(pending[-1])
            if held >= CHUNK_BYTES:
                yield b"".join(pending)
                pending, held = [], 0
    yield b"".join(pending) + bytes(2 * BLOCK)
