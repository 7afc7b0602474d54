"""Where imported images come from: a folder (recursive), a zip or tar archive, or uploaded files.

Each source yields entries in a stable order: a Candidate (a name and at most max_bytes of data), a
Rejected (a name and the reason), or a Pending file (found, not read yet: the import reads it in parallel
and skips it, unread, when its uri was imported before). Nothing is extracted to disk; unsafe entries are
reported, not read.
Archives are read one member at a time, and within ReadLimits: a zip whose directory lists too many
members is refused before the directory is loaded, a member that expands more than the compression ratio
allows is refused unread, and an archive stops once its members expand past min(max_archive_bytes,
ratio × the archive's own size).
"""

import io
import lzma
import os
import re
import stat
import struct
import tarfile
import zipfile
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import partial
from pathlib import Path, PurePosixPath
from typing import IO, BinaryIO

from app.settings import Settings

ARCHIVE_SUFFIXES = (".zip", ".tar", ".tar.gz", ".tgz", ".tar.bz2", ".tar.xz")
ZIP_DIRECTORY_ERRORS = (zipfile.BadZipFile, OSError, EOFError, UnicodeDecodeError)
"""What reading a damaged zip directory raises (names flagged UTF-8 that are not: UnicodeDecodeError)."""
DAMAGED_DATA_ERRORS = (OSError, EOFError, zlib.error, lzma.LZMAError, zipfile.BadZipFile, tarfile.TarError)
"""What reading damaged compressed data raises (gzip and bz2 raise OSError; zlib and xz their own)."""


@dataclass(frozen=True)
class Provenance:
    """Where a file came from: the uri it was read at, and from a manifest its page, license and author."""

    uri: str
    source_url: str | None = None
    license: str | None = None
    author: str | None = None


@dataclass(frozen=True)
class Candidate:
    """A file to check and store; without a provenance its name is its uri."""

    name: str
    data: bytes
    provenance: Provenance | None = None


@dataclass(frozen=True)
class Rejected:
    """A file that was not imported, and why."""

    name: str
    reason: str


ImportEntry = Candidate | Rejected


@dataclass(frozen=True)
class Pending:
    """A file found but not read yet: read() gives its Candidate or Rejected; size is its size in bytes
    when the listing tells it."""

    name: str
    provenance: Provenance
    read: Callable[[], ImportEntry]
    size: int | None = None


ImportItem = ImportEntry | Pending


@dataclass(frozen=True)
class ReadLimits:
    """How much an import reads: bytes per file, and per archive its members, the bytes they expand to
    (uncompressed) and their ratio to the archive's compressed size."""

    max_file_bytes: int
    max_archive_bytes: int
    max_archive_members: int
    max_compression_ratio: int

    @classmethod
    def from_settings(cls, settings: Settings) -> "ReadLimits":
        """The limits configured by MAD_MAX_IMAGE_BYTES and MAD_MAX_ARCHIVE_*/MAD_MAX_COMPRESSION_RATIO."""
        return cls(
            max_file_bytes=settings.max_image_bytes,
            max_archive_bytes=settings.max_archive_bytes,
            max_archive_members=settings.max_archive_members,
            max_compression_ratio=settings.max_compression_ratio,
        )

    def archive_allowance(self, compressed_bytes: int) -> int:
        """Bytes an archive of this size may expand to: min(max_archive_bytes, ratio × compressed_bytes)."""
        return min(self.max_archive_bytes, self.max_compression_ratio * compressed_bytes)


CONTROL_CHARACTERS = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def printable(name: str) -> str:
    """A file name safe to show and store: undecodable bytes and control characters become U+FFFD."""
    text = name.encode("utf-8", "surrogateescape").decode("utf-8", "replace")
    return CONTROL_CHARACTERS.sub("\ufffd", text)


def too_large_reason(size: int, max_bytes: int) -> str:
    """The rejection reason for a file over the size limit."""
    return f"file of {size:,} bytes is over the {max_bytes:,}-byte limit"


def _read_limited(stream: IO[bytes], max_bytes: int) -> bytes | None:
    """At most max_bytes from a stream; None when there is more."""
    data = stream.read(max_bytes + 1)
    return None if len(data) > max_bytes else data


def folder_entries(root: Path, max_bytes: int) -> Iterator[Pending]:
    """Every non-hidden file below root, sorted, to be read; symbolic links leaving the folder are refused."""
    root = root.resolve()
    for directory, subdirectories, files in os.walk(root):
        subdirectories[:] = sorted(d for d in subdirectories if not d.startswith("."))
        for file_name in sorted(f for f in files if not f.startswith(".")):
            path = Path(directory, file_name)
            name = printable(str(path.relative_to(root)))
            read = partial(read_file_entry, root, path, name, max_bytes)
            yield Pending(name, Provenance(printable(str(path))), read, _size(path))


def _size(path: Path) -> int | None:
    """A file's size, or None when it cannot be told (reading it will say why)."""
    try:
        return path.stat().st_size
    except OSError:
        return None


def read_entry(item: ImportItem) -> ImportEntry:
    """A Pending file read (a Candidate keeps the Pending's provenance); other entries as they are."""
    if not isinstance(item, Pending):
        return item
    entry = item.read()
    return Candidate(entry.name, entry.data, item.provenance) if isinstance(entry, Candidate) else entry


def read_file_entry(root: Path, path: Path, name: str, max_bytes: int) -> ImportEntry:
    """Read one file of a folder, refusing links out of the folder and non-regular files."""
    if path.is_symlink() and not path.resolve().is_relative_to(root):
        return Rejected(name, "symbolic link pointing outside the imported folder")
    try:
        info = path.stat()
        if not stat.S_ISREG(info.st_mode):
            return Rejected(name, "not a regular file")
        if info.st_size > max_bytes:
            return Rejected(name, too_large_reason(info.st_size, max_bytes))
        with path.open("rb") as stream:
            data = _read_limited(stream, max_bytes)
    except OSError as error:
        return Rejected(name, f"cannot be read ({error.strerror or error})")
    return (
        Candidate(name, data)
        if data is not None
        else Rejected(name, too_large_reason(max_bytes + 1, max_bytes))
    )


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


def archive_entries(stream: BinaryIO, archive_name: str, limits: ReadLimits) -> Iterator[ImportEntry]:
    """The members of a zip or tar archive; a damaged archive yields one Rejected entry."""
    compressed_bytes = stream.seek(0, io.SEEK_END)
    stream.seek(0)
    if zipfile.is_zipfile(stream):
        yield from _zip_entries(stream, archive_name, limits, compressed_bytes)
        return
    stream.seek(0)
    try:
        archive = tarfile.open(fileobj=stream, mode="r|*")  # a stream: read once, front to back
    except DAMAGED_DATA_ERRORS:
        yield Rejected(archive_name, "not a readable zip or tar archive")
        return
    with archive:
        yield from _tar_entries(archive, archive_name, limits, compressed_bytes)


ZIP_END = struct.Struct("<4s4H2LH")
"""A zip's end-of-central-directory record, signed PK\\5\\6 (APPNOTE.TXT 4.3.16)."""
ZIP64_LOCATOR = struct.Struct("<4sLQL")
"""The zip64 end-of-central-directory locator, signed PK\\6\\7 (APPNOTE.TXT 4.3.15)."""
ZIP64_END = struct.Struct("<4sQ2H2L4Q")
"""The zip64 end-of-central-directory record, signed PK\\6\\6 (APPNOTE.TXT 4.3.14)."""


def zip_member_count(stream: BinaryIO) -> int | None:
    """How many members a zip's end-of-central-directory record (zip64's if present) declares, read
    without loading the directory (whose entries take ~500 bytes of memory each); None if there is none."""
    size = stream.seek(0, io.SEEK_END)
    tail_start = max(0, size - ZIP_END.size - 0xFFFF)  # the record, then at most a 64 KiB comment
    stream.seek(tail_start)
    tail = stream.read()
    stream.seek(0)
    at = tail.rfind(b"PK\x05\x06")
    if at < 0 or len(tail) - at < ZIP_END.size:
        return None
    members = ZIP_END.unpack(tail[at : at + ZIP_END.size])[4]
    locator = tail[max(0, at - ZIP64_LOCATOR.size) : at]
    if members != 0xFFFF or not locator.startswith(b"PK\x06\x07"):
        return members
    stream.seek(ZIP64_LOCATOR.unpack(locator)[2])
    record = stream.read(ZIP64_END.size)
    stream.seek(0)
    if len(record) < ZIP64_END.size or not record.startswith(b"PK\x06\x06"):
        return None
    return ZIP64_END.unpack(record)[7]


def count_archive_members(stream: BinaryIO) -> int | None:
    """Number of entries in a zip archive (from its end record); None for tar (it would need a pass)."""
    if not zipfile.is_zipfile(stream):
        stream.seek(0)
        return None
    return zip_member_count(stream)


def _expansion_reason(allowance: int, limits: ReadLimits) -> str:
    """Why an archive stops being read when its members expand past its allowance."""
    if allowance == limits.max_archive_bytes:
        return f"archive expands to more than {limits.max_archive_bytes:,} bytes (MAD_MAX_ARCHIVE_BYTES)"
    return (
        f"archive expands to more than {limits.max_compression_ratio} times its own size "
        "(MAD_MAX_COMPRESSION_RATIO; a zip bomb?); the rest is not read"
    )


def _zip_member_reason(info: zipfile.ZipInfo, limits: ReadLimits) -> str | None:
    """Why a zip member is not read: unsafe path, link, encrypted, too large or too compressed."""
    reason = unsafe_member_reason(info.filename)
    if reason is None and stat.S_ISLNK(info.external_attr >> 16):
        reason = "symbolic link inside the archive"
    if reason is None and info.flag_bits & 0x1:
        reason = "encrypted archive member"
    if reason is None and info.file_size > limits.max_file_bytes:
        reason = too_large_reason(info.file_size, limits.max_file_bytes)
    if reason is None and info.file_size > limits.max_compression_ratio * max(info.compress_size, 1):
        ratio = info.file_size / max(info.compress_size, 1)
        reason = (
            f"expands {ratio:,.0f} times (over the {limits.max_compression_ratio}:1 compression-ratio limit, "
            "MAD_MAX_COMPRESSION_RATIO; a zip bomb?)"
        )
    return reason


def _zip_entries(
    stream: BinaryIO, archive_name: str, limits: ReadLimits, compressed_bytes: int
) -> Iterator[ImportEntry]:
    """Regular files of a zip archive; links, encrypted, unsafe, too large and too compressed members are
    refused unread, and reading stops when the members read so far expand past the archive's allowance."""
    members = zip_member_count(stream)
    if members is not None and members > limits.max_archive_members:
        yield Rejected(
            archive_name,
            f"zip archive of {members:,} entries is over the {limits.max_archive_members:,}-entry limit "
            "(MAD_MAX_ARCHIVE_MEMBERS); import a folder or a tar archive instead",
        )
        return
    try:
        archive = zipfile.ZipFile(stream)
    except UnicodeDecodeError:
        yield Rejected(archive_name, "zip archive whose member names are marked UTF-8 but are not")
        return
    except ZIP_DIRECTORY_ERRORS:
        yield Rejected(archive_name, "not a readable zip archive")
        return
    allowance, expanded = limits.archive_allowance(compressed_bytes), 0
    with archive:
        for info in archive.infolist():
            if info.is_dir():
                continue
            name = f"{archive_name}:{printable(info.filename)}"
            reason = _zip_member_reason(info, limits)
            if reason is not None:
                yield Rejected(name, reason)
                continue
            expanded += info.file_size  # zipfile reads no more than the declared size
            if expanded > allowance:
                yield Rejected(archive_name, _expansion_reason(allowance, limits))
                return
            try:
                with archive.open(info) as member:
                    data = _read_limited(member, limits.max_file_bytes)
            except NotImplementedError as error:
                yield Rejected(name, f"archive member stored in an unsupported way ({error})")
                continue
            except DAMAGED_DATA_ERRORS as error:
                yield Rejected(name, f"damaged archive member ({error})")
                continue
            yield (
                Candidate(name, data)
                if data is not None
                else Rejected(name, too_large_reason(limits.max_file_bytes + 1, limits.max_file_bytes))
            )


def _tar_member_reason(member: tarfile.TarInfo, max_bytes: int) -> str | None:
    """Why a tar member is not read: unsafe path, link, not a regular file, or too large."""
    reason = unsafe_member_reason(member.name)
    if reason is None and (member.issym() or member.islnk()):
        reason = "link inside the archive"
    if reason is None and not member.isreg():
        reason = "not a regular file"
    if reason is None and member.size > max_bytes:
        reason = too_large_reason(member.size, max_bytes)
    return reason


def _tar_entries(
    archive: tarfile.TarFile, archive_name: str, limits: ReadLimits, compressed_bytes: int
) -> Iterator[ImportEntry]:
    """Regular files of a tar archive read as a stream; links, devices and unsafe members are refused, and
    reading stops before a member whose end lies past the archive's allowance (skipping a member of a
    compressed tar decompresses it too)."""
    allowance = limits.archive_allowance(compressed_bytes)
    try:
        while (member := archive.next()) is not None:
            # TarFile keeps every header it read in .members (undocumented, so untyped); a stream needs none.
            archive.members.clear()  # type: ignore[attr-defined]
            if member.isdir():
                continue
            expanded = member.offset_data + member.size
            if expanded > allowance:
                yield Rejected(archive_name, _expansion_reason(allowance, limits))
                return
            name = f"{archive_name}:{printable(member.name)}"
            reason = _tar_member_reason(member, limits.max_file_bytes)
            if reason is not None:
                yield Rejected(name, reason)
                continue
            extracted = archive.extractfile(member)
            data = _read_limited(extracted, limits.max_file_bytes) if extracted is not None else None
            yield Candidate(name, data) if data is not None else Rejected(name, "unreadable archive member")
    except DAMAGED_DATA_ERRORS as error:
        yield Rejected(archive_name, f"archive is damaged after this point ({error})")


def path_entries(path: Path, limits: ReadLimits) -> Iterator[ImportItem]:
    """A folder, an archive or a single image file given on the command line."""
    if path.is_dir():
        yield from folder_entries(path, limits.max_file_bytes)
    elif is_archive_name(path.name) or zipfile.is_zipfile(path) or tarfile.is_tarfile(path):
        with path.open("rb") as stream:
            yield from archive_entries(stream, printable(path.name), limits)
    else:
        name, resolved = printable(path.name), path.resolve()
        read = partial(read_file_entry, resolved.parent, resolved, name, limits.max_file_bytes)
        yield Pending(name, Provenance(printable(str(resolved))), read, _size(resolved))
