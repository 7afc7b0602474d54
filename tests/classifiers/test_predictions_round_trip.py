"""The service's predictions export goes back in as it is (issue 34): `mad classifiers add NAME
--predictions EXPORT --classifier ONE` and the API's upload with `classifier` take one classifier of the
export's table. It used to fail with "the file holds 90 rows …: more than the competition's 30 images", the
export holding every classifier with `image_sha256` and `entropy_bits` where the import wanted one with
`sha256` and `entropy`."""

import io
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select
from typer.testing import CliRunner

from app.classifiers import service as classifiers_service
from app.classifiers.models import Classifier
from app.cli.main import app as cli
from app.db.engine import create_db_engine, create_sessionmaker
from app.main import create_app
from app.settings import Settings
from app.users.models import Role
from tests.conftest import bearer, make_user, settings_for
from tests.leaderboard.scenario import N_CLASSES, corpus, digits_competition, register

N_IMAGES = 30
NAMES = ("alpha", "beta", "gamma")


@dataclass
class Exported:
    """A committed digits competition with three classifiers (gamma's file gave no entropies), the
    service's Parquet export of their predictions, and an admin's headers."""

    settings: Settings
    competition_id: int
    export: Path
    headers: dict[str, str]


@pytest.fixture
def exported(tmp_path, fresh_database_url) -> Exported:
    """Build the competition on a database of its own and fetch the export from the running service."""
    settings = settings_for(tmp_path, fresh_database_url)
    engine = create_db_engine(settings.sqlalchemy_url)
    try:
        with create_sessionmaker(engine)() as session:
            competition = digits_competition(session, name="digits")
            hashes = corpus(session, settings, competition, N_IMAGES)
            session.commit()
            rng = np.random.default_rng(5)
            for seed, name in enumerate(NAMES[:2]):
                labels = rng.integers(0, N_CLASSES, N_IMAGES)
                register(session, settings, competition, tmp_path, name, hashes, labels, seed=seed)
            without_entropy = tmp_path / "gamma.parquet"
            labels, probabilities = rng.integers(0, N_CLASSES, N_IMAGES), rng.random(N_IMAGES)
            table = pa.table({"sha256": hashes, "top1": labels, "prob": probabilities})
            pq.write_table(table, without_entropy)
            classifiers_service.register_predictions_file(
                db_session=session,
                settings=settings,
                competition=competition,
                name="gamma",
                predictions_file=without_entropy,
            )
            session.commit()
            headers = bearer(session, make_user(session, "admin", Role.admin))
            competition_id = competition.id
    finally:
        engine.dispose()
    with service(settings) as client:
        response = client.get(
            f"/api/v1/competitions/{competition_id}/exports/predictions",
            params={"format": "parquet"},
            headers=headers,
        )
    assert response.status_code == 200, response.text
    export = tmp_path / "predictions.parquet"
    export.write_bytes(response.content)
    return Exported(settings, competition_id, export, headers)


def service(settings: Settings) -> TestClient:
    """A client of the application on this database (requests commit for real)."""
    return TestClient(create_app(settings))


def stored(settings: Settings, name: str) -> dict[str, np.ndarray]:
    """The stored predictions of the classifier of this name."""
    engine = create_db_engine(settings.sqlalchemy_url)
    try:
        with create_sessionmaker(engine)() as session:
            classifier = session.scalar(select(Classifier).where(Classifier.name == name))
            assert classifier is not None, name
            predictions = classifiers_service.read_predictions(
                settings=settings, classifier=classifier, n_images=N_IMAGES
            )
            return {"top1": predictions.top1, "prob": predictions.prob, "entropy": predictions.entropy_bits}
    finally:
        engine.dispose()


def assert_same_predictions(settings: Settings, original: str, copy: str) -> None:
    """The copy holds the original's top-1 labels, probabilities and entropies (NaN where it had none)."""
    before, after = stored(settings, original), stored(settings, copy)
    assert before["top1"].tolist() == after["top1"].tolist() and (before["top1"] >= 0).all()
    assert np.array_equal(before["prob"], after["prob"])
    assert np.array_equal(before["entropy"], after["entropy"], equal_nan=True)


def names_of(settings: Settings) -> list[str]:
    """The classifiers registered, in order."""
    engine = create_db_engine(settings.sqlalchemy_url)
    try:
        with create_sessionmaker(engine)() as session:
            return list(session.scalars(select(Classifier.name).order_by(Classifier.id)))
    finally:
        engine.dispose()


def test_the_export_is_one_table_of_every_classifier_under_the_import_names(exported):
    table = pq.read_table(exported.export)
    assert {"image_sha256", "top1", "prob", "entropy_bits", "classifier"} <= set(table.column_names)
    assert table.num_rows == len(NAMES) * N_IMAGES
    entropies = table.filter(pc.equal(table.column("classifier"), "gamma")).column("entropy_bits")
    assert np.isnan(entropies.to_numpy()).all()  # its file had none: NaN in the export


def test_the_api_takes_one_classifier_of_the_export_as_it_is(exported):
    url = f"/api/v1/competitions/{exported.competition_id}/classifiers"

    def upload(client: TestClient, **fields):
        files = {"file": ("predictions.parquet", exported.export.read_bytes())}
        data = {"source": "predictions-file", **fields}
        return client.post(url, data=data, files=files, headers=exported.headers)

    with service(exported.settings) as client:
        several = upload(client, name="again")
        assert several.status_code == 422
        listed = "the file holds the predictions of 3 classifiers: alpha (30 rows), beta (30 rows), gamma (30"
        assert listed in several.json()["detail"] and "name the one to take" in several.json()["detail"]
        unknown = upload(client, name="again", classifier="delta")
        assert unknown.status_code == 422 and "holds no classifier 'delta'" in unknown.json()["detail"]
        assert names_of(exported.settings) == list(NAMES)  # nothing stored
        for name in ("beta", "gamma"):
            taken = upload(client, name=f"{name}-again", classifier=name)
            assert taken.status_code == 201, taken.text
            assert taken.json()["status"] == "ready"
        again = client.get(
            f"/api/v1/competitions/{exported.competition_id}/exports/predictions",
            params={"format": "parquet"},
            headers=exported.headers,
        )
    for name in ("beta", "gamma"):
        assert_same_predictions(exported.settings, name, f"{name}-again")
    rows = pq.read_table(io.BytesIO(again.content)).to_pylist()
    for name in ("beta", "gamma"):
        copied = [{**row, "classifier": name} for row in rows if row["classifier"] == f"{name}-again"]
        original = [row for row in rows if row["classifier"] == name]
        assert len(copied) == N_IMAGES
        assert [(r["image_sha256"], r["top1"], r["prob"]) for r in copied] == [
            (r["image_sha256"], r["top1"], r["prob"]) for r in original
        ]


def test_the_cli_takes_one_classifier_of_the_export_as_it_is(exported):
    runner = CliRunner()
    env = {
        "MAD_DATABASE_URL": exported.settings.database_url,
        "MAD_DATA_DIR": str(exported.settings.data_dir),
        "MAD_ENV": "development",
    }

    def add(*args: str):
        command = ["classifiers", "add", *args, "-c", "digits"]
        return runner.invoke(cli, command, env=env, terminal_width=300)

    several = add("again", "--predictions", str(exported.export))
    assert several.exit_code == 1
    message = " ".join(several.output.replace("│", " ").split())
    assert "3 classifiers: alpha (30 rows), beta (30 rows), gamma (30 rows)" in message
    assert "`--classifier NAME` of `mad classifiers add`" in message
    lonely = add("again", "--classifier", "alpha")
    assert lonely.exit_code == 1 and "give --predictions too" in lonely.output
    assert names_of(exported.settings) == list(NAMES)

    taken = add("alpha-again", "--predictions", str(exported.export), "--classifier", "alpha")
    assert taken.exit_code == 0, taken.output
    assert "Registered classifier alpha-again (ready). Run `mad worker` to select its pairs." in taken.output
    assert_same_predictions(exported.settings, "alpha", "alpha-again")
