"""Snapshots stay frozen while votes arrive; a classifier's analysis agrees with the core's metrics."""

import numpy as np
import pytest
from sqlalchemy import select

from app.classifiers.service import read_predictions
from app.competitions.service import competition_taxonomy
from app.core.analysis import c_perplexity, ranking_stability, worst_classes, worst_superclasses
from app.labelling.models import PairImage, PairImageRole, PairSubset, Question
from app.leaderboard.standings import ranked_pairs
from tests.leaderboard.scenario import annotators, vote


def test_a_snapshot_keeps_its_numbers_while_the_live_leaderboard_moves(
    client, db_session, voted, admin_headers, annotator_headers
):
    competition_id = voted.competition.id
    url = f"/api/v1/competitions/{competition_id}/snapshots"
    assert client.post(url, json={"note": "first"}, headers=annotator_headers).status_code == 403
    frozen_board = client.get(f"/api/v1/competitions/{competition_id}/leaderboard").json()
    created = client.post(url, json={"note": "first"}, headers=admin_headers)
    assert created.status_code == 201
    snapshot = created.json()
    assert (snapshot["slug"], snapshot["created_by"], snapshot["note"]) == ("digits-1", "admin", "first")
    assert snapshot["url"] == "/leaderboards/digits-1"

    vote(db_session, voted.competition, annotators(db_session, 1, "late"), voted.contains, voted.hashes)
    live = client.get(f"/api/v1/competitions/{competition_id}/leaderboard").json()
    assert live["case_shares"]["images"] > frozen_board["case_shares"]["images"]

    stored = client.get("/api/v1/leaderboards/digits-1").json()
    assert stored["leaderboard"] == frozen_board
    assert client.post(url, json={}, headers=admin_headers).json()["slug"] == "digits-2"
    listed = client.get(url).json()
    assert [s["slug"] for s in listed] == ["digits-2", "digits-1"]
    assert client.get("/api/v1/leaderboards/digits-2").json()["leaderboard"] == live
    assert client.get("/api/v1/leaderboards/nope-1").status_code == 404


def own_decided_predictions(db_session, voted, classifier_id):
    """(label, correct) of the classifier on its pairs' images whose question on its label is decided, among
    the images with no open question (the others' predictions are not public yet)."""
    rows = db_session.execute(
        select(PairImage.image_id, PairImage.label_a, PairImage.label_b, PairSubset.classifier_a_id)
        .join(PairSubset, PairSubset.id == PairImage.subset_id)
        .where(
            (PairSubset.classifier_a_id == classifier_id) | (PairSubset.classifier_b_id == classifier_id),
            PairImage.role == PairImageRole.selected,
        )
    ).all()
    outcome = dict(
        ((image_id, class_index), decided)
        for image_id, class_index, decided in db_session.execute(
            select(Question.image_id, Question.class_index, Question.outcome).where(
                Question.outcome.is_not(None)
            )
        )
    )
    labels = {
        image_id: (label_a if a_id == classifier_id else label_b) for image_id, label_a, label_b, a_id in rows
    }
    still_open = set(db_session.scalars(select(Question.image_id).where(Question.outcome.is_(None))))
    return [
        (label, outcome[(image_id, label)])
        for image_id, label in labels.items()
        if (image_id, label) in outcome and image_id not in still_open
    ]


def test_a_classifiers_analysis_agrees_with_the_core(client, db_session, settings, voted):
    # a third vote on every image decides them all: alpha then has 12 labelled "round" predictions, enough
    # support (10) for its superclasses to be ranked
    vote(db_session, voted.competition, annotators(db_session, 1, "late"), voted.contains, voted.hashes)
    classifier = voted.active[0]
    analysis = client.get(f"/api/v1/classifiers/{classifier.id}/analysis").json()
    judged = own_decided_predictions(db_session, voted, classifier.id)
    assert analysis["labelled_predictions"] == len(judged)
    taxonomy = competition_taxonomy(voted.competition)
    predicted = np.array([label for label, _ in judged])
    correct = np.array([right for _, right in judged])
    (worst,) = worst_classes(taxonomy, predicted, correct, min_support=analysis["min_class_support"])
    assert (analysis["worst_classes"][0]["key"], analysis["worst_classes"][0]["precision"]) == (
        worst.key,
        pytest.approx(worst.precision),
    )
    precisions = [group["precision"] for group in analysis["worst_classes"]]
    assert precisions == sorted(precisions)
    (worst_group,) = worst_superclasses(
        taxonomy, predicted, correct, min_support=analysis["min_superclass_support"]
    )
    assert analysis["worst_superclasses"]
    first = analysis["worst_superclasses"][0]
    assert (first["key"], first["name"], first["precision"], first["support"]) == (
        worst_group.key,
        worst_group.name,
        pytest.approx(worst_group.precision),
        worst_group.support,
    )
    assert {group["key"] for group in analysis["worst_superclasses"]} <= {"round", "straight"}

    images = analysis["perplexing_images"]
    assert images and [i["c_perplexity"] for i in images] == sorted(
        (i["c_perplexity"] for i in images), reverse=True
    )
    ordinal = voted.hashes.index(images[0]["image_sha256"])
    entropies = [
        read_predictions(settings=settings, classifier=c, n_images=len(voted.hashes)).entropy_bits[ordinal]
        for c in voted.active + [voted.retired]
    ]
    assert images[0]["c_perplexity"] == pytest.approx(
        float(c_perplexity(np.array(entropies)[:, None])[0]), rel=1e-5
    )

    pairs = ranked_pairs(db_session=db_session, competition=voted.competition)
    curve = ranking_stability(pairs.outcomes, len(pairs.classifiers), k=voted.competition.k)
    assert analysis["stability"]["k_prime"] == curve.k_prime.tolist()
    assert analysis["stability"]["srcc"] == pytest.approx([None if np.isnan(v) else v for v in curve.srcc])
