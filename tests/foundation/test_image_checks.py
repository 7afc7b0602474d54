"""Image checks: formats, truncation, decompression bombs, EXIF orientation, thumbnails."""

import io

import pytest
from PIL import Image

from app.images.decode import BadImage, check_image
from tests.support.images import image_bytes, rotated_jpeg_bytes

LIMITS = {"max_pixels": 1_000_000, "thumbnail_size": 64}


@pytest.mark.parametrize(("pillow_format", "expected"), [("PNG", "png"), ("JPEG", "jpeg"), ("WEBP", "webp")])
def test_accepted_formats_give_size_and_a_webp_thumbnail(pillow_format, expected):
    checked = check_image(image_bytes(1, pillow_format, width=200, height=100), **LIMITS)
    assert (checked.format, checked.width, checked.height) == (expected, 200, 100)
    with Image.open(io.BytesIO(checked.thumbnail)) as thumbnail:
        assert thumbnail.format == "WEBP"
        assert thumbnail.size == (64, 32)


def test_exif_orientation_is_applied_to_size_and_thumbnail():
    checked = check_image(rotated_jpeg_bytes(1, width=60, height=20), **LIMITS)
    assert (checked.width, checked.height) == (20, 60)
    with Image.open(io.BytesIO(checked.thumbnail)) as thumbnail:
        assert thumbnail.height > thumbnail.width


def test_other_formats_are_refused_by_name():
    with pytest.raises(BadImage, match="GIF"):
        check_image(image_bytes(1, "GIF"), **LIMITS)


@pytest.mark.parametrize("pillow_format", ["PNG", "JPEG"])
def test_truncated_files_are_refused(pillow_format):
    data = image_bytes(1, pillow_format, width=64, height=64)
    with pytest.raises(BadImage, match="truncated|unreadable"):
        check_image(data[: len(data) // 2], **LIMITS)


def test_text_is_not_an_image():
    with pytest.raises(BadImage, match="not an image"):
        check_image(b"hello, world", **LIMITS)


def test_decompression_bombs_are_refused_before_decoding():
    # A 1-bit 20000 × 20000 PNG compresses to a few kilobytes but would decode to 400 Mpx.
    buffer = io.BytesIO()
    Image.new("1", (20_000, 20_000)).save(buffer, format="PNG")
    assert len(buffer.getvalue()) < 200_000
    with pytest.raises(BadImage, match="decompression-bomb"):
        check_image(buffer.getvalue(), **LIMITS)
    # Between the limit and twice the limit Pillow only warns; that is refused too.
    with pytest.raises(BadImage, match="decompression-bomb"):
        check_image(image_bytes(1, "PNG", width=1200, height=1000), **LIMITS)
