"""The deployment files parse and name what production needs (no Docker engine runs here)."""

from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]


def test_compose_file_names_postgres_api_and_a_gpu_worker_with_named_volumes():
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    services = compose["services"]
    assert services["db"]["image"].startswith("postgres:16")
    assert services["api"]["build"] == "."
    assert "8000:8000" in services["api"]["ports"]
    assert services["api"]["environment"]["MAD_DATABASE_URL"].startswith("postgresql://")
    devices = services["worker"]["deploy"]["resources"]["reservations"]["devices"]
    assert devices[0]["capabilities"] == ["gpu"]
    assert "worker" in services["worker"]["command"]
    declared = set(compose["volumes"])
    used = {volume.split(":")[0] for service in services.values() for volume in service.get("volumes", [])}
    assert used and used <= declared


def test_compose_file_stores_blobs_in_minio_and_gives_api_and_worker_its_credentials():
    services = yaml.safe_load((ROOT / "docker-compose.yml").read_text())["services"]
    assert services["minio"]["image"].startswith("minio/minio")
    api, worker = services["api"]["environment"], services["worker"]["environment"]
    bucket = api["MAD_STORAGE_URL"].removeprefix("s3://").split("/")[0]
    assert f"store/{bucket}" in " ".join(services["bucket"]["command"])  # the one-shot makes that bucket
    assert services["api"]["depends_on"]["bucket"]["condition"] == "service_completed_successfully"
    for environment in (api, worker):
        assert environment["AWS_ENDPOINT_URL"] == "http://minio:9000"
        assert {"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_DEFAULT_REGION"} <= set(environment)
    assert api["AWS_ACCESS_KEY_ID"] == services["minio"]["environment"]["MINIO_ROOT_USER"]


def test_dockerfile_copies_what_the_service_needs_and_migrates_before_serving():
    dockerfile = (ROOT / "Dockerfile").read_text()
    for folder in ("app", "workers", "migrations", "templates", "static"):
        assert f"COPY {folder} ./{folder}" in dockerfile
    assert "mad db upgrade && mad serve" in dockerfile
