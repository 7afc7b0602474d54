"""Where imported images come from: a folder (recursive), a zip or tar archive, or uploaded files.

Each source yields entries in a stable order: a Candidate (a name and at most max_bytes of data) or a
Rejected (a name and the reason). Nothing is extracted to disk; unsafe entries are reported, not read.
"""

import lzma
import os
import re
import stat
import tarfile
import zipfile
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import BinaryIO

ARCHIVE_SUFFIXES = (".zip", ".tar", ".tar.gz", ".tgz", ".tar.bz2", ".tar.xz")
ZIP_DIRECTORY_ERRORS = (zipfile.BadZipFile, OSError, EOFError, UnicodeDecodeError)
"""What reading a damaged zip directory raises (names flagged UTF-8 that are not: UnicodeDecodeError)."""
DAMAGED_DATA_ERRORS = (OSError, EOFError, zlib.error, lzma.LZMAError, zipfile.BadZipFile, tarfile.TarError)
"""What reading damaged compressed data raises (gzip and bz2 raise OSError; zlib and xz their own)."""


@dataclass(frozen=True)
class Candidate:
    """A file to check and store."""

    name: str
    data: bytes


@dataclass(frozen=True)
class Rejected:
    """A file that was not imported, and why."""

    name: str
    reason: str


ImportEntry = Candidate | Rejected
CONTROL_CHARACTERS = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def printable(name: str) -> str:
    """A file name safe to show and store: undecodable bytes and control characters become U+FFFD."""
    text = name.encode("utf-8", "surrogateescape").decode("utf-8", "replace")
    return CONTROL_CHARACTERS.sub("\ufffd", text)


def _too_large(size: int, max_bytes: int) -> str:
    """The rejection reason for a file over the size limit."""
    return f"file of {size:,} bytes is over the {max_bytes:,}-byte limit"


def _read_limited(stream: BinaryIO, max_bytes: int) -> bytes | None:
    """At most max_bytes from a stream; None when there is more."""
    data = stream.read(max_bytes + 1)
    return None if len(data) > max_bytes else data


def folder_entries(root: Path, max_bytes: int) -> Iterator[ImportEntry]:
    """Every non-hidden file below root, sorted; symbolic links that leave the folder are refused."""
    root = root.resolve()
    for directory, subdirectories, files in os.walk(root):
        subdirectories[:] = sorted(d for d in subdirectories if not d.startswith("."))
        for file_name in sorted(f for f in files if not f.startswith(".")):
            path = Path(directory, file_name)
            name = printable(str(path.relative_to(root)))
            yield _folder_entry(root, path, name, max_bytes)


def _folder_entry(root: Path, path: Path, name: str, max_bytes: int) -> ImportEntry:
    """Read one file of a folder, refusing links out of the folder and non-regular files."""
    if path.is_symlink() and not path.resolve().is_relative_to(root):
        return Rejected(name, "symbolic link pointing outside the imported folder")
    try:
        info = path.stat()
        if not stat.S_ISREG(info.st_mode):
            return Rejected(name, "not a regular file")
        if info.st_size > max_bytes:
            return Rejected(name, _too_large(info.st_size, max_bytes))
        with path.open("rb") as stream:
            data = _read_limited(stream, max_bytes)
    except OSError as error:
        return Rejected(name, f"cannot be read ({error.strerror or error})")
    return Candidate(name, data) if data is not None else Rejected(name, _too_large(max_bytes + 1, max_bytes))


def count_folder_files(root: Path) -> int:
    """How many entries folder_entries will yield (for a progress bar)."""
    total = 0
    for _directory, subdirectories, files in os.walk(root.resolve()):
        subdirectories[:] = [d for d in subdirectories if not d.startswith(".")]
        total += sum(1 for f in files if not f.startswith("."))
    return total


def unsafe_member_reason(member_name: str) -> str | None:
    """Why an archive member's path is unsafe (absolute, or climbing with '..'), else None."""
    if member_name.startswith(("/", "\\")) or re.match(r"^[A-Za-z]:", member_name):
        return "absolute path inside the archive"
    if ".." in PurePosixPath(member_name.replace("\\", "/")).parts:
        return "path with '..' inside the archive"
    return None


def is_archive_name(name: str) -> bool:
    """True for .zip and .tar(.gz/.bz2/.xz) names."""
    return name.lower().endswith(ARCHIVE_SUFFIXES)


def archive_entries(stream: BinaryIO, archive_name: str, max_bytes: int) -> Iterator[ImportEntry]:
    """The members of a zip or tar archive; a damaged archive yields one Rejected entry."""
    if zipfile.is_zipfile(stream):
        stream.seek(0)
        yield from _zip_entries(stream, archive_name, max_bytes)
        return
    stream.seek(0)
    try:
        archive = tarfile.open(fileobj=stream, mode="r:*")
    except DAMAGED_DATA_ERRORS:
        yield Rejected(archive_name, "not a readable zip or tar archive")
        return
    with archive:
        yield from _tar_entries(archive, archive_name, max_bytes)


def count_archive_members(stream: BinaryIO) -> int | None:
    """Number of files in a zip archive (known from its directory); None for tar (it would need a pass)."""
    if not zipfile.is_zipfile(stream):
        stream.seek(0)
        return None
    stream.seek(0)
    try:
        with zipfile.ZipFile(stream) as archive:
            total = sum(1 for info in archive.infolist() if not info.is_dir())
    except ZIP_DIRECTORY_ERRORS:
        total = None  # archive_entries reports the damage
    stream.seek(0)
    return total


def _zip_entries(stream: BinaryIO, archive_name: str, max_bytes: int) -> Iterator[ImportEntry]:
    """Regular files of a zip archive; links, encrypted and unsafe members are refused."""
    try:
        archive = zipfile.ZipFile(stream)
    except UnicodeDecodeError:
        yield Rejected(archive_name, "zip archive whose member names are marked UTF-8 but are not")
        return
    except ZIP_DIRECTORY_ERRORS:
        yield Rejected(archive_name, "not a readable zip archive")
        return
    with archive:
        for info in archive.infolist():
            if info.is_dir():
                continue
            name = f"{archive_name}:{printable(info.filename)}"
            reason = unsafe_member_reason(info.filename)
            if reason is None and stat.S_ISLNK(info.external_attr >> 16):
                reason = "symbolic link inside the archive"
            if reason is None and info.flag_bits & 0x1:
                reason = "encrypted archive member"
            if reason is None and info.file_size > max_bytes:
                reason = _too_large(info.file_size, max_bytes)
            if reason is not None:
                yield Rejected(name, reason)
                continue
            try:
                with archive.open(info) as member:
                    data = _read_limited(member, max_bytes)
            except NotImplementedError as error:
                yield Rejected(name, f"archive member stored in an unsupported way ({error})")
                continue
            except DAMAGED_DATA_ERRORS as error:
                yield Rejected(name, f"damaged archive member ({error})")
                continue
            yield (
                Candidate(name, data)
                if data is not None
                else Rejected(name, _too_large(max_bytes + 1, max_bytes))
            )


def _tar_entries(archive: tarfile.TarFile, archive_name: str, max_bytes: int) -> Iterator[ImportEntry]:
    """Regular files of a tar archive; links, devices and unsafe members are refused."""
    try:
        for member in archive:
            if member.isdir():
                continue
            name = f"{archive_name}:{printable(member.name)}"
            reason = unsafe_member_reason(member.name)
            if reason is None and (member.issym() or member.islnk()):
                reason = "link inside the archive"
            if reason is None and not member.isreg():
                reason = "not a regular file"
            if reason is None and member.size > max_bytes:
                reason = _too_large(member.size, max_bytes)
            if reason is not None:
                yield Rejected(name, reason)
                continue
            extracted = archive.extractfile(member)
            data = _read_limited(extracted, max_bytes) if extracted is not None else None
            yield Candidate(name, data) if data is not None else Rejected(name, "unreadable archive member")
    except DAMAGED_DATA_ERRORS as error:
        yield Rejected(archive_name, f"archive is damaged after this point ({error})")


def path_entries(path: Path, max_bytes: int) -> Iterator[ImportEntry]:
    """A folder, an archive or a single image file given on the command line."""
    if path.is_dir():
        yield from folder_entries(path, max_bytes)
    elif is_archive_name(path.name) or zipfile.is_zipfile(path) or tarfile.is_tarfile(path):
        with path.open("rb") as stream:
            yield from archive_entries(stream, printable(path.name), max_bytes)
    else:
        yield _folder_entry(path.parent.resolve(), path.resolve(), printable(path.name), max_bytes)
