"""Real image files of many kinds, a picklable reader for them, and small timm models."""

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import timm
import torch
from PIL import Image

EXIF_ORIENTATION = 0x0112
ROTATE_90_CLOCKWISE = 6


@dataclass(frozen=True)
class FileReader:
    """read_bytes(ordinal) over a list of files; picklable, as DataLoader workers need."""

    paths: tuple[Path, ...]

    def __call__(self, ordinal: int) -> bytes:
        return self.paths[ordinal].read_bytes()


@dataclass(frozen=True)
class FailingReader:
    """A read_bytes whose storage fails for one ordinal, as a lost file or a network error would."""

    read_bytes: Callable[[int], bytes]
    failing: int

    def __call__(self, ordinal: int) -> bytes:
        if ordinal == self.failing:
            raise FileNotFoundError(f"image {ordinal} is gone")
        return self.read_bytes(ordinal)


@dataclass(frozen=True)
class ImageSet:
    """Test images by role, in ordinal order."""

    paths: tuple[Path, ...]
    exif_rotated: int  # stored sideways with EXIF orientation 6
    upright_copy: int  # the same pixels stored already rotated, no EXIF
    undecodable: tuple[int, ...]

    @property
    def decodable(self) -> list[int]:
        return [ordinal for ordinal in range(len(self.paths)) if ordinal not in self.undecodable]


def photo_like(seed: int, width: int, height: int) -> Image.Image:
    """An RGB image with smooth structure plus noise, different for every seed."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:height, 0:width] / max(width, height)
    channels = [np.sin(rng.uniform(2, 12) * x + rng.uniform(2, 12) * y + rng.uniform(0, 6)) for _ in range(3)]
    pixels = (np.stack(channels, axis=-1) * 100 + 128 + rng.normal(0, 20, (height, width, 3))).clip(0, 255)
    return Image.fromarray(pixels.astype(np.uint8), "RGB")


@pytest.fixture(scope="session")
def images(tmp_path_factory) -> ImageSet:
    """JPEG and PNG files of varied sizes and modes, one EXIF-rotated, one truncated, one not an image."""
    folder = tmp_path_factory.mktemp("images")
    paths: list[Path] = []

    def save(image: Image.Image, name: str, **options) -> int:
        paths.append(folder / name)
        image.save(paths[-1], **options)
        return len(paths) - 1

    for seed, (width, height) in enumerate([(320, 200), (200, 320), (40, 30), (900, 600), (224, 224)]):
        save(photo_like(seed, width, height), f"photo{seed}.jpg", quality=90)
    save(photo_like(10, 180, 120).convert("L"), "gray.png")
    save(photo_like(11, 150, 150).convert("RGBA"), "alpha.png")
    save(photo_like(12, 160, 100).convert("P"), "palette.png")
    sideways = photo_like(13, 240, 120)
    exif = Image.Exif()
    exif[EXIF_ORIENTATION] = ROTATE_90_CLOCKWISE
    exif_rotated = save(sideways, "exif_rotated.png", exif=exif.tobytes())
    upright_copy = save(sideways.transpose(Image.Transpose.ROTATE_270), "upright_copy.png")
    save(photo_like(14, 300, 300), "exif_rotated.jpg", exif=exif.tobytes(), quality=90)
    truncated = len(paths)
    paths.append(folder / "truncated.jpg")
    paths[-1].write_bytes(paths[3].read_bytes()[:3000])
    not_an_image = len(paths)
    paths.append(folder / "notes.txt")
    paths[-1].write_text("this is not an image")
    save(photo_like(15, 500, 260), "photo15.jpg", quality=75)
    return ImageSet(tuple(paths), exif_rotated, upright_copy, (truncated, not_an_image))


@pytest.fixture(scope="session")
def read_bytes(images) -> FileReader:
    """read_bytes(ordinal) for the test images."""
    return FileReader(images.paths)


@pytest.fixture(scope="session")
def models() -> list[torch.nn.Module]:
    """Three tiny timm classifiers over 10 classes: two share resize/crop geometry, one does not."""
    torch.manual_seed(0)
    names = [
        "test_resnet",
        "test_efficientnet",
        "test_vit",
    ]  # bilinear; bicubic (ImageNet mean); bicubic (0.5)
    return [timm.create_model(name, num_classes=10).eval() for name in names]
