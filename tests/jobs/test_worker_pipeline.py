"""`mad worker` alone takes a competition from imported images to stored pair subsets (paper Algorithm 1);
a classifier added later gets only its m new pairs (Algorithm 2); progress is reported all along."""

import re
import time

import numpy as np
from sqlalchemy import select
from typer.testing import CliRunner

from app.classifiers.enums import ClassifierStatus
from app.classifiers.models import Classifier
from app.classifiers.service import read_predictions, register_timm_pretrained
from app.cli.main import app as cli
from app.competitions.models import Competition
from app.images.models import CompetitionImage
from app.jobs.enums import JobKind, JobStatus
from app.jobs.lifecycle import enqueue_classifier
from app.jobs.models import Job
from app.labelling.models import PairImage, PairImageRole, PairSubset, Question
from tests.jobs.conftest import add_timm_classifier, clean_predictions, local_worker, set_up_competition
from tests.support.jobs import competition_selection
from workers.client import ServiceClient
from workers.worker import Worker, WorkerOptions, run_worker

N_IMAGES = 500
K = 5
SHARD = 100  # live_settings.predict_shard_size


def cli_env(settings) -> dict[str, str]:
    """The environment of a `mad` command on the test's database."""
    return {
        "MAD_DATABASE_URL": settings.database_url,
        "MAD_DATA_DIR": str(settings.data_dir),
        "MAD_ENV": "development",
    }


def subset_rows(session) -> dict[tuple[int, int], list[tuple]]:
    """Every stored pair's rows in position order: (ordinal, role, distance, label a, label b, p a, p b)."""
    ordinal_of = dict(session.execute(select(CompetitionImage.image_id, CompetitionImage.ordinal)).all())
    rows = {}
    for subset in session.scalars(select(PairSubset).order_by(PairSubset.id)):
        rows[(subset.classifier_a_id, subset.classifier_b_id)] = [
            (ordinal_of[r.image_id], r.role, r.distance, r.label_a, r.label_b, r.prob_a, r.prob_b)
            for r in session.scalars(
                select(PairImage).where(PairImage.subset_id == subset.id).order_by(PairImage.position)
            )
        ]
    return rows


def algorithm_1_rows(
    session, settings, competition: Competition, a: Classifier, b: Classifier
) -> list[tuple]:
    """What app.core.selection selects (then reserves) for the pair from its stored predictions."""
    n_images = len(session.scalars(select(CompetitionImage.ordinal)).all())
    pa, pb = (read_predictions(settings=settings, classifier=c, n_images=n_images) for c in (a, b))
    selection = competition_selection(competition, pa, pb)
    return [
        (int(o), PairImageRole.selected if i < selection.n_selected else PairImageRole.reserve, *values)
        for i, (o, *values) in enumerate(
            zip(
                selection.ordinals,
                selection.distances,
                selection.labels_i,
                selection.labels_j,
                selection.probs_i,
                selection.probs_j,
                strict=True,
            )
        )
    ]


def assert_subsets_are_algorithm_1(session, settings, competition_id: int) -> dict[tuple[int, int], list]:
    """Every stored subset (selected and reserve) equals the core's selection on the stored predictions."""
    competition = session.get(Competition, competition_id)
    classifiers = {c.id: c for c in session.scalars(select(Classifier))}
    stored = subset_rows(session)
    for (a, b), rows in stored.items():
        expected = algorithm_1_rows(session, settings, competition, classifiers[a], classifiers[b])
        assert [row[:5] for row in rows] == [row[:5] for row in expected], (a, b)
        np.testing.assert_allclose([row[5:] for row in rows], [row[5:] for row in expected], rtol=1e-6)
        assert sum(row[1] == PairImageRole.selected for row in rows) == K
    return stored


def test_mad_worker_alone_predicts_and_selects_every_pair(
    live_settings, live_service, admin_client, tmp_path
):
    competition_id = set_up_competition(live_service, tmp_path, images=N_IMAGES, k=K)
    env = cli_env(live_settings)
    result = CliRunner().invoke(cli, ["worker", "--exit-when-idle", "--device", "cpu"], env=env)
    assert result.exit_code == 0, result.output
    assert f"Finished {3 * N_IMAGES // SHARD + 3} jobs." in result.output
    # read at once: the worker counts as seen for the lease (2 s) after its last claim, and the checks below
    # take longer than that on a busy machine (the request itself may too: see the warning below)
    progress = admin_client.get(f"/api/v1/competitions/{competition_id}/progress").json()

    with live_service.session() as session:
        assert set(session.scalars(select(Job.status))) == {JobStatus.done}
        classifiers = session.scalars(select(Classifier).order_by(Classifier.id)).all()
        assert [c.status for c in classifiers] == [ClassifierStatus.ready] * 3
        stored = assert_subsets_are_algorithm_1(session, live_settings, competition_id)
        ids = [c.id for c in classifiers]
        assert list(stored) == [(ids[0], ids[1]), (ids[0], ids[2]), (ids[1], ids[2])]
        names = [re.escape(c.name) for c in classifiers]
        last_bar = rf"^select pair {names[1]} × {names[2]} ━+ 1/1 "  # the bar the last job left, by names
        assert re.search(last_bar, result.output, re.MULTILINE), result.output
        asked = set(session.execute(select(Question.image_id, Question.class_index)).all())
        image_of = dict(session.execute(select(CompetitionImage.ordinal, CompetitionImage.image_id)).all())
        assert asked == {
            (image_of[ordinal], label)
            for rows in stored.values()
            for ordinal, role, _, label_a, label_b, *_ in rows
            if role == PairImageRole.selected
            for label in (label_a, label_b)
        }

    assert [(p["selected"], p["shortfall"]) for p in progress.pop("pairs")] == [(K, None)] * 3
    (seen,) = progress.pop("workers")  # the worker, by its default name host:pid, seen just now
    assert re.fullmatch(r".+:\d+", seen["worker"])
    # No warning while it counts as seen (the lease, 2 s, after its last claim); past that on a loaded machine
    # (a CI run) the warning says since when, and that nothing waits.
    lost = f"No worker seen for {seen['seen_ago']}; no job waits: start one with `mad worker`."
    assert progress.pop("worker_warning") in (None, lost)
    assert progress == {
        "competition_id": competition_id,
        "images": N_IMAGES,
        "classifiers": [
            {
                "classifier_id": c.id,
                "name": c.name,
                "status": "ready",
                "images_predicted": N_IMAGES,
                "images_total": N_IMAGES,
                "error": None,
                "pairs_selected": 2,
                "pairs_empty": 0,
            }
            for c in classifiers
        ],
        "pairs_selected": 3,
        "pairs_total": 3,
        "pairs_empty": 0,
        "pairs_short": 0,
        "jobs_by_status": {"done": 3 * N_IMAGES // SHARD + 3},
    }
    report = CliRunner().invoke(cli, ["jobs", "--competition", "live"], env=env, terminal_width=200)
    assert report.exit_code == 0, report.output
    for classifier in classifiers:
        assert [classifier.name, "ready", f"{N_IMAGES}/{N_IMAGES}", "0", "of", "2"] in [
            line.replace("│", " ").split() for line in report.output.splitlines()
        ]
    assert "Pairs selected: 3/3" in report.output
    assert f"Jobs: {3 * N_IMAGES // SHARD + 3} done" in report.output
    assert f"Workers last seen: {seen['worker']} " in report.output


def test_a_classifier_added_later_gets_only_its_new_pairs_algorithm_2(
    live_settings, live_service, admin_client, tmp_path
):
    n_images = 300
    competition_id = set_up_competition(live_service, tmp_path, images=n_images, k=K)
    options = WorkerOptions(device="cpu", loader_workers=0, cache_dir=tmp_path / "worker-cache")
    reports: list[tuple[str, int, int]] = []

    def work() -> int:
        return run_worker(
            url=live_service.url,
            token=live_service.worker_token,
            options=options,
            exit_when_idle=True,
            report=lambda label, done, total: reports.append((label, done, total)),
        )

    assert work() == 3 * n_images // SHARD + 3
    with live_service.session() as session:
        first = session.scalars(select(Classifier).order_by(Classifier.id)).all()
        before = subset_rows(session)
        questions_before = set(session.execute(select(Question.id, Question.image_id, Question.class_index)))
    names = ", ".join(c.name for c in first)
    assert {r for r in reports if r[1] == r[2]} == {
        *(
            (f"predict {start}–{start + SHARD} ({names})", SHARD, SHARD)
            for start in range(0, n_images, SHARD)
        ),
        *(
            (f"select pair {a.name} × {b.name}", 1, 1)
            for a, b in ((first[0], first[1]), (first[0], first[2]), (first[1], first[2]))
        ),
    }

    with live_service.session() as session:
        competition = session.get(Competition, competition_id)
        fourth = add_timm_classifier(
            session, live_settings, competition, tmp_path, "fourth", "test_resnet", 3
        )
        session.commit()
        fourth_id = fourth.id
    waiting = admin_client.get(f"/api/v1/competitions/{competition_id}/progress").json()
    assert waiting["classifiers"][-1] == {
        "classifier_id": fourth_id,
        "name": "fourth",
        "status": "predicting",
        "images_predicted": 0,
        "images_total": n_images,
        "error": None,
        "pairs_selected": 0,
        "pairs_empty": 0,
    }
    assert (waiting["pairs_selected"], waiting["pairs_total"]) == (3, 6)
    assert waiting["jobs_by_status"] == {"done": 3 * n_images // SHARD + 3, "queued": n_images // SHARD}

    assert work() == n_images // SHARD + 3  # its own shards, then its m = 3 new pairs
    with live_service.session() as session:
        select_jobs = session.scalars(select(Job).where(Job.kind == JobKind.select).order_by(Job.id)).all()
        pairs = [(job.classifier_id, job.other_classifier_id) for job in select_jobs]
        assert pairs[3:] == [(c.id, fourth_id) for c in first] and len(pairs) == 6
        after = assert_subsets_are_algorithm_1(session, live_settings, competition_id)
        assert len(after) == 6 and {pair: after[pair] for pair in before} == before  # old subsets untouched
        questions_after = set(session.execute(select(Question.id, Question.image_id, Question.class_index)))
        assert questions_before <= questions_after  # every question asked before is kept, not asked again
        image_of = dict(session.execute(select(CompetitionImage.ordinal, CompetitionImage.image_id)).all())
    new_pairs_asked = {
        (image_of[ordinal], label)
        for pair, rows in after.items()
        if pair not in before
        for ordinal, role, _, label_a, label_b, *_ in rows
        if role == PairImageRole.selected
        for label in (label_a, label_b)
    }
    asked_before = {(image, label) for _, image, label in questions_before}
    assert {(image, label) for _, image, label in questions_after - questions_before} == (
        new_pairs_asked - asked_before
    )
    done = admin_client.get(f"/api/v1/competitions/{competition_id}/progress").json()
    assert [c["images_predicted"] for c in done["classifiers"]] == [n_images] * 4
    assert (done["pairs_selected"], done["pairs_total"]) == (6, 6)


def test_the_worker_keeps_its_inference_engine_while_its_classifiers_stay_the_same(
    live_settings, live_service, tmp_path
):
    n_images = 300
    competition_id = set_up_competition(
        live_service, tmp_path, images=n_images, architectures=("test_resnet",)
    )
    options = WorkerOptions(device="cpu", loader_workers=0, cache_dir=tmp_path / "worker-cache")
    engines = []
    worker = Worker(
        ServiceClient(live_service.url, live_service.worker_token),
        ServiceClient(live_service.url, live_service.worker_token),
        "w",
        options,
        report=lambda label, done, total: engines.append(worker.engine),
    )
    assert worker.run(exit_when_idle=True) == 3
    first_engine = engines[0]
    assert len(engines) == 3 * 2 and all(engine is first_engine for engine in engines)  # 2 batches a shard

    with live_service.session() as session:
        competition = session.get(Competition, competition_id)
        second = add_timm_classifier(
            session, live_settings, competition, tmp_path, "second", "test_efficientnet", 1
        )
        session.commit()
        second_id = second.id
    engines.clear()
    assert worker.run(exit_when_idle=True) == 3 + 3 + 1  # in all: its shards, then the pair
    assert worker.engine is not first_engine and worker.engine_classifiers == (second_id,)
    assert all(engine is worker.engine for engine in engines)
    with live_service.session() as session:
        second = session.get(Classifier, second_id)
        stored = read_predictions(settings=live_settings, classifier=second, n_images=n_images)
    clean = clean_predictions(live_service, second, n_images)
    assert np.array_equal(stored.top1, clean.top1)
    np.testing.assert_allclose(stored.prob, clean.prob, atol=1e-5)


def test_the_next_shard_is_claimed_while_the_current_one_runs(live_service, tmp_path):
    """When a shard's last batch is done, its predictions are still to be uploaded and the next shard is
    already this worker's (claimed on the service I/O thread, so the model need not wait for a claim)."""
    set_up_competition(live_service, tmp_path, images=2 * SHARD, architectures=("test_resnet",))
    seen: dict[str, object] = {}

    def shard_statuses() -> dict[int, tuple[JobStatus, str | None]]:
        with live_service.session() as session:
            jobs = session.scalars(select(Job).where(Job.kind == JobKind.predict)).all()
            return {job.shard_start: (job.status, job.lease_owner) for job in jobs}

    def report(label: str, done: int, total: int) -> None:
        if label.startswith("predict 0–") and done == total:
            deadline = time.monotonic() + 30
            while shard_statuses()[SHARD] != (JobStatus.running, "w") and time.monotonic() < deadline:
                time.sleep(0.05)
            seen.update(shard_statuses())

    options = WorkerOptions(
        device="cpu", batch_size=32, loader_workers=0, cache_dir=tmp_path / "worker-cache"
    )
    worker = Worker(
        ServiceClient(live_service.url, live_service.worker_token),
        ServiceClient(live_service.url, live_service.worker_token),
        "w",
        options,
        report=report,
    )
    assert worker.run(exit_when_idle=True) == 2
    assert seen == {0: (JobStatus.running, "w"), SHARD: (JobStatus.running, "w")}
    assert set(shard_statuses().values()) == {(JobStatus.done, "w")}


def test_a_pretrained_tag_that_cannot_be_downloaded_fails_its_classifier_with_the_reason(
    live_settings, live_service, tmp_path
):
    set_up_competition(live_service, tmp_path, images=20, architectures=())
    with live_service.session() as session:
        competition = session.scalars(select(Competition)).one()
        classifier = register_timm_pretrained(
            db_session=session,
            settings=live_settings,
            competition=competition,
            name="r18",
            pretrained_tag="resnet18.a1_in1k",
        )
        enqueue_classifier(db_session=session, settings=live_settings, classifier=classifier)
        session.commit()
    worker = local_worker(live_settings, "offline", HF_HUB_OFFLINE="1")  # the same on a machine off the net
    assert worker.wait(timeout=300) == 0, worker.stderr.read().decode()
    with live_service.session() as session:
        classifier = session.scalars(select(Classifier)).one()
        assert classifier.status == ClassifierStatus.failed
        assert "'resnet18.a1_in1k'" in classifier.error and "not in its local cache" in classifier.error
        assert set(session.scalars(select(Job.status))) == {JobStatus.failed}
    assert not (live_settings.data_dir / "predictions" / str(classifier.id)).exists()
