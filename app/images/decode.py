"""Check an image file and make its thumbnail: JPEG, PNG or WebP, whole, within the pixel limit.

Decoding is the memory an import spends: a check holds the decoded frame and any full-size copy that
scaling needs, so checks running at once share DECODE_BUDGET bytes of them (one larger than the budget
runs alone), the threads of one process or, through checking_processes, every process of an import. JPEGs
are decoded at the smallest DCT scale that still gives the thumbnail its size, which reads every byte of
the file (so truncation is still caught) into up to 64 times less memory.
"""

import ctypes
import io
import multiprocessing
import threading
import warnings
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from multiprocessing.context import BaseContext

import imagehash
from PIL import ExifTags, Image, ImageOps, UnidentifiedImageError

# Pillow warns between MAX_IMAGE_PIXELS and twice that and raises beyond; check_image refuses both itself,
# so the warning would only be noise.
warnings.filterwarnings("ignore", category=Image.DecompressionBombWarning)

PILLOW_FORMATS = {"JPEG": "jpeg", "MPO": "jpeg", "PNG": "png", "WEBP": "webp"}
SIDEWAYS_ORIENTATIONS = {5, 6, 7, 8}
"""EXIF orientations that turn the image a quarter (width and height swap)."""
ONE_BYTE_MODES = {"1", "L", "P"}
"""Pillow modes stored one byte a pixel; every other mode takes four."""
SCALED_AS_IS = {"RGB", "L"}
"""Modes Pillow scales without a full-size copy (others are converted, or premultiplied by alpha, first)."""
BAND_ROWS = 256
"""Rows converted at a time when shrinking an image of another mode."""


class BadImage(ValueError):
    """The file is not an acceptable image; the message says why."""


@dataclass(frozen=True)
class CheckedImage:
    """What import keeps of a good image: its format, oriented size and thumbnail."""

    format: str
    width: int
    height: int
    thumbnail: bytes
    phash: int
    """imagehash's 64-bit pHash of the upright thumbnail, as a signed integer (a BIGINT column)."""


class DecodeBudget:
    """Bytes of decoded pixels that image checks may hold at once: those of one process's threads, or, made
    with a multiprocessing context and handed to its processes, those of all of them."""

    def __init__(self, capacity: int, context: BaseContext | None = None) -> None:
        self.capacity = capacity
        self._in_use: ctypes.c_int64 = (
            ctypes.c_int64(0) if context is None else context.RawValue(ctypes.c_int64, 0)
        )
        self._changed = threading.Condition() if context is None else context.Condition()

    @property
    def in_use(self) -> int:
        """Bytes held now."""
        return self._in_use.value

    @contextmanager
    def hold(self, nbytes: int) -> Iterator[None]:
        """Wait until nbytes fit beside the checks running (more than the capacity waits to run alone)."""
        nbytes = min(nbytes, self.capacity)
        with self._changed:
            self._changed.wait_for(lambda: self._in_use.value + nbytes <= self.capacity)
            self._in_use.value += nbytes
        try:
            yield
        finally:
            with self._changed:
                self._in_use.value -= nbytes
                self._changed.notify_all()


DECODE_BUDGET_BYTES = 256 * 1024 * 1024
DECODE_BUDGET = DecodeBudget(DECODE_BUDGET_BYTES)
PROCESS_START = "fork"
"""How checking processes start: forked, at once (~0.1 s; a fork server or spawn would import the importer's
modules again in each, seconds on a loaded machine), so before the importer starts any thread."""


def use_decode_budget(budget: DecodeBudget) -> None:
    """Make budget the one this process's checks share (the initializer of checking processes)."""
    global DECODE_BUDGET
    DECODE_BUDGET = budget


def checking_processes(count: int) -> ProcessPoolExecutor:
    """count processes that run check_images, sharing one DECODE_BUDGET_BYTES budget between them, all
    started now: make them before any thread of this process (forking a process that runs threads can copy
    a lock one of them holds)."""
    context = multiprocessing.get_context(PROCESS_START)
    budget = DecodeBudget(DECODE_BUDGET_BYTES, context)
    processes = ProcessPoolExecutor(count, context, initializer=use_decode_budget, initargs=(budget,))
    processes.submit(int).result()  # a fork-based pool starts all its processes at its first task
    return processes


def decoded_bytes(image: Image.Image) -> int:
    """Pixel bytes of checking an opened image: its frame at decode size, as Pillow stores it (1 or 4 bytes a
    pixel); shrinking it for the thumbnail makes no full-size copy."""
    return image.width * image.height * (1 if image.mode in ONE_BYTE_MODES else 4)


def check_images(files: list[bytes], max_pixels: int, thumbnail_size: int) -> list[CheckedImage | str]:
    """Each file's check_image, or the reason it is refused (a task for a checking process)."""
    checked: list[CheckedImage | str] = []
    for data in files:
        try:
            checked.append(check_image(data, max_pixels=max_pixels, thumbnail_size=thumbnail_size))
        except BadImage as error:
            checked.append(str(error))
    return checked


def check_image(
    data: bytes, *, max_pixels: int, thumbnail_size: int, budget: DecodeBudget | None = None
) -> CheckedImage:
    """Fully decode an image (so truncation is caught), apply EXIF orientation and make a WebP thumbnail."""
    budget = budget or DECODE_BUDGET
    Image.MAX_IMAGE_PIXELS = max_pixels
    try:
        with Image.open(io.BytesIO(data)) as image:
            image_format = PILLOW_FORMATS.get(image.format or "")
            if image_format is None:
                raise BadImage(f"{image.format} images are not accepted (JPEG, PNG or WebP only)")
            if image.width * image.height > max_pixels:
                raise BadImage(_bomb_reason(max_pixels))
            stored_size = image.size
            image.draft(None, (thumbnail_size, thumbnail_size))  # JPEG only: decode at a reduced scale
            with budget.hold(decoded_bytes(image)):
                image.load()
                sideways = image.getexif().get(ExifTags.Base.Orientation) in SIDEWAYS_ORIENTATIONS
                width, height = reversed(stored_size) if sideways else stored_size
                thumbnail = _thumbnail(image, thumbnail_size)
                phash = signed_phash(thumbnail)
                thumbnail_bytes = _webp(thumbnail)
    except Image.DecompressionBombError:
        raise BadImage(_bomb_reason(max_pixels)) from None
    except UnidentifiedImageError:
        raise BadImage("not an image file") from None
    except (OSError, SyntaxError, ValueError) as error:
        if isinstance(error, BadImage):
            raise
        raise BadImage(f"unreadable or truncated image ({error})") from None
    return CheckedImage(
        format=image_format, width=width, height=height, thumbnail=thumbnail_bytes, phash=phash
    )


def signed_phash(image: Image.Image) -> int:
    """imagehash.phash as a signed 64-bit integer (the hash's bits, read as two's complement)."""
    value = int(str(imagehash.phash(image)), 16)
    return value - (1 << 64) if value >= 1 << 63 else value


def _reduced_in_bands(image: Image.Image, size: int, mode: str) -> Image.Image:
    """The image in `mode`, box-reduced by the integer factors Image.thumbnail takes first (each side over
    its final length over 2), converted BAND_ROWS rows at a time: converting or premultiplying alpha copies
    whatever it is given, and a band is small."""
    scale = min(size / image.width, size / image.height, 1.0)
    factor_x = max(1, int(image.width / max(1, round(image.width * scale)) / 2))
    factor_y = max(1, int(image.height / max(1, round(image.height * scale)) / 2))
    band = factor_y * max(1, BAND_ROWS // factor_y)
    reduced = Image.new(mode, (-(-image.width // factor_x), -(-image.height // factor_y)))
    for top in range(0, image.height, band):
        rows = image.crop((0, top, image.width, min(top + band, image.height))).convert(mode)
        reduced.paste(rows.reduce((factor_x, factor_y)), (0, top // factor_y))
    reduced.info = dict(image.info)  # keeps the EXIF orientation for exif_transpose
    return reduced


def _bomb_reason(max_pixels: int) -> str:
    """Why an image over the pixel limit is refused."""
    return f"more than {max_pixels:,} pixels (decompression-bomb limit)"


def _thumbnail(image: Image.Image, size: int) -> Image.Image:
    """The image scaled to fit a size × size box, then turned upright per its EXIF orientation."""
    mode = "RGBA" if image.mode in ("RGBA", "LA", "P") else "RGB"
    scaled = image if image.mode in SCALED_AS_IS else _reduced_in_bands(image, size, mode)
    scaled.thumbnail((size, size))
    thumbnail = ImageOps.exif_transpose(scaled)
    return thumbnail if thumbnail.mode == mode else thumbnail.convert(mode)


def _webp(thumbnail: Image.Image) -> bytes:
    """The thumbnail encoded as WebP at quality 80."""
    buffer = io.BytesIO()
    thumbnail.save(buffer, format="WEBP", quality=80, method=4)
    return buffer.getvalue()
