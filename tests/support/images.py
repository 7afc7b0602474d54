"""Real image files for tests: random pixels in PNG, JPEG (optionally EXIF-rotated) and WebP."""

import io
from pathlib import Path

import numpy as np
from PIL import Image

EXIF_ORIENTATION_TAG = 0x0112


def random_image(seed: int, width: int = 48, height: int = 32) -> Image.Image:
    """An RGB image of random pixels, different for every seed."""
    pixels = np.random.default_rng(seed).integers(0, 256, size=(height, width, 3), dtype=np.uint8)
    return Image.fromarray(pixels, "RGB")


def image_bytes(
    seed: int, image_format: str = "PNG", width: int = 48, height: int = 32, **save_options
) -> bytes:
    """The encoded bytes of random_image(seed)."""
    buffer = io.BytesIO()
    random_image(seed, width, height).save(buffer, format=image_format, **save_options)
    return buffer.getvalue()


def rotated_jpeg_bytes(seed: int, width: int = 60, height: int = 20) -> bytes:
    """A JPEG stored width × height whose EXIF says 'rotate 90°', so it displays height × width."""
    exif = Image.Exif()
    exif[EXIF_ORIENTATION_TAG] = 6
    return image_bytes(seed, "JPEG", width, height, exif=exif.tobytes())


def write_images(folder: Path, count: int, start_seed: int = 0) -> list[Path]:
    """count distinct small images in a folder, cycling through PNG, JPEG and WebP, some in subfolders."""
    paths = []
    formats = (("PNG", "png"), ("JPEG", "jpg"), ("WEBP", "webp"))
    for index in range(count):
        image_format, extension = formats[index % 3]
        path = folder / f"part{index % 4}" / f"image_{index:05d}.{extension}"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(image_bytes(start_seed + index, image_format, width=24, height=16))
        paths.append(path)
    return paths
