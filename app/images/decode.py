"""Check an image file and make its thumbnail: JPEG, PNG or WebP, whole, within the pixel limit."""

import io
import warnings
from dataclasses import dataclass

from PIL import Image, ImageOps, UnidentifiedImageError

# Pillow warns between MAX_IMAGE_PIXELS and twice that and raises beyond; check_image refuses both itself,
# so the warning would only be noise.
warnings.filterwarnings("ignore", category=Image.DecompressionBombWarning)

PILLOW_FORMATS = {"JPEG": "jpeg", "MPO": "jpeg", "PNG": "png", "WEBP": "webp"}


class BadImage(ValueError):
    """The file is not an acceptable image; the message says why."""


@dataclass(frozen=True)
class CheckedImage:
    """What import keeps of a good image: its format, oriented size and thumbnail."""

    format: str
    width: int
    height: int
    thumbnail: bytes


def check_image(data: bytes, *, max_pixels: int, thumbnail_size: int) -> CheckedImage:
    """Fully decode an image (so truncation is caught), apply EXIF orientation and make a WebP thumbnail."""
    Image.MAX_IMAGE_PIXELS = max_pixels
    try:
        with Image.open(io.BytesIO(data)) as image:
            image_format = PILLOW_FORMATS.get(image.format or "")
            if image_format is None:
                raise BadImage(f"{image.format} images are not accepted (JPEG, PNG or WebP only)")
            if image.width * image.height > max_pixels:
                raise BadImage(_bomb_reason(max_pixels))
            image.load()
            oriented = ImageOps.exif_transpose(image)
            width, height = oriented.size
            thumbnail = _thumbnail_bytes(oriented, thumbnail_size)
    except Image.DecompressionBombError:
        raise BadImage(_bomb_reason(max_pixels)) from None
    except UnidentifiedImageError:
        raise BadImage("not an image file") from None
    except (OSError, SyntaxError, ValueError) as error:
        if isinstance(error, BadImage):
            raise
        raise BadImage(f"unreadable or truncated image ({error})") from None
    return CheckedImage(format=image_format, width=width, height=height, thumbnail=thumbnail)


def _bomb_reason(max_pixels: int) -> str:
    """Why an image over the pixel limit is refused."""
    return f"more than {max_pixels:,} pixels (decompression-bomb limit)"


def _thumbnail_bytes(image: Image.Image, size: int) -> bytes:
    """A WebP of the image scaled to fit a size × size box."""
    thumbnail = image.convert("RGBA" if image.mode in ("RGBA", "LA", "P") else "RGB")
    thumbnail.thumbnail((size, size))
    buffer = io.BytesIO()
    thumbnail.save(buffer, format="WEBP", quality=80, method=4)
    return buffer.getvalue()
