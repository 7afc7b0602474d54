"""Imports at scale through the CLI: a manifest (paths, s3:// keys, URLs) and an S3 prefix, provenance
kept per image, re-runs that skip what is done unread, and near-duplicates reported. Both databases."""

import csv
import functools
import io
import json
import threading
from concurrent.futures import ThreadPoolExecutor
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer

import numpy as np
import pytest
import s3fs
from PIL import Image as PILImage
from sqlalchemy import select
from typer.testing import CliRunner

from app.cli.main import app as cli
from app.images.models import Image
from app.images.service import ImageLimits, import_entries
from app.images.sources import Candidate, Provenance
from app.images.store import ImageStore
from app.storage import open_blob_store
from app.storage.keys import image_key
from tests.foundation.test_auth import _sign_in
from tests.foundation.test_cli import query
from tests.support.images import image_bytes

runner = CliRunner()


def smooth_jpeg(seed: int, width: int = 400, height: int = 300) -> bytes:
    """A photo-like JPEG: an 8 × 8 random colour field scaled up smoothly."""
    pixels = np.random.default_rng(seed).integers(0, 256, (8, 8, 3), dtype=np.uint8)
    picture = PILImage.fromarray(pixels).resize((width, height), PILImage.Resampling.BICUBIC)
    buffer = io.BytesIO()
    picture.save(buffer, format="JPEG", quality=90)
    return buffer.getvalue()


@pytest.fixture
def cli_env(tmp_path, fresh_database_url):
    """A database of its own and a competition in it."""
    env = {
        "MAD_DATABASE_URL": fresh_database_url,
        "MAD_DATA_DIR": str(tmp_path / "data"),
        "MAD_ENV": "development",
    }
    assert invoke(env, "competitions", "create", "corpus").exit_code == 0
    return env


def invoke(env, *args):
    return runner.invoke(cli, list(args), env=env, catch_exceptions=False)


@pytest.fixture
def web_folder(tmp_path):
    """A folder served over HTTP on 127.0.0.1: (folder, base URL)."""
    folder = tmp_path / "web"
    folder.mkdir()
    handler = functools.partial(SimpleHTTPRequestHandler, directory=str(folder))
    handler.log_message = lambda *args: None
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield folder, f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    thread.join()


def test_a_manifest_of_paths_s3_keys_and_urls_keeps_provenance_and_a_rerun_skips_it(
    cli_env, tmp_path, web_folder, s3_storage_url
):
    folder, base_url = web_folder
    (tmp_path / "local").mkdir()
    (tmp_path / "local" / "a.png").write_bytes(image_bytes(1))
    bucket = s3_storage_url.removeprefix("s3://").split("/")[0]
    s3fs.S3FileSystem(skip_instance_cache=True).pipe_file(f"{bucket}/corpus/b.jpg", image_bytes(2, "JPEG"))
    (folder / "c.webp").write_bytes(image_bytes(3, "WEBP"))
    rows = [
        ("local/a.png", "https://example.org/a", "CC BY 4.0", "Ada"),
        (f"s3://{bucket}/corpus/b.jpg", "https://example.org/b", "CC0", "Bo"),
        (f"{base_url}/c.webp", "", "CC BY-SA 2.0", "Cy"),
        (f"{base_url}/missing.png", "", "", ""),
        ("", "", "", ""),
        ("local/a.png", "javascript:alert(1)", "", ""),
        ("local/a.png", "", "x" * 256, ""),
    ]
    manifest = tmp_path / "manifest.csv"
    with manifest.open("w", newline="") as file:
        writer = csv.writer(file)
        writer.writerow(["uri", "source_url", "license", "author"])
        writer.writerows(rows)

    report_path = tmp_path / "report.json"
    cli_env = {
        **cli_env,
        "MAD_IMPORT_ALLOWED_HOSTS": "127.0.0.1",  # the web folder is served on loopback
        "MAD_IMPORT_ALLOWED_S3": f"s3://{bucket}/corpus",
    }
    first = invoke(
        cli_env,
        "images",
        "import",
        str(manifest),
        "-c",
        "corpus",
        "--threads",
        "4",
        "--report",
        str(report_path),
    )
    assert first.exit_code == 0, first.output
    report = json.loads(report_path.read_text())
    assert [item["name"] for item in report["added"]] == ["local/a.png", rows[1][0], rows[2][0]]
    rejected = {item["name"]: item["detail"] for item in report["rejected"]}
    assert "HTTP 404" in rejected[rows[3][0]] and rejected["row 6"] == "no uri"
    assert "not an http(s) URL" in rejected["local/a.png"] or "longer than 255" in rejected["local/a.png"]
    assert len(report["rejected"]) == 4

    stored = {
        row[0]: row[1:]
        for row in query(
            cli_env["MAD_DATABASE_URL"],
            select(Image.source_uri, Image.source_url, Image.license, Image.author, Image.phash),
        )
    }
    assert stored["local/a.png"][:3] == ("https://example.org/a", "CC BY 4.0", "Ada")
    assert stored[rows[1][0]][:3] == ("https://example.org/b", "CC0", "Bo")
    assert stored[rows[2][0]][:3] == (None, "CC BY-SA 2.0", "Cy")
    assert all(isinstance(values[3], int) for values in stored.values())

    second = invoke(cli_env, "images", "import", str(manifest), "-c", "corpus", "--report", str(report_path))
    assert second.exit_code == 0, second.output
    report = json.loads(report_path.read_text())
    assert report["added"] == [] and len(report["skipped"]) == 3 and len(report["rejected"]) == 4
    assert "0 added" in second.output and "3 skipped" in second.output


def test_an_s3_prefix_is_imported_with_each_object_key_as_its_source(cli_env, tmp_path, s3_storage_url):
    bucket = s3_storage_url.removeprefix("s3://").split("/")[0]
    filesystem = s3fs.S3FileSystem(skip_instance_cache=True)
    for index in range(5):
        filesystem.pipe_file(f"{bucket}/photos/{index}.png", image_bytes(10 + index))
    filesystem.pipe_file(f"{bucket}/photos/.hidden.png", image_bytes(20))
    filesystem.pipe_file(f"{bucket}/elsewhere/x.png", image_bytes(21))

    result = invoke(cli_env, "images", "import", f"s3://{bucket}/photos", "-c", "corpus", "--threads", "3")
    assert result.exit_code == 0, result.output
    assert "5 added" in result.output
    rows = query(cli_env["MAD_DATABASE_URL"], select(Image.source_uri, Image.sha256, Image.format))
    assert sorted(uri for uri, _, _ in rows) == [f"s3://{bucket}/photos/{i}.png" for i in range(5)]
    blobs = open_blob_store("", tmp_path / "data")  # the corpus was copied into the service's own store
    assert all(blobs.exists(image_key(sha256, image_format)) for _, sha256, image_format in rows)


def test_near_duplicates_are_reported_and_a_rerun_does_not_read_what_it_imported(cli_env, tmp_path):
    folder = tmp_path / "photos"
    folder.mkdir()
    original = smooth_jpeg(1)
    (folder / "a.jpg").write_bytes(original)
    with PILImage.open(io.BytesIO(original)) as picture:  # the same photo, smaller and recompressed
        buffer = io.BytesIO()
        picture.resize((200, 150), PILImage.Resampling.LANCZOS).save(buffer, format="JPEG", quality=70)
    (folder / "a-small.jpg").write_bytes(buffer.getvalue())
    (folder / "b.jpg").write_bytes(smooth_jpeg(2))
    (folder / "copy-of-a.jpg").write_bytes(original)
    report_path = tmp_path / "report.json"

    first = invoke(cli_env, "images", "import", str(folder), "-c", "corpus", "--report", str(report_path))
    assert first.exit_code == 0, first.output
    report = json.loads(report_path.read_text())
    assert sorted(item["name"] for item in report["added"]) == ["a-small.jpg", "a.jpg", "b.jpg"]
    assert [item["name"] for item in report["duplicates"]] == ["copy-of-a.jpg"]
    (near,) = report["near_duplicates"]
    assert near["name"] == "a-small.jpg" and near["detail"].endswith("of 64 pHash bits from a.jpg")
    assert "Near-duplicates" in first.output

    (folder / "a.jpg").write_bytes(bytes(len(original)))  # same size: read again, it would be rejected
    (folder / "c.jpg").write_bytes(smooth_jpeg(3))
    second = invoke(cli_env, "images", "import", str(folder), "-c", "corpus", "--report", str(report_path))
    assert second.exit_code == 0, second.output
    report = json.loads(report_path.read_text())
    assert [item["name"] for item in report["added"]] == ["c.jpg"]
    assert sorted(item["name"] for item in report["skipped"]) == ["a-small.jpg", "a.jpg", "b.jpg"]
    assert report["rejected"] == [] and report["near_duplicates"] == []


def test_provenance_is_listed_shown_to_admins_and_exported(client, db_session, competition, admin, settings):
    entries = [
        Candidate(
            "a.png", image_bytes(1), Provenance("s3://corpus/a.png", "https://example.org/a", "CC0", "Ada")
        ),
        Candidate("b.png", image_bytes(2)),
    ]
    with ThreadPoolExecutor(2) as executor:
        import_entries(
            db_session=db_session,
            store=ImageStore(settings.blob_store),
            competition=competition,
            entries=entries,
            limits=ImageLimits(2_000_000, 10_000_000, 64),
            executor=executor,
        )
    db_session.commit()

    def provenance(response):
        return [(r["source_uri"], r["source_url"], r["license"], r["author"]) for r in response.json()]

    images = f"/api/v1/competitions/{competition.id}/images"
    assert provenance(client.get(images)) == [  # where it was read is for admins
        (None, "https://example.org/a", "CC0", "Ada"),
        (None, None, None, None),
    ]
    _sign_in(client, "admin")
    assert provenance(client.get(images)) == [
        ("s3://corpus/a.png", "https://example.org/a", "CC0", "Ada"),
        ("b.png", None, None, None),
    ]
    page = client.get(f"/admin/competitions/{competition.id}").text
    table = page[page.index('id="recent-images"') :]
    assert '<a href="https://example.org/a" rel="noopener noreferrer">' in table
    assert "s3://corpus/a.png" in table and "CC0" in table and "Ada" in table
