"""Image checks: formats, truncation, decompression bombs, EXIF orientation, thumbnails."""

import io
import multiprocessing
import threading

import numpy as np
import pytest
from PIL import Image

from app.images.decode import PROCESS_START, BadImage, DecodeBudget, check_image
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


def test_a_jpeg_decoded_at_a_reduced_scale_is_still_read_to_its_end():
    data = image_bytes(1, "JPEG", width=1600, height=1200, quality=95)
    checked = check_image(data, max_pixels=10**7, thumbnail_size=64)  # the decoder scales by 1/8
    assert (checked.width, checked.height) == (1600, 1200)
    with pytest.raises(BadImage, match="truncated"):
        check_image(data[: len(data) * 3 // 4], max_pixels=10**7, thumbnail_size=64)


def _on_white(image: Image.Image) -> np.ndarray:
    """The image's colours composited on white (what a page shows), as floats."""
    rgba = image.convert("RGBA")
    return np.asarray(
        Image.alpha_composite(Image.new("RGBA", rgba.size, "white"), rgba).convert("RGB"), float
    )


@pytest.mark.parametrize("mode", ["RGBA", "P", "LA", "I;16"])
def test_images_of_other_modes_are_shrunk_in_bands_to_the_same_thumbnail(mode):
    pixels = np.random.default_rng(0).integers(0, 256, (8, 12, 4), dtype=np.uint8)
    picture = Image.fromarray(pixels, "RGBA").resize((1200, 800), Image.Resampling.BICUBIC)
    picture = picture.quantize(32) if mode == "P" else picture.convert(mode)
    buffer = io.BytesIO()
    picture.save(buffer, format="PNG")
    checked = check_image(buffer.getvalue(), max_pixels=10**7, thumbnail_size=64)
    expected = picture.convert("RGBA" if mode in ("RGBA", "LA", "P") else "RGB")
    expected.thumbnail((64, 64))
    with Image.open(io.BytesIO(checked.thumbnail)) as thumbnail:
        assert thumbnail.size == expected.size == (64, 43)
        # WebP at quality 80 alone differs by 1-5 levels on these colours; a misplaced band by dozens
        assert np.abs(_on_white(thumbnail) - _on_white(expected)).mean() < 8


def test_checks_that_would_hold_more_than_the_budget_wait_for_each_other():
    budget = DecodeBudget(capacity=100)
    first_holds, second_holds, release_first = threading.Event(), threading.Event(), threading.Event()

    def first():
        with budget.hold(60):
            first_holds.set()
            release_first.wait(5)

    def second():
        with budget.hold(1_000):  # more than the capacity: waits to run alone
            second_holds.set()

    threads = [threading.Thread(target=first), threading.Thread(target=second)]
    threads[0].start()
    assert first_holds.wait(5)
    threads[1].start()
    assert not second_holds.wait(0.2)
    release_first.set()
    assert second_holds.wait(5)
    for thread in threads:
        thread.join(5)
    assert budget.in_use == 0


def _hold_until(budget: DecodeBudget, nbytes: int, holding, release) -> None:
    """In a process: hold nbytes of the budget, say so, and keep them until told to release."""
    with budget.hold(nbytes):
        holding.set()
        release.wait(10)


def test_checking_processes_share_one_budget():
    context = multiprocessing.get_context(PROCESS_START)
    budget = DecodeBudget(capacity=100, context=context)
    first_holds, second_holds, release = context.Event(), context.Event(), context.Event()
    first = context.Process(target=_hold_until, args=(budget, 60, first_holds, release))
    second = context.Process(target=_hold_until, args=(budget, 1_000, second_holds, release))
    first.start()
    assert first_holds.wait(10)
    second.start()
    assert not second_holds.wait(0.5)  # another process's check holds 60 of the 100 bytes
    release.set()
    assert second_holds.wait(10)
    for process in (first, second):
        process.join(10)
    assert budget.in_use == 0
