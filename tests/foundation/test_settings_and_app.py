"""Settings validation, the health check, and the OpenAPI documentation of every endpoint."""

import pytest
from pydantic import ValidationError

from app.settings import DEVELOPMENT_SECRET_KEY, Settings
from tests.support.routes import endpoints


@pytest.mark.parametrize("env", ["production", "test"])
def test_the_development_secret_is_refused_outside_development(env):
    with pytest.raises(ValidationError, match="MAD_SECRET_KEY"):
        Settings(env=env, secret_key=DEVELOPMENT_SECRET_KEY)
    with pytest.raises(ValidationError, match="MAD_SECRET_KEY"):
        Settings(env=env, secret_key="too-short")
    assert Settings(env=env, secret_key="k" * 40).secret_key == "k" * 40


def test_development_defaults_to_sqlite_in_the_data_dir(tmp_path):
    settings = Settings(env="development", data_dir=tmp_path)
    assert settings.sqlalchemy_url == f"sqlite:///{tmp_path.resolve() / 'mad.sqlite3'}"


def test_postgres_urls_use_psycopg_3():
    settings = Settings(database_url="postgres://u:p@db:5432/mad")
    assert settings.sqlalchemy_url == "postgresql+psycopg://u:p@db:5432/mad"


def test_healthz_reaches_the_database(client):
    assert client.get("/healthz").json() == {"status": "ok"}


def test_home_page_says_what_to_do_next_when_empty(client):
    page = client.get("/")
    assert page.status_code == 200
    assert "mad competitions create" in page.text and "mad images import" in page.text


def test_every_api_endpoint_is_documented_in_openapi(app, client):
    schema = client.get("/openapi.json").json()
    assert client.get("/docs").status_code == 200
    documented = {(method.upper(), path) for path, item in schema["paths"].items() for method in item}
    for endpoint in endpoints(app):
        if not endpoint.path_template.startswith("/api/") and not endpoint.in_schema:
            continue  # HTML pages
        assert (endpoint.method, endpoint.path_template) in documented, endpoint
        operation = schema["paths"][endpoint.path_template][endpoint.method.lower()]
        assert operation.get("summary") and operation.get("description"), endpoint


def test_every_section_of_the_api_is_described_in_reading_order(client):
    schema = client.get("/openapi.json").json()
    described = [tag["name"] for tag in schema["tags"]]
    used = {
        tag for item in schema["paths"].values() for operation in item.values() for tag in operation["tags"]
    }
    assert set(described) == used, "a router's tag needs a line in app.main.API_SECTIONS"
    assert all(tag["description"] for tag in schema["tags"])
    assert described[:4] == ["users", "competitions", "images", "labelling"], "not the order routes match in"
