"""The service on an S3 store (moto): uploads land in the bucket, never on the local disk, and are served
through the service with the same headers as from a local directory. Both databases."""

import pytest

from app.settings import Settings
from app.storage.keys import image_key, thumbnail_key
from tests.conftest import settings_for
from tests.support.images import image_bytes


@pytest.fixture
def settings(tmp_path, database_url, s3_storage_url) -> Settings:
    """The shared database, blobs in a new bucket."""
    return settings_for(tmp_path, database_url, storage_url=s3_storage_url)


def test_s3_images_are_stored_in_the_bucket_and_served_by_the_service(
    client, competition, admin_headers, settings
):
    png, jpeg = image_bytes(1), image_bytes(2, "JPEG")
    files = [("files", ("one.png", png, "image/png")), ("files", ("two.jpg", jpeg, "image/jpeg"))]
    url = f"/api/v1/competitions/{competition.id}/images"
    response = client.post(url, files=files, headers=admin_headers)
    assert response.status_code == 201, response.text
    (one, two) = client.get(url).json()

    blobs = settings.blob_store
    assert blobs.get(image_key(one["sha256"], "png")) == png
    assert blobs.exists(thumbnail_key(two["sha256"]))
    assert not (settings.data_dir / "images").exists()

    served = client.get(f"/images/{two['sha256']}")
    assert served.status_code == 200 and served.content == jpeg
    assert served.headers["content-type"] == "image/jpeg"
    assert served.headers["cache-control"] == "public, max-age=31536000, immutable"
    thumbnail = client.get(f"/thumbnails/{one['sha256']}")
    assert thumbnail.status_code == 200 and thumbnail.headers["content-type"] == "image/webp"
    assert thumbnail.content == blobs.get(thumbnail_key(one["sha256"]))

    blobs.delete([image_key(one["sha256"], "png")])  # a store that lost an object: a clear 404
    lost = client.get(f"/images/{one['sha256']}")
    assert lost.status_code == 404 and "missing" in lost.json()["detail"]
