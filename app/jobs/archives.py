"""A predict shard's images as one streamed tar archive: how a worker that cannot read the blob store gets
its images in a few requests instead of one request per image.

Members are `<ordinal>.<ext>` in ordinal order, each a plain ustar entry (header, bytes, zero padding to
512), ended by two zero blocks: any tar reader can follow the stream. The stored sizes give the length up
front (Content-Length: no chunked framing to copy through), and each piece of about PIECE_BYTES is one
buffer that the blobs are read straight into (`BlobStore.read_many_into`) and that goes to the socket as is.
"""

import tarfile
from collections.abc import Iterator
from typing import NamedTuple

import numpy as np

from app.storage import BlobStore
from app.storage.keys import IMAGE_EXTENSIONS, image_key

PIECE_BYTES = 4 * 1024 * 1024
BLOCK = tarfile.BLOCKSIZE
ZEROS = bytes(BLOCK)
USTAR_TEMPLATE = bytearray(tarfile.TarInfo("").tobuf(format=tarfile.USTAR_FORMAT))
"""A plain file's ustar header (mode 0644, owner 0, mtime 0) whose name, size and checksum are filled in."""
USTAR_TEMPLATE[124:136] = bytes(12)
USTAR_TEMPLATE[148:156] = b" " * 8
TEMPLATE_SUM = sum(USTAR_TEMPLATE)


class ArchiveImage(NamedTuple):
    """One image of the archive: its ordinal in the competition, its blob's hash and format, its size."""

    ordinal: int
    sha256: str
    format: str
    size: int


def member_name(ordinal: int, image_format: str) -> str:
    """The archive member of the image at an ordinal."""
    return f"{ordinal}.{IMAGE_EXTENSIONS[image_format]}"


def member_bytes(size: int) -> int:
    """A member's length in the archive: its header block and its bytes padded to whole blocks."""
    return BLOCK + size + -size % BLOCK


def archive_bytes(images: list[ArchiveImage]) -> int:
    """The length of the archive: its members and the two zero blocks that end it."""
    return sum(member_bytes(size) for *_, size in images) + 2 * BLOCK


def ustar_header(name: str, size: int) -> bytearray:
    """The header block of a member (POSIX ustar: checksum = the sum of the header's bytes, its own field
    counted as eight spaces)."""
    header = bytearray(USTAR_TEMPLATE)
    encoded, size_field = name.encode("ascii"), b"%011o\0" % size
    header[0 : len(encoded)] = encoded
    header[124:136] = size_field
    header[148:156] = b"%06o\0 " % (TEMPLATE_SUM + sum(encoded) + sum(size_field))
    return header


def _pieces(images: list[ArchiveImage]) -> Iterator[list[ArchiveImage]]:
    """Consecutive runs of images whose members fill about PIECE_BYTES."""
    piece: list[ArchiveImage] = []
    held = 0
    for image in images:
        piece.append(image)
        held += member_bytes(image[3])
        if held >= PIECE_BYTES:
            yield piece
            piece, held = [], 0
    if piece:
        yield piece


def shard_archive(blobs: BlobStore, images: list[ArchiveImage]) -> Iterator[memoryview]:
    """The tar stream of the images, archive_bytes(images) long, a piece at a time."""
    for piece in _pieces(images):
        # uninitialised (numpy.empty), as every byte is written below: zeroing 4 MB first costs about as
        # much as reading the files into it
        buffer = np.empty(sum(member_bytes(size) for *_, size in piece), dtype=np.uint8).data
        views, offset = [], 0
        for ordinal, _, image_format, size in piece:
            buffer[offset : offset + BLOCK] = ustar_header(member_name(ordinal, image_format), size)
            views.append(buffer[offset + BLOCK : offset + BLOCK + size])
            offset += member_bytes(size)
            padding = -size % BLOCK
            buffer[offset - padding : offset] = ZEROS[:padding]
        blobs.read_many_into([image_key(sha256, image_format) for _, sha256, image_format, _ in piece], views)
        yield buffer
    yield memoryview(ZEROS + ZEROS)
