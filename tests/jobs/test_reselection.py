"""Selection settings changed in place (issue 34): untrained timm classifiers, whose top-1 probabilities stay
near 1/1000, select nothing at the paper's T = 0.8; the admin switches to the `fill` rule through the API and
every pair gets k images from the stored predictions, no prediction run again; after votes, a smaller k
through `mad competitions select` keeps the votes of the images still selected, says how many it drops, and
drops none unconfirmed."""

from concurrent.futures import ThreadPoolExecutor

from sqlalchemy import func, select
from typer.testing import CliRunner

from app.classifiers.models import Classifier
from app.classifiers.service import read_predictions
from app.cli.main import app as cli
from app.competitions.models import Competition
from app.images.models import CompetitionImage
from app.images.service import ImageLimits, import_entries
from app.images.sources import folder_entries
from app.images.store import ImageStore
from app.jobs.enums import JobKind
from app.jobs.models import Job
from app.labelling.models import Question, Vote
from app.users import service as users_service
from app.users.models import Role
from tests.jobs.conftest import add_timm_classifier
from tests.jobs.test_worker_pipeline import cli_env
from tests.labelling.factories import answer_next
from tests.support.images import write_images
from tests.support.jobs import competition_selection
from workers.worker import WorkerOptions, run_worker

IMAGES = 40
K = 4
ARCHITECTURES = ("test_resnet", "test_efficientnet", "test_vit")


def set_up(service, admin_client, tmp_path) -> int:
    """A competition at the paper's T = 0.8 (the cap lifted: untrained networks predict few labels) over real
    images, with three untrained timm classifiers registered from weight files."""
    spec = {"name": "unsure", "k": K, "confidence_threshold": 0.8, "max_per_label": 1000}
    created = admin_client.post("/api/v1/competitions", json=spec)
    assert created.status_code == 201, created.text
    write_images(tmp_path / "corpus", IMAGES)
    with service.session() as session, ThreadPoolExecutor(2) as executor:
        competition = session.get_one(Competition, created.json()["id"])
        import_entries(
            db_session=session,
            store=ImageStore(service.settings.blob_store),
            competition=competition,
            entries=folder_entries(tmp_path / "corpus", 10_000_000),
            limits=ImageLimits(10_000_000, 10_000_000, 64),
            executor=executor,
        )
        for seed, architecture in enumerate(ARCHITECTURES):
            add_timm_classifier(
                session, service.settings, competition, tmp_path, architecture, architecture, seed
            )
        session.commit()
        return competition.id


def work(service, tmp_path) -> int:
    """Run a worker until no job is left; the jobs it finished."""
    options = WorkerOptions(device="cpu", loader_workers=0, cache_dir=tmp_path / "worker-cache")
    return run_worker(
        url=service.url,
        token=service.worker_token,
        options=options,
        exit_when_idle=True,
        report=lambda *_: None,
    )


def predict_attempts(service, competition_id: int) -> list[tuple[int, int]]:
    """(job id, attempts) of the competition's predict jobs."""
    with service.session() as session:
        return session.execute(
            select(Job.id, Job.attempts)
            .where(Job.competition_id == competition_id, Job.kind == JobKind.predict)
            .order_by(Job.id)
        ).all()


def votes_on_selected(service, competition_id: int, k: int) -> tuple[int, int]:
    """(votes on questions the core's selection at k asks from the stored predictions, all votes)."""
    with service.session() as session:
        competition = session.get_one(Competition, competition_id)
        competition.k = k  # not committed: the selection the change to k will make
        ordinal_image = dict(
            session.execute(select(CompetitionImage.ordinal, CompetitionImage.image_id)).all()
        )
        classifiers = session.scalars(
            select(Classifier).where(Classifier.competition_id == competition_id).order_by(Classifier.id)
        ).all()
        predictions = [
            read_predictions(settings=service.settings, classifier=c, n_images=IMAGES) for c in classifiers
        ]
        asked = set()
        for a in range(len(predictions)):
            for b in range(a + 1, len(predictions)):
                chosen = competition_selection(competition, predictions[a], predictions[b])
                for ordinal, label_a, label_b in zip(
                    chosen.selected, chosen.labels_i, chosen.labels_j, strict=False
                ):
                    asked |= {
                        (ordinal_image[int(ordinal)], int(label_a)),
                        (ordinal_image[int(ordinal)], int(label_b)),
                    }
        votes = session.execute(
            select(Question.image_id, Question.class_index).join(Vote, Vote.question_id == Question.id)
        ).all()
        session.rollback()
        return sum(tuple(vote) in asked for vote in votes), len(votes)


def test_a_changed_rule_fills_every_pair_from_the_stored_predictions_and_a_smaller_k_keeps_the_votes_it_can(
    live_settings, live_service, admin_client, tmp_path
):
    competition_id = set_up(live_service, admin_client, tmp_path)
    assert work(live_service, tmp_path) > 3
    progress = admin_client.get(f"/api/v1/competitions/{competition_id}/progress").json()
    assert (progress["pairs_selected"], progress["pairs_empty"]) == (3, 3)
    disagreements = {
        (p["classifier_a_id"], p["classifier_b_id"]): p["diagnosis"]["disagreements"]
        for p in progress["pairs"]
    }
    assert all(count >= K for count in disagreements.values()), disagreements
    predicted = predict_attempts(live_service, competition_id)
    narrow = CliRunner().invoke(
        cli, ["jobs", "-c", "unsure"], env={**cli_env(live_settings), "COLUMNS": "80"}
    )
    assert narrow.exit_code == 0, narrow.output
    assert "…" not in narrow.output and max(map(len, narrow.output.splitlines())) <= 80

    path = f"/api/v1/competitions/{competition_id}"
    changed = admin_client.patch(path, json={"threshold_rule": "fill"})
    assert changed.status_code == 200, changed.text
    assert changed.json()["threshold_rule"] == "fill"
    assert changed.json()["reselection"] == {
        "applied": True,
        "votes_kept": 0,
        "votes_dropped": 0,
        "study_votes_dropped": 0,
        "select_jobs": 3,
    }
    assert work(live_service, tmp_path) == 3  # the select jobs only
    assert predict_attempts(live_service, competition_id) == predicted
    progress = admin_client.get(f"/api/v1/competitions/{competition_id}/progress").json()
    for pair in progress["pairs"]:
        assert (pair["selected"], pair["below_threshold"]) == (K, K), pair
        assert pair["diagnosis"]["rule"] == "fill" and pair["diagnosis"]["confident"] == 0
        assert pair["shortfall"] is None

    with live_service.session() as session:  # one annotator answers every question once
        annotator = users_service.create_user(
            db_session=session, username="ann", role=Role.annotator, password="long enough"
        )
        session.commit()
        competition = session.get_one(Competition, competition_id)
        while answer_next(session, competition, annotator) is not None:
            pass
    kept, total = votes_on_selected(live_service, competition_id, 2)
    assert 0 < kept < total

    preview = admin_client.patch(path, json={"k": 2, "dry_run": True})
    assert preview.status_code == 200 and preview.json()["k"] == K
    assert preview.json()["reselection"] == {
        "applied": False,
        "votes_kept": kept,
        "votes_dropped": total - kept,
        "study_votes_dropped": 0,
        "select_jobs": 3,
    }
    refused = admin_client.patch(path, json={"k": 2})
    assert refused.status_code == 409
    assert f"keeps {kept} votes and drops {total - kept}" in refused.json()["detail"]
    assert admin_client.get(path).json()["k"] == K

    env = {**cli_env(live_settings), "COLUMNS": "200"}
    declined = CliRunner().invoke(cli, ["competitions", "select", "unsure", "--k", "2"], input="n\n", env=env)
    assert declined.exit_code != 0
    assert f"This change keeps {kept} votes and drops {total - kept} (on images" in declined.output
    assert admin_client.get(path).json()["k"] == K
    with live_service.session() as session:
        assert session.scalar(select(func.count()).select_from(Vote)) == total

    done = CliRunner().invoke(cli, ["competitions", "select", "unsure", "--k", "2", "--yes"], env=env)
    assert done.exit_code == 0, done.output
    assert f"Kept {kept} votes, dropped {total - kept}; queued 3 select jobs" in done.output
    assert work(live_service, tmp_path) == 3
    progress = admin_client.get(f"/api/v1/competitions/{competition_id}/progress").json()
    assert [(p["selected"], p["k"]) for p in progress["pairs"]] == [(2, 2)] * 3
    assert votes_on_selected(live_service, competition_id, 2) == (kept, kept)

    grown = admin_client.patch(path, json={"k": K})  # a larger k drops nothing: no confirmation needed
    assert grown.status_code == 200, grown.text
    assert grown.json()["reselection"] == {
        "applied": True,
        "votes_kept": kept,
        "votes_dropped": 0,
        "study_votes_dropped": 0,
        "select_jobs": 3,
    }
