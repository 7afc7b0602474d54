"""Admin actions through the API: a competition needs smoothing α > 0; a classifier from a pretrained tag
is stored and its worker job fails with the reason where the weights cannot be downloaded; excluding an
image replaces it in its pairs; excluding an annotator's votes re-decides their questions; retiring a
classifier cancels its jobs."""

import httpx
import huggingface_hub
import numpy as np
from sqlalchemy import select

from app.images.models import CompetitionImage, Image
from app.jobs import service as jobs_service
from app.jobs.enums import JobStatus
from app.jobs.models import Job
from app.labelling.models import LabelItem, PairImage, PairImageRole, Question
from app.users import service as users_service
from app.users.models import Role
from tests.conftest import TEST_PASSWORD, bearer
from tests.leaderboard.scenario import (
    DIGITS,
    annotators,
    corpus,
    digits_competition,
    register,
    run_select_jobs,
    vote,
)
from tests.support.http import HTTP_TIMEOUT_S
from tests.support.images import image_bytes
from tests.support.jobs import diagnosis_upload
from workers.worker import WorkerOptions, run_worker

PRETRAINED_TAG = "resnet18.a1_in1k"
DIGITS_DESCRIBED = DIGITS + 'descriptions: {"0": "the digit zero: one closed loop"}\n'


def test_a_competition_needs_a_smoothing_within_its_bounds(client, admin_headers):
    for smoothing in (0, -0.5):
        refused = client.post(
            "/api/v1/competitions", json={"name": "flat", "smoothing": smoothing}, headers=admin_headers
        )
        assert refused.status_code == 422
        (error,) = refused.json()["detail"]
        assert error["loc"] == ["body", "smoothing"] and "greater than or equal to 0.001" in error["msg"]
    assert client.get("/api/v1/competitions").json() == []
    created = client.post(
        "/api/v1/competitions", json={"name": "flat", "smoothing": 0.5}, headers=admin_headers
    )
    assert created.status_code == 201 and created.json()["smoothing"] == 0.5
    board = client.get(f"/api/v1/competitions/{created.json()['id']}/leaderboard")
    assert board.status_code == 200 and board.json()["smoothing"] == 0.5


def test_an_admin_adds_a_classifier_from_a_pretrained_tag_and_its_job_fails_offline_with_the_reason(
    live_server, tmp_path, monkeypatch
):
    # nothing listens on port 9: the worker cannot reach the hub, and its weights cache is empty
    monkeypatch.setattr(huggingface_hub.constants, "ENDPOINT", "http://127.0.0.1:9")
    with live_server.sessions() as db_session:
        admin = users_service.create_user(
            db_session=db_session, username="boss", role=Role.admin, password=TEST_PASSWORD
        )
        worker = users_service.create_user(
            db_session=db_session, username="gpu", role=Role.worker, password=None
        )
        admin_token = users_service.create_api_token(db_session=db_session, user=admin, name="test")
        worker_token = users_service.create_api_token(db_session=db_session, user=worker, name="test")
        db_session.commit()
    with httpx.Client(
        base_url=live_server.url, headers={"Authorization": f"Bearer {admin_token}"}, timeout=HTTP_TIMEOUT_S
    ) as http:
        competition = http.post("/api/v1/competitions", json={"name": "imagenet"}).json()
        base = f"/api/v1/competitions/{competition['id']}"
        files = [("files", (f"{seed}.png", image_bytes(seed), "image/png")) for seed in range(3)]
        assert len(http.post(f"{base}/images", files=files).json()["added"]) == 3

        # the admin page's "Add a classifier" form posts these fields to this endpoint
        added = http.post(
            f"{base}/classifiers",
            data={
                "name": "r18",
                "source": "timm-pretrained",
                "pretrained_tag": PRETRAINED_TAG,
                "reported_accuracy": "71.5",
            },
        )
        assert added.status_code == 201, added.text
        stored = added.json()
        assert (stored["source"], stored["pretrained_tag"], stored["architecture"], stored["status"]) == (
            "timm-pretrained",
            PRETRAINED_TAG,
            "resnet18",
            "predicting",
        )
        assert [c["name"] for c in http.get(f"{base}/classifiers").json()] == ["r18"]
        assert http.get(f"{base}/progress").json()["jobs_by_status"] == {"queued": 1}

        run_worker(
            url=live_server.url,
            token=worker_token,
            options=WorkerOptions(device="cpu", batch_size=4, loader_workers=0, cache_dir=tmp_path / "cache"),
            exit_when_idle=True,
            report=lambda *_: None,
        )
        (failed,) = http.get(f"{base}/classifiers").json()
        assert failed["status"] == "failed"
        assert f"cannot download pretrained weights for {PRETRAINED_TAG!r}" in failed["error"]
        assert "upload a weights file instead" in failed["error"]
        progress = http.get(f"{base}/progress").json()
        assert progress["jobs_by_status"] == {"failed": 1}
        assert progress["classifiers"][0]["error"] == failed["error"]
        (unranked,) = http.get(f"{base}/leaderboard").json()["unranked"]
        assert (unranked["name"], unranked["reason"]) == ("r18", failed["error"])


def pair_roles(db_session) -> list[tuple[int, PairImageRole]]:
    """(image id, role) of the pair images in position order."""
    return [
        tuple(row)
        for row in db_session.execute(select(PairImage.image_id, PairImage.role).order_by(PairImage.position))
    ]


def test_an_excluded_image_leaves_its_pairs_and_every_later_selection(
    client, db_session, settings, tmp_path, admin_headers, annotator_headers
):
    competition = digits_competition(db_session, k=4)
    hashes = corpus(db_session, settings, competition, 30)
    truth = np.arange(30) % 10
    register(db_session, settings, competition, tmp_path, "a", hashes, truth)
    register(db_session, settings, competition, tmp_path, "b", hashes, (truth + 1) % 10)
    run_select_jobs(db_session, settings)
    before = pair_roles(db_session)
    first_selected, first_reserve = before[0][0], before[4][0]
    assert [role for _, role in before[:5]] == [PairImageRole.selected] * 4 + [PairImageRole.reserve]
    sha256 = db_session.get(Image, first_selected).sha256

    url = f"/api/v1/competitions/{competition.id}/images/{sha256}/exclude"
    assert client.post(url, json={"reason": "a screenshot"}, headers=annotator_headers).status_code == 403
    response = client.post(url, json={"reason": "a screenshot"}, headers=admin_headers)
    assert response.status_code == 200 and response.json()["excluded"] is True

    after = dict(pair_roles(db_session))
    assert after[first_selected] == PairImageRole.discarded
    assert after[first_reserve] == PairImageRole.selected
    assert sum(role == PairImageRole.selected for role in after.values()) == 4
    item = db_session.scalar(select(LabelItem).where(LabelItem.image_id == first_selected))
    assert (item.discarded, item.needed) == (True, 0)
    assert db_session.scalar(select(Question.id).where(Question.image_id == first_reserve)) is not None
    link = db_session.scalar(select(CompetitionImage).where(CompetitionImage.image_id == first_selected))
    assert link.excluded_reason == "a screenshot"

    register(db_session, settings, competition, tmp_path, "c", hashes, (truth + 5) % 10)
    run_select_jobs(db_session, settings)
    assert first_selected not in {image_id for image_id, _ in pair_roles(db_session)[len(before) :]}


def test_excluding_an_annotators_votes_re_decides_their_questions(
    client, db_session, settings, tmp_path, admin_headers
):
    competition = digits_competition(db_session, k=3)
    hashes = corpus(db_session, settings, competition, 12)
    truth = np.arange(12) % 10
    register(db_session, settings, competition, tmp_path, "a", hashes, truth)
    register(db_session, settings, competition, tmp_path, "b", hashes, (truth + 1) % 10)
    run_select_jobs(db_session, settings)
    voters = annotators(db_session, 3)
    vote(db_session, competition, voters, lambda ordinal, c: c == truth[ordinal], hashes)
    decided = db_session.scalars(select(Question).where(Question.outcome.is_not(None))).all()
    assert decided  # three concordant votes each

    response = client.patch(
        f"/api/v1/users/{voters[2].id}", json={"votes_excluded": True}, headers=admin_headers
    )
    assert response.status_code == 200 and response.json()["votes_excluded"] is True
    for question in db_session.scalars(select(Question).execution_options(populate_existing=True)):
        assert question.outcome is None and question.yes_votes + question.no_votes == 2
    client.patch(f"/api/v1/users/{voters[2].id}", json={"votes_excluded": False}, headers=admin_headers)
    assert db_session.scalar(select(Question).where(Question.outcome.is_(None))) is None


def test_retiring_a_classifier_cancels_its_jobs_and_refuses_their_results(
    client, db_session, settings, tmp_path, admin_headers
):
    competition = digits_competition(db_session, k=3)
    hashes = corpus(db_session, settings, competition, 12)
    truth = np.arange(12) % 10
    keep = register(db_session, settings, competition, tmp_path, "keep", hashes, truth)
    other = register(db_session, settings, competition, tmp_path, "other", hashes, (truth + 2) % 10)
    leaving = register(db_session, settings, competition, tmp_path, "leaving", hashes, (truth + 4) % 10)
    claimed = [jobs_service.claim(db_session=db_session, worker="w", lease_seconds=60)[0] for _ in range(2)]
    db_session.commit()
    held = claimed[1]
    assert (held.classifier_id, held.other_classifier_id) == (keep.id, leaving.id)

    response = client.post(f"/api/v1/classifiers/{leaving.id}/retire", headers=admin_headers)
    assert response.status_code == 200 and response.json()["retired_at"] is not None
    jobs = db_session.scalars(select(Job).order_by(Job.id).execution_options(populate_existing=True)).all()
    cancelled = [job for job in jobs if leaving.id in (job.classifier_id, job.other_classifier_id)]
    assert len(cancelled) == 2 and all(job.status == JobStatus.cancelled for job in cancelled)
    assert all("retired" in job.error for job in cancelled)
    refused = client.post(
        f"/api/v1/jobs/{held.id}/selection",
        json={
            "lease_token": held.lease_token,
            "ordinals": [],
            "distances": [],
            "labels_a": [],
            "labels_b": [],
            "probs_a": [],
            "probs_b": [],
            "n_selected": 0,
            "diagnosis": diagnosis_upload(0),
        },
        headers=admin_headers,
    )
    assert refused.status_code == 409
    assert run_select_jobs(db_session, settings) == []
    assert [c["status"] for c in client.get(f"/api/v1/competitions/{competition.id}/classifiers").json()] == [
        "ready",
        "ready",
        "retired",
    ]
    again = client.post(f"/api/v1/classifiers/{leaving.id}/retire", headers=admin_headers)
    assert again.json()["retired_at"] == response.json()["retired_at"]
    assert other.id in {claimed[0].classifier_id, claimed[0].other_classifier_id}


def test_an_admin_sets_a_password_and_a_user_changes_their_own(
    client, db_session, admin_headers, annotator, annotator_headers
):
    def signs_in(password: str) -> bool:
        client.cookies.clear()
        return users_service.password_matches(
            users_service.sign_in_account(db_session=db_session, username="annotator"), password
        )

    url = f"/api/v1/users/{annotator.id}/password"
    assert (
        client.put(url, json={"password": "forgotten-no-more"}, headers=annotator_headers).status_code == 403
    )
    assert client.put(url, json={"password": "short"}, headers=admin_headers).status_code == 422
    assert client.put(url, json={"password": "forgotten-no-more"}, headers=admin_headers).status_code == 200
    assert signs_in("forgotten-no-more") and not signs_in(TEST_PASSWORD)
    assert client.get("/api/v1/me", headers=annotator_headers).status_code == 401  # the reset revoked it
    annotator_headers = bearer(db_session, annotator)
    worker = users_service.create_user(db_session=db_session, username="gpu", role=Role.worker, password=None)
    refused = client.put(
        f"/api/v1/users/{worker.id}/password", json={"password": "x" * 12}, headers=admin_headers
    )
    assert refused.status_code == 422 and "workers use API tokens" in refused.json()["detail"]

    own = {"current_password": "not it at all", "new_password": "my very own"}
    wrong = client.put("/api/v1/me/password", json=own, headers=annotator_headers)
    assert wrong.status_code == 422 and wrong.json()["detail"] == "the current password is wrong"
    own["current_password"] = "forgotten-no-more"
    assert client.put("/api/v1/me/password", json=own, headers=annotator_headers).status_code == 200
    assert signs_in("my very own")


def test_guidelines_are_set_by_an_admin_and_shown_with_every_class_definition(
    client, db_session, admin_headers, annotator_headers
):
    created = client.post(
        "/api/v1/competitions",
        json={
            "name": "digits",
            "taxonomy": "custom",
            "taxonomy_source": DIGITS_DESCRIBED,
            "guidelines": "Look.",
        },
        headers=admin_headers,
    )
    assert created.status_code == 201 and created.json()["guidelines"] == "Look."
    url = f"/api/v1/competitions/{created.json()['id']}"
    change = {"guidelines": "Answer yes for any digit you can read.\n\nA crossed seven is a seven."}
    assert client.patch(url, json=change, headers=annotator_headers).status_code == 403
    changed = client.patch(url, json=change, headers=admin_headers)
    assert changed.status_code == 200 and changed.json()["guidelines"] == change["guidelines"]
    assert changed.json()["description"] == ""  # left out, left alone

    page = client.get(f"/competitions/{created.json()['id']}/guidelines")
    assert page.status_code == 200
    assert (
        "<p>Answer yes for any digit you can read.</p>" in page.text
        and "<p>A crossed seven is a seven.</p>" in page.text
    )
    assert "<dt>zero</dt><dd>the digit zero: one closed loop</dd>" in page.text.replace("\n", "").replace(
        "  ", ""
    )
    assert "<dt>one</dt><dd>No definition given.</dd>" in page.text.replace("\n", "").replace("  ", "")
