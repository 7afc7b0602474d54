"""Reading uploaded .npz files with bounded memory: each array's size is checked from the zip directory
and the .npy header before any of its data is inflated, so a small file claiming huge arrays is refused
cheaply."""

import zipfile
from collections.abc import Iterable
from typing import IO

import numpy as np

NPY_HEADER_BYTES = 64 * 1024
"""Room for an .npy header beside its data (numpy writes 64 to a few hundred bytes)."""


class NpzError(ValueError):
    """An .npz file that cannot be read within the limits; the message says why."""


def load_npz(source: IO[bytes] | str, names: Iterable[str], max_array_bytes: int) -> dict[str, np.ndarray]:
    """The named arrays of an .npz (absent ones left out), none of them pickled or over max_array_bytes."""
    try:
        with zipfile.ZipFile(source) as archive:
            members = {info.filename: info for info in archive.infolist()}
            return {
                name: _read_member(archive, members[f"{name}.npy"], name, max_array_bytes)
                for name in names
                if f"{name}.npy" in members
            }
    except NpzError:
        raise
    except (ValueError, OSError, EOFError, KeyError, zipfile.BadZipFile, NotImplementedError) as error:
        raise NpzError(str(error) or type(error).__name__) from None


def _read_member(archive: zipfile.ZipFile, info: zipfile.ZipInfo, name: str, max_bytes: int) -> np.ndarray:
    """One array, after checking its inflated size (zip directory) and its shape and dtype (.npy header)."""
    if info.file_size > max_bytes + NPY_HEADER_BYTES:
        raise NpzError(
            f"array {name} inflates to {info.file_size:,} bytes; at most {max_bytes:,} are accepted"
        )
    with archive.open(info) as member:
        version = np.lib.format.read_magic(member)
        if version == (1, 0):
            shape, _, dtype = np.lib.format.read_array_header_1_0(member)
        else:
            shape, _, dtype = np.lib.format.read_array_header_2_0(member)
    if dtype.hasobject:
        raise NpzError(f"array {name} holds Python objects (a pickle); use numbers or fixed-width strings")
    size = int(np.prod(shape, dtype=object)) * dtype.itemsize
    if size > max_bytes:
        raise NpzError(f"array {name} has shape {shape} of {dtype}: {size:,} bytes; at most {max_bytes:,}")
    with archive.open(info) as member:
        return np.lib.format.read_array(member, allow_pickle=False)
