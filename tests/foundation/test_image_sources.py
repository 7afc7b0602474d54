"""Import sources: folders, zip and tar archives yield good files and refuse unsafe ones by name."""

import io
import os
import stat
import tarfile
import zipfile

from app.images.sources import (
    Candidate,
    ReadLimits,
    Rejected,
    archive_entries,
    folder_entries,
    path_entries,
    read_entry,
    zip_member_count,
)
from tests.support.images import image_bytes

MAX_BYTES = 1_000_000
LIMITS = ReadLimits(
    max_file_bytes=MAX_BYTES, max_archive_bytes=10**9, max_archive_members=1000, max_compression_ratio=100
)


def _by_name(entries):
    return {entry.name: entry for entry in _read(entries)}


def _read(entries):
    """The entries with files found but not yet read (Pending) read."""
    return [read_entry(entry) for entry in entries]


def test_folder_is_walked_recursively_in_sorted_order_skipping_hidden_files(tmp_path):
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "2.png").write_bytes(image_bytes(2))
    (tmp_path / "1.png").write_bytes(image_bytes(1))
    (tmp_path / ".DS_Store").write_bytes(b"junk")
    entries = _read(folder_entries(tmp_path, MAX_BYTES))
    assert [entry.name for entry in entries] == ["1.png", "b/2.png"]
    assert all(isinstance(entry, Candidate) for entry in entries)


def test_symlink_leaving_the_folder_is_refused_but_one_inside_is_read(tmp_path):
    outside = tmp_path / "outside.png"
    outside.write_bytes(image_bytes(1))
    folder = tmp_path / "corpus"
    folder.mkdir()
    (folder / "real.png").write_bytes(image_bytes(2))
    os.symlink(outside, folder / "escape.png")
    os.symlink(folder / "real.png", folder / "alias.png")
    entries = _by_name(folder_entries(folder, MAX_BYTES))
    assert isinstance(entries["escape.png"], Rejected)
    assert "outside" in entries["escape.png"].reason
    assert isinstance(entries["alias.png"], Candidate)
    assert entries["alias.png"].data == entries["real.png"].data


def test_too_large_file_is_refused_without_reading_it(tmp_path):
    (tmp_path / "big.png").write_bytes(image_bytes(1, width=200, height=200))
    (entry,) = _read(folder_entries(tmp_path, max_bytes=1000))
    assert isinstance(entry, Rejected) and "limit" in entry.reason


def test_non_utf8_file_name_is_reported_printably(tmp_path):
    name = os.fsencode(tmp_path) + b"/caf\xe9.png"
    with open(name, "wb") as handle:
        handle.write(image_bytes(1))
    (entry,) = _read(folder_entries(tmp_path, MAX_BYTES))
    assert isinstance(entry, Candidate)
    assert entry.name == "caf\ufffd.png"
    entry.name.encode("utf-8")


def _zip_with(members: dict[str, bytes], symlink: str | None = None) -> io.BytesIO:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for name, data in members.items():
            archive.writestr(name, data)
        if symlink:
            info = zipfile.ZipInfo(symlink)
            info.external_attr = (stat.S_IFLNK | 0o777) << 16
            archive.writestr(info, "/etc/passwd")
    buffer.seek(0)
    return buffer


def test_zip_members_with_dotdot_absolute_paths_or_links_are_refused():
    archive = _zip_with(
        {"ok/a.png": image_bytes(1), "../evil.png": image_bytes(2), "/abs.png": image_bytes(3)},
        symlink="link.png",
    )
    entries = _by_name(archive_entries(archive, "upload.zip", LIMITS))
    assert isinstance(entries["upload.zip:ok/a.png"], Candidate)
    assert "'..'" in entries["upload.zip:../evil.png"].reason
    assert "absolute" in entries["upload.zip:/abs.png"].reason
    assert "link" in entries["upload.zip:link.png"].reason


def test_tar_members_with_dotdot_links_and_devices_are_refused(tmp_path):
    path = tmp_path / "corpus.tar.gz"
    with tarfile.open(path, "w:gz") as archive:
        for name, data in {"good.png": image_bytes(1), "../up.png": image_bytes(2)}.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
        link = tarfile.TarInfo("link.png")
        link.type, link.linkname = tarfile.SYMTYPE, "/etc/passwd"
        archive.addfile(link)
        fifo = tarfile.TarInfo("pipe.png")
        fifo.type = tarfile.FIFOTYPE
        archive.addfile(fifo)
    entries = _by_name(path_entries(path, LIMITS))
    assert isinstance(entries["corpus.tar.gz:good.png"], Candidate)
    assert "'..'" in entries["corpus.tar.gz:../up.png"].reason
    assert "link" in entries["corpus.tar.gz:link.png"].reason
    assert "regular" in entries["corpus.tar.gz:pipe.png"].reason


def test_damaged_archive_is_reported_not_raised(tmp_path):
    path = tmp_path / "broken.zip"
    path.write_bytes(b"PK\x03\x04 this is not really a zip")
    entries = _read(path_entries(path, LIMITS))
    assert len(entries) == 1 and isinstance(entries[0], Rejected)


def _deflated_zip(members: dict[str, bytes]) -> io.BytesIO:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, data in members.items():
            archive.writestr(name, data)
    buffer.seek(0)
    return buffer


def test_a_zip_member_expanding_past_the_ratio_is_refused_unread_and_the_rest_is_read():
    archive = _deflated_zip({"bomb.jpg": bytes(500_000), "ok.png": image_bytes(1)})
    entries = _by_name(archive_entries(archive, "u.zip", LIMITS))
    assert "compression-ratio limit" in entries["u.zip:bomb.jpg"].reason
    assert isinstance(entries["u.zip:ok.png"], Candidate)


def test_an_archive_stops_when_its_members_expand_past_ratio_times_its_size(tmp_path):
    path = tmp_path / "zeros.tar.gz"
    with tarfile.open(path, "w:gz") as archive:
        for index in range(4):  # 4 × 900 kB of zeros gzip to ~4 kB: far past 100 × the archive's size
            info = tarfile.TarInfo(f"{index}.png")
            info.size = 900_000
            archive.addfile(info, io.BytesIO(bytes(info.size)))
    entries = _read(path_entries(path, LIMITS))
    assert [entry.name for entry in entries] == ["zeros.tar.gz"]
    assert "100 times its own size" in entries[0].reason


def test_an_archive_stops_past_max_archive_bytes():
    members = {f"{index}.png": image_bytes(index, width=64, height=64) for index in range(5)}
    limits = ReadLimits(
        MAX_BYTES, max_archive_bytes=30_000, max_archive_members=10, max_compression_ratio=100
    )
    entries = list(archive_entries(_zip_with(members), "u.zip", limits))
    assert all(isinstance(entry, Candidate) for entry in entries[:-1]) and 0 < len(entries) - 1 < 5
    assert entries[-1] == Rejected(
        "u.zip", "archive expands to more than 30,000 bytes (MAD_MAX_ARCHIVE_BYTES)"
    )


def test_a_zip_listing_too_many_entries_is_refused_before_its_directory_is_read():
    members = {f"{index}.png": image_bytes(index) for index in range(11)}
    limits = ReadLimits(MAX_BYTES, max_archive_bytes=10**9, max_archive_members=10, max_compression_ratio=100)
    (entry,) = archive_entries(_zip_with(members), "many.zip", limits)
    assert entry.name == "many.zip" and "11 entries is over the 10-entry limit" in entry.reason


def test_zip_member_count_reads_zip64_end_records():
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for index in range(70_000):  # over 65,535: the count is in the zip64 record
            archive.writestr(f"{index}", b"")
    assert zip_member_count(buffer) == 70_000
    assert zip_member_count(io.BytesIO(b"PK\x03\x04 not a zip")) is None
