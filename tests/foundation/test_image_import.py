"""Importing into a competition: stored once by hash, stable ordinals, bad files reported, served by hash."""

import io
import os
import tracemalloc
import zipfile
from concurrent.futures import ThreadPoolExecutor

import pytest
from PIL import Image as PILImage
from sqlalchemy import func, select

from app.images import service as image_service
from app.images.models import CompetitionImage, Image
from app.images.service import ImageLimits, import_entries
from app.images.sources import ReadLimits, folder_entries, path_entries
from app.images.store import ImageStore
from app.storage import LocalBlobStore
from app.storage.keys import image_key, thumbnail_key
from tests.support.images import image_bytes, rotated_jpeg_bytes, write_images

LIMITS = ImageLimits(max_bytes=2_000_000, max_pixels=10_000_000, thumbnail_size=64)


def _import(db_session, store, competition, entries):
    with ThreadPoolExecutor(2) as executor:
        return import_entries(
            db_session=db_session,
            store=store,
            competition=competition,
            entries=entries,
            limits=LIMITS,
            executor=executor,
        )


def test_folder_import_stores_good_images_once_with_contiguous_ordinals(db_session, competition, tmp_path):
    folder = tmp_path / "corpus"
    write_images(folder, 12)
    (folder / "copy.png").write_bytes((folder / "part0" / "image_00000.png").read_bytes())
    (folder / "broken.jpg").write_bytes(image_bytes(99, "JPEG")[:200])
    store = ImageStore(LocalBlobStore(tmp_path / "data"))

    report = _import(db_session, store, competition, folder_entries(folder, LIMITS.max_bytes))

    assert len(report.added) == 12
    assert report.duplicates == [
        ("part0/image_00000.png", "same content as copy.png")
    ] or report.duplicates == [("copy.png", "same content as part0/image_00000.png")]
    assert [name for name, _ in report.rejected] == ["broken.jpg"]
    ordinals = db_session.scalars(
        select(CompetitionImage.ordinal)
        .where(CompetitionImage.competition_id == competition.id)
        .order_by(CompetitionImage.ordinal)
    ).all()
    assert ordinals == list(range(12))
    for _name, sha256 in report.added:
        image = db_session.scalar(select(Image).where(Image.sha256 == sha256))
        assert store.blobs.exists(image_key(sha256, image.format))
        assert store.blobs.exists(thumbnail_key(sha256))
    leftovers = [p for p in (tmp_path / "data").rglob("*") if p.name.startswith(".tmp-")]
    assert leftovers == []


def test_reimport_reports_duplicates_and_keeps_ordinals(db_session, competition, tmp_path):
    folder = tmp_path / "corpus"
    write_images(folder, 5)
    store = ImageStore(LocalBlobStore(tmp_path / "data"))
    first = _import(db_session, store, competition, folder_entries(folder, LIMITS.max_bytes))
    (folder / "part0" / "image_00000.png").write_bytes(image_bytes(100, width=30))  # new content and size
    old_first = image_bytes(0, "PNG", width=24, height=16)  # image_00000's old content (write_images')
    (folder / "part1" / "image_00001.jpg").write_bytes(old_first)
    second = _import(db_session, store, competition, folder_entries(folder, LIMITS.max_bytes))

    assert len(first.added) == 5
    assert [name for name, _ in second.added] == ["part0/image_00000.png"]
    assert second.duplicates == [("part1/image_00001.jpg", "already in this competition")]
    assert len(second.skipped) == 3  # unchanged (same path, same size): not read again
    count = db_session.scalar(select(func.count()).select_from(CompetitionImage))
    ordinals = db_session.scalars(select(CompetitionImage.ordinal).order_by(CompetitionImage.ordinal)).all()
    assert count == 6 and ordinals == list(range(6))


def test_exif_rotated_jpeg_keeps_original_bytes_and_oriented_size(db_session, competition, tmp_path):
    folder = tmp_path / "corpus"
    folder.mkdir()
    data = rotated_jpeg_bytes(3, width=60, height=20)
    (folder / "rotated.jpg").write_bytes(data)
    store = ImageStore(LocalBlobStore(tmp_path / "data"))
    report = _import(db_session, store, competition, folder_entries(folder, LIMITS.max_bytes))
    ((_, sha256),) = report.added
    image = db_session.scalar(select(Image).where(Image.sha256 == sha256))
    assert (image.format, image.width, image.height, image.bytes) == ("jpeg", 20, 60, len(data))
    assert store.read(sha256, "jpeg") == data


def _zip(members: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for name, data in members.items():
            archive.writestr(name, data)
    return buffer.getvalue()


def test_upload_endpoint_imports_files_and_archives_for_admins(client, competition, admin_headers):
    files = [
        ("files", ("one.png", image_bytes(1), "image/png")),
        (
            "files",
            ("bundle.zip", _zip({"a/two.jpg": image_bytes(2, "JPEG"), "../x.png": image_bytes(3)}), "x"),
        ),
        ("files", ("notes.txt", b"not an image", "text/plain")),
        ("files", ("again.png", image_bytes(1), "image/png")),
    ]
    response = client.post(
        f"/api/v1/competitions/{competition.id}/images", files=files, headers=admin_headers
    )
    assert response.status_code == 201, response.text
    body = response.json()
    assert [item["name"] for item in body["added"]] == ["one.png", "bundle.zip:a/two.jpg"]
    assert [item["name"] for item in body["duplicates"]] == ["again.png"]
    assert {item["name"] for item in body["rejected"]} == {"bundle.zip:../x.png", "notes.txt"}

    listing = client.get(f"/api/v1/competitions/{competition.id}/images").json()
    assert [row["ordinal"] for row in listing] == [0, 1]
    sha256 = listing[0]["sha256"]
    image = client.get(f"/images/{sha256}")
    assert image.status_code == 200
    assert image.headers["content-type"] == "image/png"
    assert "immutable" in image.headers["cache-control"]
    assert image.content == image_bytes(1)
    thumbnail = client.get(f"/thumbnails/{sha256}")
    assert thumbnail.headers["content-type"] == "image/webp"
    assert PILImage.open(io.BytesIO(thumbnail.content)).format == "WEBP"


@pytest.mark.parametrize("headers_fixture", ["annotator_headers", None])
def test_upload_is_refused_to_annotators_and_anonymous_callers(request, client, competition, headers_fixture):
    headers = request.getfixturevalue(headers_fixture) if headers_fixture else {}
    files = [("files", ("one.png", image_bytes(1), "image/png"))]
    response = client.post(f"/api/v1/competitions/{competition.id}/images", files=files, headers=headers)
    assert response.status_code == (403 if headers else 401)
    assert client.get(f"/api/v1/competitions/{competition.id}/images").json() == []


def test_images_are_served_only_by_a_valid_known_hash(client):
    assert client.get("/images/../../etc/passwd").status_code == 404
    assert client.get("/images/not-a-hash").status_code == 422
    assert client.get("/thumbnails/" + "0" * 64).status_code == 404


def _traced_peak(action) -> tuple[int, object]:
    """The most memory Python held at once (tracemalloc) while running action, and its result."""
    tracemalloc.start()
    try:
        result = action()
        return tracemalloc.get_traced_memory()[1], result
    finally:
        tracemalloc.stop()


@pytest.fixture(scope="module")
def zip_bomb() -> bytes:
    """Issue 15's bomb: 40 members of 49 MB of zeros (9 MB zipped at level 1, which is faster to make)."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED, compresslevel=1) as archive:
        for index in range(40):
            archive.writestr(f"bomb/{index:02d}.jpg", bytes(49 * 1024 * 1024))
    return buffer.getvalue()


def test_a_zip_bomb_upload_is_refused_in_bounded_memory(client, competition, admin_headers, zip_bomb):
    files = [("files", ("bomb.zip", zip_bomb, "application/zip"))]  # held at once, its members took 2 GB

    peak, response = _traced_peak(
        lambda: client.post(
            f"/api/v1/competitions/{competition.id}/images", files=files, headers=admin_headers
        )
    )

    assert peak < 100 * 1024 * 1024, f"the upload held {peak / 2**20:.0f} MiB at once"
    assert response.status_code == 201, response.text
    rejected = response.json()["rejected"]
    assert len(rejected) == 40 and all("compression-ratio limit" in item["detail"] for item in rejected)


def test_an_import_holds_one_batch_of_files_at_a_time(db_session, competition, tmp_path, monkeypatch):
    monkeypatch.setattr(image_service, "IMPORT_BATCH_BYTES", 4 * 1024 * 1024)
    path = tmp_path / "noise.zip"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as archive:
        for index in range(16):  # 30 MB that does not compress, read and refused as not an image
            archive.writestr(f"noise/{index:02d}.jpg", os.urandom(1_900_000))
    limits = ReadLimits(
        LIMITS.max_bytes, max_archive_bytes=10**9, max_archive_members=100, max_compression_ratio=2
    )
    store = ImageStore(LocalBlobStore(tmp_path / "data"))

    peak, report = _traced_peak(lambda: _import(db_session, store, competition, path_entries(path, limits)))

    assert peak < 12 * 1024 * 1024, f"the import held {peak / 2**20:.0f} MiB at once"
    assert len(report.rejected) == 16 and all("not an image" in reason for _, reason in report.rejected)
