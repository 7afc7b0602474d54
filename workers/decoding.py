"""Image decoding for the inference engine: Pillow in the loader processes, nvJPEG on a CUDA device, and the
header check that decides, from a JPEG's markers alone, which of the two an image goes to.

Pillow decodes every image upright per its EXIF orientation, in RGB. nvJPEG's batched decode (through
torchvision) applies no orientation, and decodes on the GPU's JPEG engines only baseline JPEGs: torchvision
decodes the rest one at a time, Huffman on the host of the main process with a device sync per image, where
Pillow in the loader processes is faster. So only complete, upright, baseline, YCbCr JPEGs go to the device.
"""

import io
import re
import struct
import warnings

import numpy as np
import torch
import torchvision.io
from PIL import Image, ImageOps

EXIF_ORIENTATION = 0x0112
SOI, EOI, SOS, BASELINE_SOF, APP1, APP14 = 0xD8, 0xD9, 0xDA, 0xC0, 0xE1, 0xEE
NON_SOF = {0xC4, 0xC8, 0xCC}
"""Markers in C0..CF that are not frames: Huffman tables, a reserved extension, arithmetic conditioning."""
STANDALONE = {0x01, *range(0xD0, 0xD8)}
"""Markers without a length: TEM and the restart markers."""
LUMA_SAMPLING = {(1, 1), (2, 1), (2, 2), (1, 2), (4, 1), (4, 2)}
"""Luma sampling factors (chroma at 1x1) that nvJPEG knows: 4:4:4, 4:2:2, 4:2:0, 4:4:0, 4:1:1, 4:1:0."""
RGB_COMPONENT_IDS = (82, 71, 66)
"""'R', 'G', 'B': libjpeg reads three components so named as RGB, not YCbCr."""
XMP_ORIENTATION = re.compile(rb'tiff:Orientation(?:="|>)([0-9])')
"""What Pillow's getexif reads from XMP when EXIF has no orientation."""


def decode_image(data: bytes | memoryview) -> Image.Image | None:
    """An RGB Pillow image upright per its EXIF orientation, or None if Pillow cannot decode `data`."""
    try:
        image = Image.open(io.BytesIO(data))
        image.load()
        ImageOps.exif_transpose(image, in_place=True)
        return image if image.mode == "RGB" else image.convert("RGB")
    except Exception:  # Pillow reports bad data as OSError, SyntaxError, ValueError, struct.error, ...
        return None


def device_decodable(data: bytes | memoryview) -> bool:
    """Whether nvJPEG's batched decode takes `data` and gives what Pillow would: a complete (SOI ... EOI)
    baseline 8-bit JPEG of three YCbCr components in a subsampling nvJPEG knows, upright (no EXIF or XMP
    orientation but 1). Read from the markers before the first scan, without copying the data; anything
    unusual or malformed is left to Pillow (ITU T.81 B.1 for the markers, JFIF and Adobe APP14 for colour)."""
    view = memoryview(data).cast("B")
    size = len(view)
    if size < 4 or view[0] != 0xFF or view[1] != SOI or view[size - 2] != 0xFF or view[size - 1] != EOI:
        return False
    position, frame, orientation, xmp_orientation = 2, None, None, None
    while position + 4 <= size:
        if view[position] != 0xFF:
            return False
        marker = view[position + 1]
        if marker == 0xFF or marker in STANDALONE:  # a fill byte, or a marker without a segment
            position += 1 if marker == 0xFF else 2
            continue
        if marker == SOS:
            upright = (orientation if orientation is not None else xmp_orientation or 1) == 1
            return frame is not None and upright
        length = (view[position + 2] << 8) | view[position + 3]
        segment = view[position + 4 : position + 2 + length]
        if length < 2 or len(segment) != length - 2:
            return False
        if 0xC0 <= marker <= 0xCF and marker not in NON_SOF:
            if marker != BASELINE_SOF or frame is not None or not _ycbcr_frame(segment):
                return False
            frame = segment
        elif marker == APP1 and segment[:6] == b"Exif\0\0":
            if orientation is None and (orientation := _exif_orientation(segment[6:])) is None:
                return False
        elif marker == APP1 and (match := XMP_ORIENTATION.search(segment)):
            xmp_orientation = int(match[1])
        elif marker == APP14 and segment[:5] == b"Adobe" and (len(segment) < 12 or segment[11] == 0):
            return False  # transform 0: stored as RGB (or CMYK), not YCbCr
        position += 2 + length
    return False


def _ycbcr_frame(frame: memoryview) -> bool:
    """Whether a baseline frame header (precision, height, width, components) is 8-bit YCbCr in a
    subsampling nvJPEG knows."""
    if len(frame) < 6 or frame[0] != 8 or frame[5] != 3 or len(frame) < 6 + 3 * 3:
        return False
    ids = tuple(frame[6 + 3 * index] for index in range(3))
    sampling = [(frame[7 + 3 * index] >> 4, frame[7 + 3 * index] & 15) for index in range(3)]
    return ids != RGB_COMPONENT_IDS and sampling[0] in LUMA_SAMPLING and sampling[1] == sampling[2] == (1, 1)


def _exif_orientation(tiff: memoryview) -> int | None:
    """The orientation in an EXIF block's first IFD (1 when it has none), or None if the block is malformed
    (Pillow may then refuse it: the image is left to Pillow). TIFF 6.0: byte order, IFD offset, 12-byte
    entries of tag, type, count, value."""
    order = {b"II": "<", b"MM": ">"}.get(bytes(tiff[:2]))
    try:
        if order is None:
            return None
        (offset,) = struct.unpack_from(order + "I", tiff, 4)
        (entries,) = struct.unpack_from(order + "H", tiff, offset)
        for entry in range(offset + 2, offset + 2 + 12 * entries, 12):
            tag, kind = struct.unpack_from(order + "HH", tiff, entry)
            if tag == EXIF_ORIENTATION:
                return struct.unpack_from(order + "H", tiff, entry + 8)[0] if kind == 3 else None
        return 1
    except struct.error:  # offsets beyond the block
        return None


def decode_jpegs(jpegs: list[torch.Tensor], device: torch.device) -> list[torch.Tensor | None]:
    """RGB uint8 CHW images on `device`: nvJPEG for the batch, else one at a time, else Pillow; None for an
    image none of them decodes."""
    with warnings.catch_warnings():  # torchvision 0.29 deprecates its codecs for torchcodec's
        warnings.simplefilter("ignore", DeprecationWarning)
        try:
            return torchvision.io.decode_jpeg(jpegs, mode=torchvision.io.ImageReadMode.RGB, device=device)
        except RuntimeError:
            return [_decode_one(jpeg, device) for jpeg in jpegs]


def _decode_one(jpeg: torch.Tensor, device: torch.device) -> torch.Tensor | None:
    """One JPEG decoded by nvJPEG, or by Pillow when nvJPEG refuses it."""
    try:
        return torchvision.io.decode_jpeg(jpeg, mode=torchvision.io.ImageReadMode.RGB, device=device)
    except RuntimeError:
        image = decode_image(jpeg.numpy().tobytes())
        return None if image is None else torch.from_numpy(np.asarray(image)).permute(2, 0, 1).to(device)
