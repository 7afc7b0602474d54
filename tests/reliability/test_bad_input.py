"""The bad-input catalogue: each case gets a clear error at the public interface and nothing is partly stored.

Where each case is tested ("here" is this file; other paths are under tests/):

- corrupt images (random bytes, text, GIF), truncated images, huge images (bytes over the limit, as files
  and archive members), decompression bombs (a 20000² 1-bit PNG, and 1.2× the pixel limit):
  API here (test_a_bad_upload_is_refused_by_name_and_only_the_good_file_beside_it_is_stored, one case
  each), CLI here (test_a_folder_import_reports_bad_files_by_name_and_stores_the_good_ones); units in
  foundation/test_image_checks.py, foundation/test_image_sources.py; CLI with 1000 files in
  foundation/test_cli.py.
- archive members with ../, absolute paths (/x, C:/x), symbolic and hard links, devices; encrypted
  members: API here (zip and tar); units in foundation/test_image_sources.py. Folder symlinks leaving the
  folder: CLI here and in foundation/test_cli.py.
- damaged archives (bad deflate data, unknown compression method, corrupt xz, a truncated zip, zip names
  marked UTF-8 that are not): API here, CLI here.
- non-UTF-8 file names (tar and zip members, a multipart file name, a file and a folder on disk): API
  here, CLI here; folder unit in foundation/test_image_sources.py.
- duplicate uploads (twice in one upload, uploaded again): API here; CLI in foundation/test_cli.py.
- invalid taxonomy files (cycle, duplicate class/child/name, unknown label, missing root, second root,
  bad YAML, not a mapping, empty, unexpected key, null label, YAML aliases, deep nesting): API and CLI
  here (test_invalid_taxonomies_are_refused_through_the_api / _cli); core in core/test_taxonomy.py.
- prediction files with wrong shapes, NaN probabilities, unknown hashes, labels beyond the class count,
  pickles, no rows, neither Parquet nor NPZ: API here (test_bad_prediction_files_are_refused_and_
  nothing_is_stored) and jobs/test_classifier_registration.py; every column rule in
  classifiers/test_prediction_upload.py.
- prediction shards a worker uploads (empty, not an npz, wrong dtype, rows or shape, NaN or > 1
  probabilities, labels beyond the class count, negative entropy): API here.
- weights for the wrong architecture or class count, corrupt or truncated weights, unknown
  architectures: API in jobs/test_classifier_registration.py::test_bad_weights_are_refused_with_a_clear_
  error_and_nothing_stored; loader in classifiers/test_timm_source.py.
- numbers beyond 64 bits (or a 32-bit id column on Postgres) and text with NUL: API here; test_fuzz.py
  finds any other place.
"""

import io
import json
import os
import re
import stat
import tarfile
import zipfile

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from PIL import Image as PILImage
from sqlalchemy import func, select
from typer.testing import CliRunner

from app.classifiers.prediction_store import PredictionStore
from app.cli.main import app as cli
from app.competitions.models import Competition
from app.db.engine import create_db_engine, create_sessionmaker
from app.images.models import CompetitionImage, Image
from app.jobs.enums import JobStatus
from app.jobs.models import Job
from app.settings import Settings
from tests.conftest import settings_for
from tests.jobs.test_classifier_registration import add_images, assert_nothing_stored, register
from tests.support.images import image_bytes
from tests.support.jobs import claimed_shard

MAX_BYTES = 200_000
MAX_PIXELS = 1_000_000


@pytest.fixture
def settings(tmp_path, database_url) -> Settings:
    """Test settings with small image limits, so huge files and bombs are cheap to make."""
    return settings_for(
        tmp_path, database_url, max_image_bytes=MAX_BYTES, max_image_pixels=MAX_PIXELS, thumbnail_size=64
    )


def bomb_png() -> bytes:
    """A 1-bit 20000 × 20000 PNG: a few kilobytes that would decode to 400 megapixels."""
    buffer = io.BytesIO()
    PILImage.new("1", (20_000, 20_000)).save(buffer, format="PNG")
    return buffer.getvalue()


def plain_png(width: int, height: int) -> bytes:
    """A one-colour PNG (small in bytes, however many pixels)."""
    buffer = io.BytesIO()
    PILImage.new("RGB", (width, height), (90, 140, 60)).save(buffer, format="PNG")
    return buffer.getvalue()


def huge_png() -> bytes:
    """A PNG of random pixels over MAX_BYTES."""
    data = image_bytes(7, "PNG", width=400, height=400)
    assert len(data) > MAX_BYTES
    return data


def tar_archive(members: list[tarfile.TarInfo | tuple[str, bytes]], mode: str = "w") -> bytes:
    """A tar archive of (name, data) files and prepared special members."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode=mode, format=tarfile.GNU_FORMAT) as archive:
        for member in members:
            if isinstance(member, tarfile.TarInfo):
                archive.addfile(member)
                continue
            name, data = member
            info = tarfile.TarInfo(name)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def special(name: str, kind: bytes, target: str = "") -> tarfile.TarInfo:
    """A tar member that is not a regular file."""
    info = tarfile.TarInfo(name)
    info.type, info.linkname = kind, target
    return info


def zip_archive(members: dict[str, bytes], compression: int = zipfile.ZIP_STORED) -> bytes:
    """A zip archive; a member named 'link:NAME' is a symbolic link."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression=compression) as archive:
        for name, data in members.items():
            info = zipfile.ZipInfo(name.removeprefix("link:"))
            info.compress_type = compression
            if name.startswith("link:"):
                info.external_attr = (stat.S_IFLNK | 0o777) << 16
            archive.writestr(info, data)
    return buffer.getvalue()


def with_raw_name(archive: bytes, placeholder: bytes, raw: bytes, utf8_flag: bool) -> bytes:
    """The zip with a member name's bytes replaced (same length), marked UTF-8 or not."""
    assert len(placeholder) == len(raw)
    data = bytearray(archive.replace(placeholder, raw))
    for signature, flag_offset in ((b"PK\x03\x04", 6), (b"PK\x01\x02", 8)):
        at = data.find(signature)
        if utf8_flag:
            data[at + flag_offset + 1] |= 0x08
        else:
            data[at + flag_offset + 1] &= ~0x08 & 0xFF
    return bytes(data)


def encrypted_zip() -> bytes:
    """A zip whose one member is marked encrypted."""
    data = bytearray(zip_archive({"secret.png": image_bytes(15)}))
    for signature, offset in ((b"PK\x03\x04", 6), (b"PK\x01\x02", 8)):
        data[data.find(signature) + offset] |= 0x01
    return bytes(data)


def damaged_deflate_zip() -> bytes:
    """A zip whose one deflated member has garbage in its compressed data."""
    data = bytearray(zip_archive({"damaged.png": image_bytes(21) * 4}, zipfile.ZIP_DEFLATED))
    for index in range(45, 70):
        data[index] ^= 0xFF
    return bytes(data)


def unknown_method_zip() -> bytes:
    """A zip whose member claims compression method 99 (AES, unsupported)."""
    data = bytearray(zip_archive({"method.png": image_bytes(22)}))
    for signature, offset in ((b"PK\x03\x04", 8), (b"PK\x01\x02", 10)):
        data[data.find(signature) + offset] = 99
    return bytes(data)


def damaged_xz_tar() -> bytes:
    """A .tar.xz with garbage in the middle of its compressed stream."""
    data = bytearray(tar_archive([(f"f{i}.png", os.urandom(20_000)) for i in range(3)], mode="w:xz"))
    for index in range(len(data) // 2, len(data) // 2 + 40):
        data[index] ^= 0x5A
    return bytes(data)


def bad_name_zip() -> bytes:
    """A zip whose member names are marked UTF-8 but are not."""
    return with_raw_name(
        zip_archive({"cafe.png": image_bytes(23)}), b"cafe.png", b"caf\xe9.png", utf8_flag=True
    )


def multipart(files: list[tuple[bytes, bytes]]) -> tuple[bytes, str]:
    """A multipart body of (raw filename bytes, data) parts named 'files', and its content type."""
    boundary = b"madboundary7e3c"
    body = b"".join(
        b"--" + boundary + b'\r\nContent-Disposition: form-data; name="files"; filename="' + name + b'"\r\n'
        b"Content-Type: application/octet-stream\r\n\r\n" + data + b"\r\n"
        for name, data in files
    )
    return body + b"--" + boundary + b"--\r\n", f"multipart/form-data; boundary={boundary.decode()}"


def stored_files(settings: Settings) -> list[str]:
    """Every file under the data dir's images and thumbnails, relative."""
    root = settings.data_dir
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()) if root.exists() else []


def bad_uploads() -> dict[str, tuple[bytes, bytes, str, str]]:
    """case: (file name as sent, bytes, the name it is reported under, what the reason says)."""
    whole = image_bytes(4, "PNG", width=64, height=64)
    return {
        "corrupt-image": (b"corrupt.jpg", os.urandom(3000), "corrupt.jpg", "not an image"),
        "text-file": (b"notes.txt", b"not an image at all", "notes.txt", "not an image"),
        "gif": (b"animation.gif", image_bytes(16, "GIF"), "animation.gif", "GIF images are not accepted"),
        "truncated-image": (b"truncated.png", whole[: len(whole) // 2], "truncated.png", "truncated"),
        "huge-file": (b"huge.png", huge_png(), "huge.png", "limit"),
        "decompression-bomb": (b"bomb.png", bomb_png(), "bomb.png", "decompression-bomb"),
        "over-pixel-limit": (b"pixels.png", plain_png(1200, 1000), "pixels.png", "decompression-bomb"),
        "tar-dotdot": (b"u.tar", tar_archive([("../up.png", image_bytes(10))]), "u.tar:../up.png", "'..'"),
        "tar-absolute": (
            b"u.tar",
            tar_archive([("/abs.png", image_bytes(11))]),
            "u.tar:/abs.png",
            "absolute",
        ),
        "tar-symlink": (
            b"u.tar",
            tar_archive([special("link.png", tarfile.SYMTYPE, "/etc/passwd")]),
            "u.tar:link.png",
            "link",
        ),
        "tar-hardlink": (
            b"u.tar",
            tar_archive([special("hard.png", tarfile.LNKTYPE, "elsewhere.png")]),
            "u.tar:hard.png",
            "link",
        ),
        "tar-fifo": (
            b"u.tar",
            tar_archive([special("pipe.png", tarfile.FIFOTYPE)]),
            "u.tar:pipe.png",
            "regular",
        ),
        "tar-huge-member": (b"u.tar", tar_archive([("big.png", huge_png())]), "u.tar:big.png", "limit"),
        "zip-dotdot": (b"u.zip", zip_archive({"../evil.png": image_bytes(12)}), "u.zip:../evil.png", "'..'"),
        "zip-absolute": (b"u.zip", zip_archive({"/abs.png": image_bytes(13)}), "u.zip:/abs.png", "absolute"),
        "zip-drive-letter": (
            b"u.zip",
            zip_archive({"C:/w.png": image_bytes(14)}),
            "u.zip:C:/w.png",
            "absolute",
        ),
        "zip-symlink": (
            b"u.zip",
            zip_archive({"link:l.png": b"/etc/passwd"}),
            "u.zip:l.png",
            "symbolic link",
        ),
        "zip-bomb-member": (
            b"u.zip",
            zip_archive({"bomb.png": bomb_png()}),
            "u.zip:bomb.png",
            "decompression",
        ),
        "zip-encrypted": (b"locked.zip", encrypted_zip(), "locked.zip:secret.png", "encrypted"),
        "zip-damaged-deflate": (
            b"damaged.zip",
            damaged_deflate_zip(),
            "damaged.zip:damaged.png",
            "damaged archive member",
        ),
        "zip-unknown-method": (b"method.zip", unknown_method_zip(), "method.zip:method.png", "unsupported"),
        "zip-names-not-utf8": (b"names.zip", bad_name_zip(), "names.zip", "marked UTF-8"),
        "zip-truncated": (
            b"truncated.zip",
            zip_archive({"x.png": image_bytes(18)})[:60],
            "truncated.zip",
            "not a readable",
        ),
        "xz-damaged": (b"broken.tar.xz", damaged_xz_tar(), "broken.tar.xz", "damaged"),
        "control-characters-in-name": (  # Latin-1 as sent, the escape character replaced
            b"\xff\xfeodd\x1b[31m.png",
            whole[:100],
            "\u00ff\u00feodd\ufffd[31m.png",
            "truncated",
        ),
    }


BAD_UPLOADS = list(bad_uploads())


def upload(client, competition, headers, files: list[tuple[bytes, bytes]]):
    """POST raw multipart files to the competition's images."""
    body, content_type = multipart(files)
    return client.post(
        f"/api/v1/competitions/{competition.id}/images",
        content=body,
        headers={**headers, "Content-Type": content_type},
    )


@pytest.mark.parametrize("case", BAD_UPLOADS)
def test_a_bad_upload_is_refused_by_name_and_only_the_good_file_beside_it_is_stored(
    client, db_session, competition, admin_headers, settings, case
):
    sent_name, data, reported_name, reason = bad_uploads()[case]
    response = upload(client, competition, admin_headers, [(b"good.png", image_bytes(1)), (sent_name, data)])
    assert response.status_code == 201, response.text
    report = response.json()
    assert [item["name"] for item in report["added"]] == ["good.png"] and report["duplicates"] == []
    rejected = {item["name"]: item["detail"] for item in report["rejected"]}
    assert reason in rejected.get(reported_name, ""), rejected
    assert all(name.startswith(reported_name.split(":")[0]) for name in rejected), rejected
    assert db_session.scalar(select(func.count()).select_from(Image)) == 1
    assert db_session.scalar(select(func.count()).select_from(CompetitionImage)) == 1
    files_kept = stored_files(settings)
    assert len(files_kept) == 2 and not [name for name in files_kept if ".tmp" in name], files_kept


def test_non_utf8_names_are_stored_readable_and_duplicates_once(
    client, db_session, competition, admin_headers, settings
):
    good, latin, mojibake = image_bytes(1), image_bytes(2), image_bytes(3)
    latin_tar = tar_archive([("caf\udce9.png", latin)])  # bytes 0xE9: not UTF-8
    cp437_zip = with_raw_name(  # bytes 0xE9 without the UTF-8 mark: read as cp437
        zip_archive({"cafX.png": mojibake}), b"cafX.png", b"caf\xe9.png", utf8_flag=False
    )
    files = [(b"good.png", good), (b"latin.tar", latin_tar), (b"cp437.zip", cp437_zip), (b"again.png", good)]
    response = upload(client, competition, admin_headers, files)
    assert response.status_code == 201, response.text
    report = response.json()
    assert [item["name"] for item in report["added"]] == [
        "good.png",
        "latin.tar:caf\ufffd.png",
        "cp437.zip:caf\u0398.png",
    ]
    assert report["duplicates"] == [{"name": "again.png", "detail": "same content as good.png"}]
    assert report["rejected"] == []
    listed = client.get(f"/api/v1/competitions/{competition.id}/images").json()
    assert [row["sha256"] for row in listed] == [item["detail"] for item in report["added"]]
    assert db_session.scalar(select(func.count()).select_from(Image)) == 3
    files_kept = stored_files(settings)
    assert len(files_kept) == 6  # 3 images, 3 thumbnails

    again = client.post(
        f"/api/v1/competitions/{competition.id}/images",
        files=[("files", ("good-again.png", good, "image/png"))],
        headers=admin_headers,
    ).json()
    assert again["added"] == [] and again["duplicates"] == [
        {"name": "good-again.png", "detail": "already in this competition"}
    ]
    assert db_session.scalar(select(func.count()).select_from(CompetitionImage)) == 3
    assert stored_files(settings) == files_kept


runner = CliRunner()


@pytest.fixture
def cli_env(tmp_path, fresh_database_url) -> dict[str, str]:
    """Environment of a CLI run on a database of its own, with the small image limits."""
    return {
        "MAD_DATABASE_URL": fresh_database_url,
        "MAD_DATA_DIR": str(tmp_path / "data"),
        "MAD_ENV": "development",
        "MAD_MAX_IMAGE_BYTES": str(MAX_BYTES),
        "MAD_MAX_IMAGE_PIXELS": str(MAX_PIXELS),
    }


def invoke(env: dict, *args: str):
    return runner.invoke(cli, list(args), env=env, catch_exceptions=False, terminal_width=300)


def query(url: str, statement) -> list:
    engine = create_db_engine(url)
    try:
        with create_sessionmaker(engine)() as session:
            return session.execute(statement).all()
    finally:
        engine.dispose()


def test_a_folder_import_reports_bad_files_by_name_and_stores_the_good_ones(cli_env, tmp_path):
    folder = tmp_path / "corpus"
    folder.mkdir()
    raw_folder = os.fsencode(folder)
    (folder / "good.png").write_bytes(image_bytes(1))
    with open(raw_folder + b"/caf\xe9.png", "wb") as handle:  # a Latin-1 file name
        handle.write(image_bytes(2))
    os.mkdir(raw_folder + b"/d\xe9j\xe0")  # a Latin-1 folder name
    with open(raw_folder + b"/d\xe9j\xe0/inner.png", "wb") as handle:
        handle.write(image_bytes(3))
    (folder / "zz-copy.png").write_bytes(image_bytes(1))  # walked after good.png
    (folder / "bomb.png").write_bytes(bomb_png())
    (folder / "huge.png").write_bytes(huge_png())
    (folder / "corrupt.jpg").write_bytes(os.urandom(2000))
    (folder / "truncated.png").write_bytes(image_bytes(4)[:300])
    outside = tmp_path / "outside.png"
    outside.write_bytes(image_bytes(5))
    os.symlink(outside, folder / "escape.png")

    assert invoke(cli_env, "competitions", "create", "folder-test").exit_code == 0
    report_path = tmp_path / "report.json"
    result = invoke(
        cli_env, "images", "import", str(folder), "-c", "folder-test", "--report", str(report_path)
    )
    assert result.exit_code == 0, result.output
    assert "3 added, 1 duplicates, 5 rejected" in result.output
    for name, reason in (
        ("bomb.png", "decompression-bomb"),
        ("huge.png", "limit"),
        ("corrupt.jpg", "not an image"),
        ("truncated.png", "truncated"),
        ("escape.png", "outside"),
    ):
        assert re.search(rf"{re.escape(name)}: .*{re.escape(reason)}", result.output), name
    report = json.loads(report_path.read_text(encoding="utf-8"))
    assert {item["name"] for item in report["added"]} == {
        "good.png",
        "caf\ufffd.png",
        "d\ufffdj\ufffd/inner.png",
    }
    url = cli_env["MAD_DATABASE_URL"]
    names = sorted(row[0] for row in query(url, select(Image.original_name)))
    assert names == ["caf\ufffd.png", "good.png", "inner.png"]
    assert len(list((tmp_path / "data" / "images").rglob("*.*"))) == 3

    (tmp_path / "names.zip").write_bytes(bad_name_zip())
    (tmp_path / "broken.tar.xz").write_bytes(damaged_xz_tar())
    for archive, reason in (("names.zip", "marked UTF-8"), ("broken.tar.xz", "damaged")):
        result = invoke(cli_env, "images", "import", str(tmp_path / archive), "-c", "folder-test")
        assert result.exit_code == 0 and reason in result.output and "0 added" in result.output, result.output
    assert query(url, select(func.count()).select_from(Image)) == [(3,)]


BAD_TAXONOMIES = {
    "cycle": ("root: a\nclasses: [c]\nchildren: {a: [b], b: [c], c: [b]}\n", "cycle: 'b' -> 'c' -> 'b'"),
    "duplicate-class": ("root: a\nclasses: [b, b]\nchildren: {a: [b]}\n", "duplicate class 'b'"),
    "duplicate-child": ("root: a\nclasses: [b]\nchildren: {a: [b, b]}\n", "duplicate child 'b' under 'a'"),
    "duplicate-name": ("root: a\nclasses: [b, c]\nnames: {b: X, c: X}\nchildren: {a: [b, c]}\n", "duplicate"),
    "unknown-class": ("root: a\nclasses: [b, z]\nchildren: {a: [b]}\n", "classes not in the tree under root"),
    "unknown-name": (
        "root: a\nclasses: [b]\nnames: {q: Q}\nchildren: {a: [b]}\n",
        "names: unknown label 'q'",
    ),
    "missing-root": ("classes: [b]\nchildren: {a: [b]}\n", "missing 'root'"),
    "second-root": ("root: a\nclasses: [b]\nchildren: {a: [b], x: [y]}\n", "not reachable from root 'a'"),
    "bad-yaml": ("root: [unclosed\nclasses: {", "not valid YAML"),
    "not-a-mapping": ("- a\n- b\n", "must hold a mapping"),
    "empty-classes": ("root: a\nclasses: []\nchildren: {a: [b]}\n", "'classes' is empty"),
    "unexpected-key": ("root: a\nclasses: [b]\nchildren: {a: [b]}\ncolour: red\n", "unexpected keys"),
    "null-label": ("root: a\nclasses: [~]\nchildren: {a: [~]}\n", "labels must be non-empty strings"),
    "aliases": (
        "root: r\nclasses: [x]\nchildren: {r: [x], p: [&a0 [x, x, x], &a1 [*a0, *a0, *a0]], q: [*a1]}\n",
        "aliases",
    ),
    "deep-nesting": ("root: r\nclasses: " + "[" * 5000 + "]" * 5000, "nested too deeply"),
}


@pytest.mark.parametrize("case", list(BAD_TAXONOMIES))
def test_invalid_taxonomies_are_refused_through_the_api(client, db_session, admin_headers, case):
    text, message = BAD_TAXONOMIES[case]
    response = client.post(
        "/api/v1/competitions",
        json={"name": "taxonomy-test", "taxonomy": "custom", "taxonomy_source": text},
        headers=admin_headers,
    )
    assert response.status_code == 422, response.text
    assert response.json()["detail"].startswith("taxonomy") and message in response.json()["detail"]
    assert db_session.scalar(select(func.count()).select_from(Competition)) == 0


@pytest.mark.parametrize(
    "case", ["cycle", "duplicate-class", "unknown-class", "missing-root", "bad-yaml", "aliases"]
)
def test_invalid_taxonomies_are_refused_through_the_cli(cli_env, tmp_path, case):
    text, message = BAD_TAXONOMIES[case]
    path = tmp_path / "taxonomy.yaml"
    path.write_text(text)
    result = invoke(cli_env, "competitions", "create", "taxonomy-test", "--taxonomy", str(path))
    assert result.exit_code == 1 and message.split(":")[0] in result.output, result.output
    assert query(cli_env["MAD_DATABASE_URL"], select(func.count()).select_from(Competition)) == [(0,)]


def npz(**arrays) -> bytes:
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    return buffer.getvalue()


def parquet(**columns) -> bytes:
    buffer = io.BytesIO()
    pq.write_table(pa.table(columns), buffer)
    return buffer.getvalue()


def bad_prediction_files(hashes: list[str]) -> dict[str, tuple[str, bytes, str]]:
    """case: (file name, bytes, what the error says)."""
    n = len(hashes)
    sha = np.array(hashes)
    top1, prob = np.arange(n) % 10, np.full(n, 0.9)
    nan_prob = prob.copy()
    nan_prob[1] = np.nan
    return {
        "top5-shape": (
            "p.npz",
            npz(sha256=sha, top1=top1, prob=prob, top5=np.zeros((n, 4), int), top5_prob=np.zeros((n, 4))),
            "top5 must have shape",
        ),
        "top1-shape": (
            "p.npz",
            npz(sha256=sha, top1=np.zeros((n, 2), int), prob=prob),
            "top1 must have shape",
        ),
        "nan-npz": ("p.npz", npz(sha256=sha, top1=top1, prob=nan_prob), "prob must be finite"),
        "nan-parquet": ("p.parquet", parquet(sha256=hashes, top1=top1, prob=nan_prob), "prob must be finite"),
        "unknown-hash": (
            "p.parquet",
            parquet(sha256=[*hashes[:-1], "f" * 64], top1=top1, prob=prob),
            "not images of this competition",
        ),
        "labels-beyond": ("p.npz", npz(sha256=sha, top1=top1 + 5000, prob=prob), "top1 has labels outside"),
        "hash-numbers": (
            "p.npz",
            npz(sha256=np.arange(n), top1=top1, prob=prob),
            "sha256 must hold hex strings",
        ),
        "pickled": ("p.npz", npz(sha256=sha.astype(object), top1=top1, prob=prob), "unreadable NPZ"),
        "no-rows": ("p.parquet", parquet(sha256=pa.array([], pa.string()), top1=[], prob=[]), "no rows"),
        "neither": ("p.bin", os.urandom(500), "neither Parquet nor NPZ"),
    }


def test_bad_prediction_files_are_refused_and_nothing_is_stored(
    client, db_session, competition, admin_headers, settings
):
    hashes = add_images(db_session, competition, 6)
    for case, (file_name, data, message) in bad_prediction_files(hashes).items():
        response = register(
            client,
            competition,
            admin_headers,
            name=f"elsewhere-{case}",
            source="predictions-file",
            files={"file": (file_name, data)},
        )
        assert response.status_code == 422, (case, response.text)
        assert message in response.json()["detail"], (case, response.json()["detail"])
        assert_nothing_stored(db_session, settings)
        assert not (settings.data_dir / "predictions").exists() or not any(
            (settings.data_dir / "predictions").rglob("*")
        ), case


def shard(n: int, **changes) -> bytes:
    """A valid predict-shard upload of n rows (label 3, probability 0.9), with some arrays changed."""
    arrays = {
        "top1": np.full(n, 3, np.int32),
        "prob": np.full(n, 0.9, np.float32),
        "entropy_bits": np.full(n, 1.5, np.float32),
        "top5": np.tile(np.array([3, 1, 2, 4, 5], np.int32), (n, 1)),
        "top5_prob": np.tile(np.array([0.9, 0.05, 0.03, 0.01, 0.01], np.float32), (n, 1)),
    }
    arrays.update(changes)
    return npz(**{name: value for name, value in arrays.items() if value is not None})


def test_bad_prediction_shards_from_a_worker_are_refused_and_the_job_completes_on_retry(
    client, db_session, competition, settings
):
    n = 5
    claim = claimed_shard(client, db_session, competition, n)
    nan = np.full(n, 0.9, np.float32)
    nan[2] = np.nan
    bad = {
        "empty": (b"", "not a valid shard"),
        "garbage": (os.urandom(300), "not a valid shard"),
        "not-a-zip": (b"PK\x03\x04" + os.urandom(100), "not a valid shard"),
        "missing-array": (npz(top1=np.full(n, 3, np.int32)), "not a valid shard"),
        "wrong-dtype": (shard(n, prob=np.full(n, 0.9)), "prob must be float32"),
        "wrong-rows": (shard(n + 1), f"covers {n} images"),
        "wrong-shape": (shard(n, top5=np.zeros((n, 4), np.int32)), "top5 must be int32"),
        "nan-probability": (shard(n, prob=nan), "prob must be finite probabilities"),
        "probability-above-one": (shard(n, prob=np.full(n, 1.5, np.float32)), "prob must be finite"),
        "label-beyond-classes": (
            shard(n, top1=np.full(n, 1000, np.int32)),
            "top1 has labels outside [-1, 1000)",
        ),
        "negative-entropy": (shard(n, entropy_bits=np.full(n, -1, np.float32)), "entropy_bits"),
    }
    url = claim.url
    store = PredictionStore(settings.blob_store)
    for case, (data, message) in bad.items():
        response = client.post(
            url,
            data=claim.lease,
            files={"predictions": ("shard.npz", data)},
            headers=claim.worker,
        )
        assert response.status_code == 422, (case, response.text)
        assert message in response.json()["detail"], (case, response.json()["detail"])
        assert db_session.get(Job, claim.job.id, populate_existing=True).status == JobStatus.running
        assert store.shard_ranges(claim.classifier.id) == [], case
    done = client.post(
        url,
        data=claim.lease,
        files={"predictions": ("s.npz", shard(n))},
        headers=claim.worker,
    )
    assert done.status_code == 200 and done.json()["status"] == "done"
    assert store.read(claim.classifier.id, n).top1.tolist() == [3] * n


def test_numbers_and_text_no_column_can_hold_are_refused(
    client, db_session, competition, admin_headers, annotator_headers, backend
):
    created = client.post(
        "/api/v1/competitions", json={"name": "nul-test", "description": "a\x00b"}, headers=admin_headers
    )
    assert created.status_code == 422 and "NUL" in created.json()["detail"]
    assert db_session.scalar(select(func.count()).select_from(Competition)) == 1  # the fixture's only
    for value in (2**63, -(2**63) - 1, 10**30):
        response = client.get(f"/api/v1/competitions/{value}")
        assert response.status_code == 422 and "out of range" in response.json()["detail"], value
    answers = client.post(
        f"/api/v1/competitions/{competition.id}/labelling/answers",
        json={"answers": [{"question_id": 2**64, "answer": True}]},
        headers=annotator_headers,
    )
    assert answers.status_code == 422
    beyond_32_bits = client.get(f"/api/v1/competitions/{2**31}")
    assert beyond_32_bits.status_code == (422 if backend == "postgres" else 404)  # ids are 32-bit on Postgres
    for competition_id, question_id in ((competition.id, 2**31), (2**31, 1)):  # the labelling hot path too
        answered = client.post(
            f"/api/v1/competitions/{competition_id}/labelling/answers",
            json={"answers": [{"question_id": question_id, "answer": True}]},
            headers=annotator_headers,
        )
        assert answered.status_code == (422 if backend == "postgres" else 404), answered.text


def test_a_competition_chooses_its_sampling_through_the_cli(cli_env):
    refused = invoke(cli_env, "competitions", "create", "bandit-test", "--sampling", "bandit")
    assert refused.exit_code == 1 and "sampling" in refused.output, refused.output
    assert query(cli_env["MAD_DATABASE_URL"], select(func.count()).select_from(Competition)) == [(0,)]
    assert invoke(cli_env, "competitions", "create", "active-test", "--sampling", "active").exit_code == 0
    assert query(cli_env["MAD_DATABASE_URL"], select(Competition.name, Competition.sampling)) == [
        ("active-test", "active")
    ]
    assert "active" in invoke(cli_env, "competitions", "list").output.split()
