"""Registering classifiers: every source, clear errors, nothing stored on error, jobs queued on success."""

import io

import numpy as np
import pytest
import safetensors.torch
import timm
import torch
from sqlalchemy import func, select

from app.classifiers.enums import ClassifierStatus
from app.classifiers.models import Classifier
from app.images.models import CompetitionImage, Image
from app.jobs.enums import JobKind
from app.jobs.models import Job
from tests.jobs.conftest import write_weights


def add_images(db_session, competition, count: int) -> list[str]:
    hashes = []
    for ordinal in range(count):
        sha256 = f"{ordinal:064x}"
        image = Image(sha256=sha256, format="png", width=1, height=1, bytes=1, original_name=f"{ordinal}.png")
        db_session.add(image)
        db_session.flush()
        db_session.add(CompetitionImage(competition_id=competition.id, image_id=image.id, ordinal=ordinal))
        hashes.append(sha256)
    db_session.commit()
    return hashes


def register(client, competition, headers, **form):
    files = form.pop("files", None)
    return client.post(
        f"/api/v1/competitions/{competition.id}/classifiers", data=form, files=files, headers=headers
    )


def assert_nothing_stored(db_session, settings):
    assert db_session.scalar(select(func.count()).select_from(Classifier)) == 0
    assert db_session.scalar(select(func.count()).select_from(Job)) == 0
    assert not (settings.data_dir / "weights").exists() or not any((settings.data_dir / "weights").iterdir())


def test_weights_file_is_loaded_checked_stored_and_its_shards_queued(
    client, db_session, competition, admin_headers, settings, tmp_path
):
    add_images(db_session, competition, 10)
    weights = write_weights(tmp_path / "resnet.safetensors", "test_resnet", 0)
    response = register(
        client,
        competition,
        admin_headers,
        name="resnet",
        source="timm-weights",
        architecture="test_resnet",
        reported_accuracy="73.3",
        files={"file": ("resnet.safetensors", weights.read_bytes())},
    )
    assert response.status_code == 201, response.text
    body = response.json()
    assert (body["status"], body["reported_accuracy"]) == ("predicting", 73.3)
    assert (
        (settings.data_dir / "weights") / f"{body['weights_sha256']}.safetensors"
    ).read_bytes() == weights.read_bytes()
    jobs = db_session.scalars(select(Job)).all()
    assert [(j.kind, j.shard_start, j.shard_end) for j in jobs] == [(JobKind.predict, 0, 10)]
    listed = client.get(f"/api/v1/competitions/{competition.id}/classifiers").json()
    assert [c["name"] for c in listed] == ["resnet"]


@pytest.mark.parametrize("filename", ["resnet.BIN", "resnet.Pt", "resnet.SafeTensors"])
def test_every_accepted_weights_suffix_registers_in_any_case(
    client, db_session, competition, admin_headers, settings, tmp_path, filename
):
    add_images(db_session, competition, 10)
    model = timm.create_model("test_resnet", num_classes=1000)
    path = tmp_path / filename
    if filename.lower().endswith(".safetensors"):
        safetensors.torch.save_file(model.state_dict(), str(path))
    else:
        torch.save(model.state_dict(), path)
    response = register(
        client,
        competition,
        admin_headers,
        name="resnet",
        source="timm-weights",
        architecture="test_resnet",
        files={"file": (filename, path.read_bytes())},
    )
    assert response.status_code == 201, response.text
    stored_format = "safetensors" if filename.lower().endswith(".safetensors") else "pth"
    body = response.json()
    assert (
        (settings.data_dir / "weights") / f"{body['weights_sha256']}.{stored_format}"
    ).read_bytes() == path.read_bytes()


def test_a_weights_file_of_another_kind_is_refused_naming_the_accepted_suffixes(
    client, db_session, competition, admin_headers, settings
):
    add_images(db_session, competition, 3)
    response = register(
        client,
        competition,
        admin_headers,
        name="keras",
        source="timm-weights",
        architecture="test_resnet",
        files={"file": ("model.h5", b"\x89HDF")},
    )
    assert response.status_code == 422
    assert response.json()["detail"] == "weights file 'model.h5': use .safetensors, .pth, .pt, .bin"
    assert_nothing_stored(db_session, settings)


@pytest.mark.parametrize(
    ("architecture", "make_file", "message"),
    [
        (
            "resnet_9000",
            lambda tmp: write_weights(tmp / "my-resnet.safetensors", "test_resnet", 0),
            "timm has no architecture 'resnet_9000'",
        ),
        (
            "test_efficientnet",
            lambda tmp: write_weights(tmp / "my-resnet.safetensors", "test_resnet", 0),
            "weights file 'my-resnet.safetensors' was not saved from 'test_efficientnet': ",
        ),
        (
            "test_resnet",
            lambda tmp: _truncated(write_weights(tmp / "my-resnet.safetensors", "test_resnet", 0)),
            "weights file 'my-resnet.safetensors' is unreadable",
        ),
        (
            "test_resnet",
            lambda tmp: _ten_classes(tmp / "my-resnet.safetensors"),
            "weights file 'my-resnet.safetensors' has a classifier with 10 classes",
        ),
    ],
    ids=["unknown-architecture", "other-architecture", "corrupt", "wrong-class-count"],
)
def test_bad_weights_are_refused_with_a_clear_error_and_nothing_stored(
    client, db_session, competition, admin_headers, settings, tmp_path, architecture, make_file, message
):
    """The error names the file the user sent, never the copy the server keeps while checking it."""
    path = make_file(tmp_path)
    response = register(
        client,
        competition,
        admin_headers,
        name="bad",
        source="timm-weights",
        architecture=architecture,
        files={"file": (path.name, path.read_bytes())},
    )
    assert response.status_code == 422
    detail = response.json()["detail"]
    assert message in detail and "upload" not in detail and "\n" not in detail
    assert_nothing_stored(db_session, settings)


def _truncated(path):
    path.write_bytes(path.read_bytes()[:5000])
    return path


def _ten_classes(path):
    import safetensors.torch
    import timm

    safetensors.torch.save_file(timm.create_model("test_resnet", num_classes=10).state_dict(), str(path))
    return path


def _npz(**arrays) -> bytes:
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    return buffer.getvalue()


def test_predictions_files_make_ready_classifiers_and_pair_jobs(
    client, db_session, competition, admin_headers
):
    hashes = add_images(db_session, competition, 6)
    for name, labels in (("elsewhere-1", [1, 2, 3, 4, 5, 6]), ("elsewhere-2", [6, 5, 4, 3, 2, 1])):
        data = _npz(sha256=np.array(hashes), top1=np.array(labels), prob=np.full(6, 0.9))
        response = register(
            client,
            competition,
            admin_headers,
            name=name,
            source="predictions-file",
            files={"file": ("predictions.npz", data)},
        )
        assert response.status_code == 201, response.text
        assert response.json()["status"] == "ready"
    jobs = db_session.scalars(select(Job)).all()
    assert [j.kind for j in jobs] == [JobKind.select]


def test_predictions_file_with_unknown_hashes_is_refused(
    client, db_session, competition, admin_headers, settings
):
    hashes = add_images(db_session, competition, 3)
    data = _npz(sha256=np.array(hashes[:2] + ["f" * 64]), top1=np.array([1, 2, 3]), prob=np.full(3, 0.9))
    response = register(
        client,
        competition,
        admin_headers,
        name="x",
        source="predictions-file",
        files={"file": ("p.npz", data)},
    )
    assert response.status_code == 422
    assert "ffff" in response.json()["detail"]
    assert_nothing_stored(db_session, settings)


def test_pretrained_tags_are_checked_against_timm(client, db_session, competition, admin_headers, settings):
    add_images(db_session, competition, 3)
    unknown = register(
        client,
        competition,
        admin_headers,
        name="x",
        source="timm-pretrained",
        pretrained_tag="resnet50.no_such_tag",
    )
    assert unknown.status_code == 422 and "resnet50.no_such_tag" in unknown.json()["detail"]
    assert_nothing_stored(db_session, settings)
    known = register(
        client,
        competition,
        admin_headers,
        name="r18",
        source="timm-pretrained",
        pretrained_tag="resnet18.a1_in1k",
    )
    assert known.status_code == 201
    assert known.json()["status"] == ClassifierStatus.predicting.value


def test_duplicate_names_and_missing_fields_are_explained(
    client, db_session, competition, admin_headers, tmp_path
):
    add_images(db_session, competition, 3)
    assert (
        register(
            client,
            competition,
            admin_headers,
            name="r",
            source="timm-pretrained",
            pretrained_tag="resnet18.a1_in1k",
        ).status_code
        == 201
    )
    again = register(
        client,
        competition,
        admin_headers,
        name="r",
        source="timm-pretrained",
        pretrained_tag="resnet18.a1_in1k",
    )
    assert again.status_code == 409 and "already has a classifier named 'r'" in again.json()["detail"]
    no_file = register(client, competition, admin_headers, name="w", source="timm-weights", architecture="x")
    assert no_file.status_code == 422 and "needs a file" in no_file.json()["detail"]
