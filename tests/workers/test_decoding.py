"""The header check that sends a JPEG to nvJPEG, against what Pillow makes of the same file."""

import io
import struct

import numpy as np
import pytest
from PIL import Image

from tests.workers.conftest import EXIF_ORIENTATION, photo_like
from workers.decoding import device_decodable

XMP_ROTATED = (
    b'<x:xmpmeta xmlns:x="adobe:ns:meta/"><rdf:RDF xmlns:rdf="http://www.w3.org/1999/02/22-rdf-syntax-ns#">'
    b'<rdf:Description xmlns:tiff="http://ns.adobe.com/tiff/1.0/" tiff:Orientation="6"/>'
    b"</rdf:RDF></x:xmpmeta>"
)


def encoded(image: Image.Image, image_format: str = "JPEG", **options) -> bytes:
    """The file Pillow writes for `image`."""
    buffer = io.BytesIO()
    image.save(buffer, image_format, **options)
    return buffer.getvalue()


def exif_with_orientation(orientation: int | None, byte_order: str = "<") -> bytes:
    """An EXIF block (APP1 payload) by hand: TIFF header and one IFD with a Make tag and, if given, the
    orientation; little- or big-endian."""
    entries = [struct.pack(byte_order + "HHI4s", 0x010F, 2, 4, b"Cam\0")]
    if orientation is not None:
        entries.append(struct.pack(byte_order + "HHIH2x", EXIF_ORIENTATION, 3, 1, orientation))
    marker = b"II*\0" if byte_order == "<" else b"MM\0*"
    ifd = struct.pack(byte_order + "H", len(entries)) + b"".join(entries) + b"\0\0\0\0"
    return b"Exif\0\0" + marker + struct.pack(byte_order + "I", 8) + ifd


def pillow_says_device_decodable(data: bytes) -> bool:
    """What Pillow reads of the file: a JPEG it decodes completely, to RGB from YCbCr (no Adobe transform 0),
    baseline (not progressive), upright (getexif's orientation, which falls back on XMP, is 1)."""
    try:
        with Image.open(io.BytesIO(data)) as image:
            image.load()
            return (
                image.format == "JPEG"
                and image.mode == "RGB"
                and image.info.get("adobe_transform") != 0
                and "progressive" not in image.info
                and image.getexif().get(EXIF_ORIENTATION, 1) == 1
            )
    except OSError:
        return False


def variants() -> dict[str, bytes]:
    """Files of the kinds a corpus holds, made here."""
    photo = photo_like(20, 120, 90)
    baseline = encoded(photo, quality=90)
    made = {
        "baseline 4:2:0": baseline,
        "baseline 4:2:2": encoded(photo, quality=90, subsampling=1),
        "baseline 4:4:4": encoded(photo, quality=90, subsampling=0),
        "optimized huffman": encoded(photo, quality=80, optimize=True),
        "restart markers": encoded(photo, quality=90, restart_marker_blocks=2),
        "progressive": encoded(photo, quality=90, progressive=True),
        "grayscale": encoded(photo.convert("L"), quality=90),
        "cmyk": encoded(photo.convert("CMYK"), quality=90),
        "rgb without ycbcr": encoded(photo, quality=90, keep_rgb=True),
        "exif without orientation": encoded(photo, exif=exif_with_orientation(None)),
        "exif big-endian upright": encoded(photo, exif=exif_with_orientation(1, ">")),
        "exif big-endian rotated": encoded(photo, exif=exif_with_orientation(6, ">")),
        "xmp rotated": encoded(photo, xmp=XMP_ROTATED),
        "truncated": baseline[: len(baseline) // 2],
        "no end marker": baseline[:-2],
        "png": encoded(photo, "PNG"),
        "webp": encoded(photo, "WEBP"),
        "not an image": b"this is not an image",
        "empty": b"",
    }
    for orientation in range(1, 9):
        made[f"exif orientation {orientation}"] = encoded(photo, exif=exif_with_orientation(orientation))
    return made


@pytest.mark.parametrize(("name", "data"), variants().items(), ids=list(variants()))
def test_the_header_check_agrees_with_pillow(name, data):
    assert device_decodable(data) == pillow_says_device_decodable(data)


def test_the_variants_cover_both_answers():
    answers = {name: pillow_says_device_decodable(data) for name, data in variants().items()}
    assert {name for name, answer in answers.items() if answer} == {
        "baseline 4:2:0",
        "baseline 4:2:2",
        "baseline 4:4:4",
        "optimized huffman",
        "restart markers",
        "exif without orientation",
        "exif big-endian upright",
        "exif orientation 1",
    }


def test_the_check_reads_read_only_views_of_a_larger_buffer_as_archive_members_are():
    data = encoded(photo_like(21, 64, 48))
    buffer = np.frombuffer(b"\0" * 512 + data + b"\0" * 512, dtype=np.uint8)
    view = buffer.data[512 : 512 + len(data)]
    assert view.readonly and device_decodable(view)
    assert not device_decodable(buffer.data[512 : 512 + len(data) - 1])


def test_a_malformed_exif_block_leaves_the_image_to_pillow():
    photo = photo_like(22, 64, 48)
    exif = exif_with_orientation(1)
    broken = exif[:10] + struct.pack("<I", 4000) + exif[14:]  # the first IFD points past the block
    assert device_decodable(encoded(photo, exif=exif))
    assert not device_decodable(encoded(photo, exif=broken))
