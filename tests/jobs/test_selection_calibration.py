"""Classifiers whose confidence stays low and model-dependent, as label smoothing, mixup and BCE leave it:
under the paper's absolute T = 0.8 every pair comes out empty, and every place that lists a pair says why;
under each classifier's own 0.8-quantile the same predictions select images. Competitions and predictions
files through the API, selections by `mad worker`'s worker, read back through the API, `mad jobs` and the
pages."""

import io
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from sqlalchemy import select
from typer.testing import CliRunner

from app.classifiers.models import Classifier
from app.classifiers.service import read_predictions
from app.cli.main import app as cli
from app.competitions.models import Competition
from app.core.threshold_rule import ThresholdRule
from app.images.models import CompetitionImage, Image
from app.images.service import ImageLimits, import_entries
from app.images.sources import folder_entries
from app.images.store import ImageStore
from app.labelling.models import PairImage, PairSubset
from tests.jobs.test_worker_pipeline import cli_env
from tests.support.images import write_images
from tests.support.jobs import competition_selection
from workers.worker import WorkerOptions, run_worker

N_IMAGES = 400
K = 10
CALIBRATIONS = {"smoothed": (0.10, 0.55), "mixup": (0.05, 0.45), "bce": (0.20, 0.70)}
"""Each classifier's range of top-1 probabilities: low, and each its own; none ever reaches 0.8."""


def low_confidence_parquet(hashes: list[str], seed: int, low: float, high: float) -> bytes:
    """Top-1 predictions of an ImageNet classifier right on 40–90% of the images (easier ones more often),
    its confidence rising with the image's ease inside [low, high]."""
    truth_rng, rng = np.random.default_rng(0), np.random.default_rng(seed + 1)
    truth, ease = truth_rng.integers(0, 1000, len(hashes)), truth_rng.random(len(hashes))
    right = rng.random(len(hashes)) < 0.4 + 0.5 * ease
    confidence = 0.8 * ease + 0.2 * rng.random(len(hashes))
    table = pa.table(
        {
            "sha256": hashes,
            "top1": np.where(right, truth, rng.integers(0, 1000, len(hashes))),
            "prob": low + (high - low) * confidence,
        }
    )
    buffer = io.BytesIO()
    pq.write_table(table, buffer)
    return buffer.getvalue()


def set_up(service, admin_client, tmp_path, rule: ThresholdRule) -> int:
    """An ImageNet-1k competition (T = 0.8 under `rule`, k = 10, the paper's cap of 3) made through the API
    over real images, with the three low-confidence classifiers uploaded as predictions files."""
    folder = tmp_path / "corpus"
    if not folder.exists():
        write_images(folder, N_IMAGES)
    spec = {"name": rule.value, "k": K, "confidence_threshold": 0.8, "threshold_rule": rule.value}
    created = admin_client.post("/api/v1/competitions", json=spec)
    assert created.status_code == 201, created.text
    competition_id = created.json()["id"]
    with service.session() as session, ThreadPoolExecutor(2) as executor:
        import_entries(
            db_session=session,
            store=ImageStore(service.settings.blob_store),
            competition=session.get_one(Competition, competition_id),
            entries=folder_entries(folder, 10_000_000),
            limits=ImageLimits(10_000_000, 10_000_000, 64),
            executor=executor,
        )
        session.commit()
        hashes = list(
            session.scalars(
                select(Image.sha256)
                .join(CompetitionImage, CompetitionImage.image_id == Image.id)
                .where(CompetitionImage.competition_id == competition_id)
                .order_by(CompetitionImage.ordinal)
            )
        )
    for seed, (name, (low, high)) in enumerate(CALIBRATIONS.items()):
        upload = ("predictions.parquet", low_confidence_parquet(hashes, seed, low, high))
        response = admin_client.post(
            f"/api/v1/competitions/{competition_id}/classifiers",
            data={"name": name, "source": "predictions-file"},
            files={"file": upload},
        )
        assert response.status_code == 201, response.text
    return competition_id


@pytest.fixture
def worked(live_service, admin_client, tmp_path) -> dict[ThresholdRule, int]:
    """Both competitions' pairs selected by one worker: their ids by threshold rule."""
    ids = {
        rule: set_up(live_service, admin_client, tmp_path, rule)
        for rule in (ThresholdRule.absolute, ThresholdRule.quantile)
    }
    options = WorkerOptions(device="cpu", loader_workers=0, cache_dir=tmp_path / "worker-cache")
    finished = run_worker(
        url=live_service.url,
        token=live_service.worker_token,
        options=options,
        exit_when_idle=True,
        report=lambda *_: None,
    )
    assert finished == 6
    return ids


def test_the_absolute_threshold_empties_every_pair_and_every_listing_says_why(
    live_settings, live_service, admin_client, worked
):
    competition_id = worked[ThresholdRule.absolute]
    progress = admin_client.get(f"/api/v1/competitions/{competition_id}/progress").json()
    assert (progress["pairs_selected"], progress["pairs_total"]) == (3, 3)
    assert (progress["pairs_empty"], progress["pairs_short"]) == (3, 0)
    assert [(c["pairs_empty"], c["pairs_selected"]) for c in progress["classifiers"]] == [(2, 2)] * 3
    why = {}
    for pair in progress["pairs"]:
        found = pair["diagnosis"]
        assert (pair["selected"], pair["k"], pair["reserve"]) == (0, K, 0)
        assert found["rule"] == "absolute" and found["cutoffs"] == [0.8, 0.8]
        assert found["disagreements"] > 100 and found["confident"] == 0 and found["most_confident"] < 0.8
        survivors = {(s["rule"], s["threshold"]): s["images"] for s in found["survivors"]}
        assert survivors[("absolute", 0.8)] == 0 and survivors[("quantile", 0.8)] > 0
        assert pair["shortfall"].startswith(
            f"none of its {found['disagreements']} disagreements passes T = 0.8 (the most confident has both "
            f"probabilities ≥ {found['most_confident']:.3g}); "
        )
        assert "would give" in pair["shortfall"] and "quantile" not in pair["shortfall"]  # absolute terms
        why[(pair["classifier_a_id"], pair["classifier_b_id"])] = pair["shortfall"]

    board = admin_client.get(f"/api/v1/competitions/{competition_id}/leaderboard").json()
    assert [row["no_rank"] for row in board["classifiers"]] == [
        "all 2 of its pairs selected no image to label"
    ] * 3
    assert {(p["classifier_a_id"], p["classifier_b_id"]): p["shortfall"] for p in board["short_pairs"]} == why
    (a_id, b_id), reason = next(iter(why.items()))
    gallery = admin_client.get(f"/api/v1/competitions/{competition_id}/pairs/{b_id}/{a_id}").json()
    assert gallery["selection"]["shortfall"] == reason and gallery["selected"] == []

    text = lambda html: " ".join(html.split())  # noqa: E731
    for page in (
        f"/competitions/{competition_id}/leaderboard",
        f"/competitions/{competition_id}/pairs/{a_id}/{b_id}",
        f"/admin/competitions/{competition_id}",
    ):
        shown = text(admin_client.get(page).text).replace("&gt;", ">").replace("&#39;", "'")
        assert reason in shown, page
    board_page = text(admin_client.get(f"/competitions/{competition_id}/leaderboard").text)
    assert board_page.count("no rank</span>") == 3 and "0 of 10 selected: none of its" in board_page
    admin_page = text(admin_client.get(f"/admin/competitions/{competition_id}").text)
    assert (
        "3 of 3 (3 empty, 0 short of k)" in admin_page
        and admin_page.count("no rank: all 2 of its pairs") == 3
    )

    env = {**cli_env(live_settings), "COLUMNS": "1000"}
    report = CliRunner().invoke(cli, ["jobs", "--competition", "absolute"], env=env)
    assert report.exit_code == 0, report.output
    assert "Pairs selected: 3/3 (3 empty, 0 short of k)" in report.output
    assert all(reason in report.output for reason in why.values()), report.output
    rows = [line.replace("│", " ").split() for line in report.output.splitlines()]
    assert [row for row in rows if row[1:2] == ["ready"]] == [  # empty pairs: 2 of its 2, each
        [name, "ready", f"{N_IMAGES}/{N_IMAGES}", "2", "of", "2"] for name in CALIBRATIONS
    ]


def test_each_classifiers_own_quantile_selects_from_the_same_predictions(
    live_settings, live_service, admin_client, worked
):
    competition_id = worked[ThresholdRule.quantile]
    progress = admin_client.get(f"/api/v1/competitions/{competition_id}/progress").json()
    assert (progress["pairs_selected"], progress["pairs_empty"]) == (3, 0)
    with live_service.session() as session:
        competition = session.get_one(Competition, competition_id)
        classifiers = {
            c.id: read_predictions(settings=live_settings, classifier=c, n_images=N_IMAGES)
            for c in session.scalars(select(Classifier).where(Classifier.competition_id == competition_id))
        }
        for pair in progress["pairs"]:
            a, b = classifiers[pair["classifier_a_id"]], classifiers[pair["classifier_b_id"]]
            found = pair["diagnosis"]
            assert found["rule"] == "quantile"
            assert found["cutoffs"] == pytest.approx([np.quantile(a.prob, 0.8), np.quantile(b.prob, 0.8)])
            assert max(a.prob.max(), b.prob.max()) < 0.8  # none would pass the absolute T
            assert (
                0 < pair["selected"] == min(K, found["confident"]) and found["selected"] == pair["selected"]
            )
            expected = competition_selection(competition, a, b)
            stored = session.scalars(
                select(CompetitionImage.ordinal)
                .join(PairImage, PairImage.image_id == CompetitionImage.image_id)
                .join(PairSubset, PairSubset.id == PairImage.subset_id)
                .where(
                    CompetitionImage.competition_id == competition_id,
                    PairSubset.classifier_a_id == pair["classifier_a_id"],
                    PairSubset.classifier_b_id == pair["classifier_b_id"],
                )
                .order_by(PairImage.position)
            ).all()
            assert stored == expected.ordinals.tolist()
            assert (expected.probs_i >= found["cutoffs"][0]).all() and (
                expected.probs_j >= found["cutoffs"][1]
            ).all()
    board = admin_client.get(f"/api/v1/competitions/{competition_id}/leaderboard").json()
    assert [row["no_rank"] for row in board["classifiers"]] == [
        "no labelled image yet: of its 2 pairs, 2 wait for votes"
    ] * 3
