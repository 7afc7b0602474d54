"""Annotators cannot learn which model predicted which label on an image they may still be asked about.

While questions are open, an annotator (and an anonymous visitor) walks every route of the app, pages
included, with every real path parameter and every export format; no response may pair a classifier with
the label it predicted on an image that still has an open question. A model's prediction on an image is
public once every question on that image is decided (or the image was discarded and its questions
decided): per pair that would not do, since an image shared by two pairs would give the other pair's open
question away. Per-image predictions exports are admin-only.

A response leaks when it holds the image's hash, the open question's label and the name of a classifier
that predicted that label on the image anywhere in one document (JSON, HTML), or when one record pairs
them with the label given as its name or as its class index: a row of a table (CSV, JSON Lines,
Parquet), or a JSON object with the objects it sits in (the index among the object's own values; the
classifier by name, or by id under a key naming a classifier). The detector is checked on the admin's
exports, which must leak, and on JSON documents made from them (by image, by classifier id), so the
test can fail.
"""

import csv
import html
import io
import itertools
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass

import httpx
import pyarrow.parquet as pq
from fastapi.testclient import TestClient
from sqlalchemy import select

from app.db.engine import create_db_engine, create_sessionmaker
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
    classifier_ids: frozenset[int]


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
        predicted = [
            classifier_id for classifier_id, top1 in world.top1.items() if top1[ordinal] == class_index
        ]
        if predicted:
            names = tuple(world.classifier_names[classifier_id] for classifier_id in predicted)
            secrets.append(Secret(sha256, class_index, CLASSES[class_index], names, frozenset(predicted)))
    return secrets


@dataclass(frozen=True)
class Record:
    """Values that belong together: a table row, or a JSON object with the objects around it."""

    own: frozenset[str]
    """The record's own scalar values as text (where a prediction's class index would sit), but for ids,
    ordinals and positions."""
    text: str
    """Every key and value in reach, joined."""
    classifier_ids: frozenset[int]
    """Integers in reach under a key naming a classifier."""


NOT_A_LABEL = re.compile(r"(^|_)(id|ordinal|position)$")
"""Keys whose numbers are identifiers or places, never a class index."""


def _scalar(value) -> bool:
    return not isinstance(value, dict | list)


def _own(pairs) -> frozenset[str]:
    """The values of (key, scalar value) pairs that could be a label, as text."""
    return frozenset(
        str(value)
        for key, value in pairs
        if _scalar(value) and not isinstance(value, bool) and not NOT_A_LABEL.search(str(key))
    )


def _classifier_ids(pairs) -> set[int]:
    """The integers among (key, value) pairs whose key names a classifier."""
    ids = set()
    for key, value in pairs:
        if "classifier" in str(key) and not isinstance(value, bool):
            try:
                ids.add(int(value))
            except (TypeError, ValueError):
                continue
    return ids


def _inline_pairs(node: dict) -> list[tuple[str, object]]:
    """The (key, value) pairs of an object and of the objects nested in it (not in its lists); a list of
    scalars counts as its values."""
    pairs = []
    for key, value in node.items():
        if isinstance(value, dict):
            pairs += [(key, None), *_inline_pairs(value)]
        elif isinstance(value, list):
            pairs += [(key, item) for item in value if _scalar(item)]
        else:
            pairs.append((key, value))
    return pairs


def json_records(node, context: str = "", context_ids: frozenset[int] = frozenset()) -> Iterator[Record]:
    """A record per JSON object: its own values, with the text and classifier ids of the objects around."""
    if isinstance(node, list):
        for item in node:
            yield from json_records(item, context, context_ids)
        return
    if not isinstance(node, dict):
        return
    pairs = _inline_pairs(node)
    text = " ".join([context, *(f"{key} {'' if value is None else value}" for key, value in pairs)])
    ids = context_ids | _classifier_ids(pairs)
    own = [(key, value) for key, value in node.items() if _scalar(value)]
    own += [(key, item) for key, value in node.items() if isinstance(value, list) for item in value]
    yield Record(_own(own), text, frozenset(ids))
    for value in node.values():
        if not _scalar(value):
            yield from json_records(value, text, ids)


def row_record(row: dict) -> Record:
    """A table row as a record: every field is its own."""
    text = " ".join(f"{key} {value}" for key, value in row.items())
    return Record(_own(row.items()), text, frozenset(_classifier_ids(row.items())))


def records_of(response) -> list[Record] | None:
    """A tabular or JSON response as records; None for other documents (HTML, text)."""
    content_type = response.headers.get("content-type", "")
    if "text/csv" in content_type:
        return [row_record(row) for row in csv.DictReader(io.StringIO(response.text))]
    if "ndjson" in content_type:
        return [row_record(json.loads(line)) for line in response.text.splitlines() if line.strip()]
    if "parquet" in content_type:
        return [row_record(row) for row in pq.read_table(io.BytesIO(response.content)).to_pylist()]
    if "json" in content_type:
        return list(json_records(response.json()))
    return None


def record_leaks(record: Record, secret: Secret) -> bool:
    """The record pairs the secret's image, its label (name or index) and a classifier that predicted it."""
    return (
        secret.sha256 in record.text
        and (re.search(rf"\b{secret.label}\b", record.text) or str(secret.class_index) in record.own)
        and (
            any(name in record.text for name in secret.classifiers)
            or bool(record.classifier_ids & secret.classifier_ids)
        )
    )


def leaks(response, secrets: list[Secret]) -> list[str]:
    """What the response gives away: 'image, label, classifier' for each secret it pairs."""
    content_type = response.headers.get("content-type", "")
    if response.status_code >= 300 or content_type.startswith(BINARY_TYPES):
        return []
    found = []
    records = records_of(response)
    for record, secret in itertools.product(records or [], secrets):
        if record_leaks(record, secret):
            found.append(f"{secret.sha256[:12]} {secret.label} {secret.classifiers} in {record.text[:300]}")
    if records is not None and "json" not in content_type.replace("ndjson", ""):
        return found  # a table: its rows are its records
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
        "token": ["no-such-invitation"],
        "flag_id": [1],
        "name": ["no-such-provider"],
        "token_id": [999_999],
        "study_id": [999_999],
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


def _admin_predictions(client: TestClient, world: World) -> list[dict]:
    """The admin's predictions export: one row per classifier and image (classifier, sha256, top1 index)."""
    response = client.get(
        f"/api/v1/competitions/{world.competition_id}/exports/predictions",
        params={"format": "jsonl"},
        headers=world.headers("admin"),
    )
    return [json.loads(line) for line in response.text.splitlines()]


def _json(document) -> httpx.Response:
    return httpx.Response(200, json=document)


def test_the_detector_finds_class_indexes_paired_with_classifiers_in_json(world_app, world, world_settings):
    secrets = secrets_of(world, world_settings.sqlalchemy_url)
    with TestClient(world_app) as client:
        rows = _admin_predictions(client, world)
    by_image = {}
    for row in rows:
        by_image.setdefault(row["image_sha256"], []).append(
            {"classifier": row["classifier"], "top1": row["top1"]}
        )
    by_classifier = {}
    for row in rows:
        by_classifier.setdefault(row["classifier_id"], []).append(
            {"sha256": row["image_sha256"], "top1": row["top1"]}
        )
    layouts = {
        "rows": rows,
        "by-image": {"images": [{"image_sha256": sha, "predictions": p} for sha, p in by_image.items()]},
        "by-classifier-id": [{"classifier_id": c, "images": images} for c, images in by_classifier.items()],
        "keyed": {
            name: {row["image_sha256"]: row["top1"] for row in rows if row["classifier"] == name}
            for name in world.classifier_names.values()
        },
    }
    for layout, document in layouts.items():
        assert leaks(_json(document), secrets), layout
    for layout in ("rows", "by-image", "by-classifier-id"):  # the index, not the numbers around it
        assert not leaks(_json(_without(layouts[layout], "top1")), secrets), layout


def _without(node, key: str):
    """A copy of a JSON document with every `key` removed."""
    if isinstance(node, list):
        return [_without(item, key) for item in node]
    if isinstance(node, dict):
        return {name: _without(value, key) for name, value in node.items() if name != key}
    return node


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
