"""The demo corpus: scikit-learn's 1,797 UCI handwritten digits written out as PNG files, and their labels."""

import io
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from PIL import Image
from sklearn.datasets import load_digits

PNG_SCALE = 8


@dataclass(frozen=True)
class DigitsCorpus:
    """The PNG files in scikit-learn's order and each one's digit."""

    paths: list[Path]
    digits: np.ndarray

    def training_slices(self, sizes: list[int], seed: int) -> tuple[list[np.ndarray], np.ndarray]:
        """Disjoint random slices of the given sizes for training, and every other index (held out)."""
        order = np.random.default_rng(seed).permutation(len(self.paths))
        ends = np.cumsum(sizes)
        slices = [order[end - size : end] for size, end in zip(sizes, ends, strict=True)]
        return slices, np.sort(order[ends[-1] :])


def digit_png(pixels: np.ndarray) -> bytes:
    """An 8×8 digit (values 0–16) as a 64×64 grayscale PNG, dark ink on white, pixels kept sharp."""
    gray = (255 - pixels * 255 / 16).round().astype(np.uint8)
    image = Image.fromarray(gray, "L").resize((8 * PNG_SCALE, 8 * PNG_SCALE), Image.Resampling.NEAREST)
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    return buffer.getvalue()


def write_corpus(folder: Path, limit: int | None = None) -> DigitsCorpus:
    """Write the digits (the first `limit`, or all) as digit_NNNN.png, names not revealing the digit."""
    digits = load_digits()
    images, targets = digits.images[:limit], digits.target[:limit]
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for index, pixels in enumerate(images):
        path = folder / f"digit_{index:04d}.png"
        if not path.exists():
            path.write_bytes(digit_png(pixels))
        paths.append(path)
    return DigitsCorpus(paths=paths, digits=np.asarray(targets))
