"""Annotators cannot learn which model predicted which label on an image they may still be asked about.

While questions are open, an annotator (and an anonymous visitor) walks every route of the app, pages
included, with every real path parameter and every export format; no response may pair a classifier with
the label it predicted on an image that still has an open question. A model's prediction on an image is
public once every question on that image is decided (or the image was discarded and its questions
decided): per pair that would not do, since an image shared by two pairs would give the other pair's open
question away. Per-image predictions exports are admin-only.

A response leaks when it holds the image's hash, the open question's label and the name of a classifier
that predicted that label on the image: anywhere in one document (JSON, HTML), or in one row of a table
(CSV, JSON Lines, Parquet; there the label may also be its index). The detector is checked on the admin's
exports, which must leak, so the test can fail.
"""

import csv
import html
import io
import itertools
import json
import re
from dataclasses import dataclass

import pyarrow.parquet as pq
from fastapi.testclient import TestClient
from sqlalchemy import select

from app.db import create_db_engine, create_sessionmaker
from app.labelling.models import PairImage, PairImageRole, Question
from tests.labelling.factories import labelling_competition
from tests.reliability.world import CLASSES, World, open_questions
from tests.support.routes import endpoints

FORMATS = (None, "json", "csv", "jsonl", "parquet")
BINARY_TYPES = ("image/",)


@dataclass(frozen=True)
class Secret:
    """An open question's image and label, and the classifiers whose prediction it is."""

    sha256: str
    class_index: int
    label: str
    classifiers: tuple[str, ...]


def secrets_of(world: World, database_url: str) -> list[Secret]:
    """Every open question of the world with the classifiers that predicted its label on its image."""
    engine = create_db_engine(database_url)
    try:
        with create_sessionmaker(engine)() as session:
            questions = open_questions(session, world.competition_id)
    finally:
        engine.dispose()
    secrets = []
    for sha256, class_index in questions:
        ordinal = world.hashes.index(sha256)
        predicted = tuple(
            world.classifier_names[classifier_id]
            for classifier_id, top1 in world.top1.items()
            if top1[ordinal] == class_index
        )
        if predicted:
            secrets.append(Secret(sha256, class_index, CLASSES[class_index], predicted))
    return secrets


def rows_of(response) -> list[dict] | None:
    """A tabular response as rows; None for documents."""
    content_type = response.headers.get("content-type", "")
    if "text/csv" in content_type:
        return list(csv.DictReader(io.StringIO(response.text)))
    if "ndjson" in content_type:
        return [json.loads(line) for line in response.text.splitlines() if line.strip()]
    if "parquet" in content_type:
        return pq.read_table(io.BytesIO(response.content)).to_pylist()
    return None


def leaks(response, secrets: list[Secret]) -> list[str]:
    """What the response gives away: 'image, label, classifier' for each secret it pairs."""
    content_type = response.headers.get("content-type", "")
    if response.status_code >= 300 or content_type.startswith(BINARY_TYPES):
        return []
    found = []
    rows = rows_of(response)
    if rows is not None:
        for row, secret in itertools.product(rows, secrets):
            fields = {str(value) for value in row.values()}
            text = " ".join(fields)
            if (
                secret.sha256 in text
                and (secret.label in text or str(secret.class_index) in fields)
                and any(name in text for name in secret.classifiers)
            ):
                found.append(f"{secret.sha256[:12]} {secret.label} {secret.classifiers} in row {row}")
        return found
    text = html.unescape(response.text)
    for secret in secrets:
        if (
            secret.sha256 in text
            and re.search(rf"\b{secret.label}\b", text)
            and any(name in text for name in secret.classifiers)
        ):
            found.append(f"{secret.sha256[:12]} {secret.label} {secret.classifiers}")
    return found


def path_variants(template: str, world: World, image_hashes: list[str]) -> list[str]:
    """The path with every combination of real values for its parameters."""
    values = {
        "competition_id": [world.competition_id],
        "classifier_id": world.classifier_ids,
        "a_id": world.classifier_ids,
        "b_id": world.classifier_ids,
        "sha256": image_hashes,
        "slug": [world.snapshot_slug],
        "user_id": list(world.user_ids.values()),
        "job_id": world.job_ids[:2],
    }
    names = re.findall(r"{(\w+)}", template)
    paths = []
    for combination in itertools.product(*(values[name] for name in names)):
        path = template
        for name, value in zip(names, combination, strict=True):
            path = path.replace(f"{{{name}}}", str(value))
        paths.append(path)
    return paths


def walk(
    client: TestClient, app, world: World, headers: dict, secrets: list[Secret]
) -> tuple[int, list[str]]:
    """Request every route with every real parameter (GETs in every format); (responses seen, leaks)."""
    prefix = f"/api/v1/competitions/{world.competition_id}/labelling"
    seen, found = 0, []
    hashes = sorted({secret.sha256 for secret in secrets})[:3]
    for endpoint in endpoints(app):
        for path in path_variants(endpoint.path_template, world, hashes):
            if endpoint.method == "GET":
                requests = [
                    client.get(path, params={"format": f} if f else {}, headers=headers) for f in FORMATS
                ]
            elif path == f"{prefix}/answers":
                requests = [_answer_current_item(client, prefix, headers)]
            else:
                requests = [client.request(endpoint.method, path, json={}, headers=headers)]
            for response in requests:
                seen += 1
                found += [f"{endpoint.method} {path}: {leak}" for leak in leaks(response, secrets)]
    return seen, found


def _answer_current_item(client: TestClient, prefix: str, headers: dict):
    """Answer the item the annotator holds (leasing one first), asking for the next one in the response."""
    item = client.post(f"{prefix}/next", headers=headers).json().get("item")
    if item is None:
        return client.post(
            f"{prefix}/answers", json={"answers": [{"question_id": 1, "answer": True}]}, headers=headers
        )
    answers = [{"question_id": q["question_id"], "answer": True} for q in item["questions"]]
    return client.post(f"{prefix}/answers", json={"answers": answers, "next": True}, headers=headers)


def test_no_route_tells_an_annotator_which_model_predicted_an_open_label(world_app, world, world_settings):
    secrets = secrets_of(world, world_settings.sqlalchemy_url)
    assert len(secrets) >= 10, "the world must have open questions to protect"
    with TestClient(world_app) as client:
        prefix = f"/api/v1/competitions/{world.competition_id}/labelling"
        labelling = client.post(f"{prefix}/next", headers=world.headers("annotator")).json()
        assert labelling["status"] == "item"  # the annotator is in the middle of labelling
        for role in ("annotator", "anonymous"):
            seen, found = walk(client, world_app, world, world.headers(role), secrets)
            assert seen > 300
            routes = sorted({leak.split(": ")[0] for leak in found})
            assert not found, f"{role} learns {len(found)} predictions on open images from:\n" + "\n".join(
                routes
            )


def test_the_detector_finds_the_pairs_in_the_admins_exports(world_app, world, world_settings):
    secrets = secrets_of(world, world_settings.sqlalchemy_url)
    with TestClient(world_app) as client:
        for table in ("subsets", "predictions"):
            for export_format in ("csv", "jsonl", "parquet"):
                response = client.get(
                    f"/api/v1/competitions/{world.competition_id}/exports/{table}",
                    params={"format": export_format},
                    headers=world.headers("admin"),
                )
                assert response.status_code == 200
                assert leaks(response, secrets), (table, export_format)


def test_question_ids_do_not_follow_the_pairs_label_order(db_session, competition):
    """Questions are created in random order: ids ordered as (label_a, label_b) would name the models."""
    labelling_competition(db_session, competition, classifiers=2, images_per_pair=competition.k)
    rows = db_session.execute(
        select(PairImage.image_id, PairImage.label_a, PairImage.label_b).where(
            PairImage.role == PairImageRole.selected
        )
    ).all()
    assert len(rows) == competition.k == 30
    id_of = {
        (image_id, class_index): question_id
        for question_id, image_id, class_index in db_session.execute(
            select(Question.id, Question.image_id, Question.class_index)
        )
    }
    a_first = [id_of[(image_id, label_a)] < id_of[(image_id, label_b)] for image_id, label_a, label_b in rows]
    assert any(a_first) and not all(a_first)  # 30 fair coins all alike: once in 500 million runs
