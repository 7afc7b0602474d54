"""The leaderboard of hand-made votes equals what the MAD core computes from the same labels."""

import csv
import io

import numpy as np
import pytest
from sqlalchemy import select

from app.core.analysis import case_shares, krcc, srcc
from app.core.ranking import count_outcomes, rank_classifiers, ranks_from_scores, scored_intervals
from app.images.models import CompetitionImage
from app.labelling.models import PairImage, PairImageRole, PairSubset
from tests.leaderboard.scenario import (
    N_CLASSES,
    annotators,
    corpus,
    digits_competition,
    register,
    run_select_jobs,
    vote,
)
from tests.support.numbers import as_served, close


def expected_outcomes(db_session, voted, classifier_ids):
    """Per pair of these classifiers (by index): (f_a right, f_b right) over its selected images that the
    third annotator labelled (only they have three concordant votes), from the truth, not from labelling."""
    index_of = {classifier_id: index for index, classifier_id in enumerate(classifier_ids)}
    ordinal_of = dict(
        db_session.execute(
            select(CompetitionImage.image_id, CompetitionImage.ordinal).where(
                CompetitionImage.competition_id == voted.competition.id
            )
        ).all()
    )
    outcomes = {}
    for subset in db_session.scalars(select(PairSubset).order_by(PairSubset.id)):
        if subset.classifier_a_id not in index_of or subset.classifier_b_id not in index_of:
            continue
        rows = db_session.scalars(
            select(PairImage)
            .where(PairImage.subset_id == subset.id, PairImage.role == PairImageRole.selected)
            .order_by(PairImage.position)
        ).all()
        labelled = [row for row in rows if row.image_id in voted.decided_images]
        right_a = np.array([voted.contains(ordinal_of[r.image_id], r.label_a) for r in labelled], dtype=bool)
        right_b = np.array([voted.contains(ordinal_of[r.image_id], r.label_b) for r in labelled], dtype=bool)
        outcomes[(index_of[subset.classifier_a_id], index_of[subset.classifier_b_id])] = (right_a, right_b)
    return outcomes


def test_the_leaderboard_of_hand_made_votes_is_what_the_core_computes(
    client, db_session, voted, admin_headers
):
    retired = client.post(f"/api/v1/classifiers/{voted.retired.id}/retire", headers=admin_headers)
    assert retired.status_code == 200 and retired.json()["status"] == "retired"
    response = client.get(f"/api/v1/competitions/{voted.competition.id}/leaderboard")
    assert response.status_code == 200
    board = response.json()

    ids = [classifier.id for classifier in voted.active]
    assert board["matrices"]["classifier_ids"] == ids
    assert [row["classifier_id"] for row in board["classifiers"]] == ids
    assert [(row["name"], row["status"]) for row in board["unranked"]] == [
        ("broken", "failed"),
        ("newcomer", "predicting"),
    ]
    assert "download refused" in board["unranked"][0]["reason"]
    assert board["unranked"][1]["reason"] == "waiting for its predictions"  # the API's English
    page = f"/competitions/{voted.competition.id}/leaderboard"
    german = client.get(page, headers={"Accept-Language": "de"}).text
    assert "<strong>newcomer</strong> (predicting): wartet auf seine Vorhersagen" in german

    counts = count_outcomes(expected_outcomes(db_session, voted, ids), len(ids))
    assert 0 < counts.n.sum() < 2 * len(ids) * (len(ids) - 1) * voted.competition.k
    ranking = rank_classifiers(counts, alpha=voted.competition.smoothing)
    intervals = scored_intervals(counts, voted.competition.smoothing, n_resamples=1000, level=0.95, seed=0)
    assert board["matrices"]["labelled"] == counts.n.tolist()
    assert close(board["matrices"]["accuracy"], ranking.accuracy)
    assert close(board["matrices"]["dominance"], ranking.dominance)
    assert board["lambda_max"] == pytest.approx(ranking.perron.lambda_max)
    assert board["consistency_index"] == pytest.approx(ranking.perron.consistency_index)
    standings = board["classifiers"]
    assert close([row["mad_score"] for row in standings], ranking.perron.scores)
    assert [row["mad_rank"] for row in standings] == as_served(ranking.ranks)
    assert close([row["score_low"] for row in standings], intervals.score_low)
    assert close([row["score_high"] for row in standings], intervals.score_high)
    assert [row["rank_low"] for row in standings] == as_served(intervals.rank_low)
    assert [row["rank_high"] for row in standings] == as_served(intervals.rank_high)
    assert [row["hodge_rank"] for row in standings] == as_served(ranking.ranks_of(ranking.hodge))
    assert [row["bradley_terry_rank"] for row in standings] == as_served(
        ranking.ranks_of(ranking.bradley_terry)
    )
    assert [row["win_rate_rank"] for row in standings] == as_served(ranking.ranks_of(ranking.win_rate))
    assert [row["labelled_images"] for row in standings] == counts.n.sum(axis=1).tolist()
    assert all(row["provisional"] for row in standings)  # k = 6 < 15 labelled images per pair

    shares = case_shares(counts)
    assert board["case_shares"] == pytest.approx(
        {
            "case_i": shares.case_i,
            "case_ii": shares.case_ii,
            "case_iii": shares.case_iii,
            "images": shares.images,
        }
    )
    assert shares.case_i > 0 and shares.case_ii > 0

    reporting = [0, 1, 3]  # gamma reports no accuracy
    accuracy_ranks = ranks_from_scores([voted.active[i].reported_accuracy for i in reporting])
    mad_ranks = ranks_from_scores(ranking.perron.scores[reporting])
    assert accuracy_ranks.tolist() == [1, 3, 2]
    assert [standings[i]["accuracy_rank"] for i in reporting] == accuracy_ranks.tolist()
    assert [standings[i]["delta_rank"] for i in reporting] == (accuracy_ranks - mad_ranks).tolist()
    assert standings[2]["accuracy_rank"] is None and standings[2]["delta_rank"] is None
    assert board["correlated_classifiers"] == 3
    assert board["srcc"] == pytest.approx(srcc(mad_ranks, accuracy_ranks))
    assert board["krcc"] == pytest.approx(krcc(mad_ranks, accuracy_ranks))

    again = client.get(f"/api/v1/competitions/{voted.competition.id}/leaderboard").json()
    assert again == board


def csv_rows(client, url: str, **params) -> list[dict]:
    """A CSV table of the leaderboard as dicts of strings."""
    response = client.get(url, params={"format": "csv", **params})
    assert response.status_code == 200 and response.headers["content-type"].startswith("text/csv")
    return list(csv.DictReader(io.StringIO(response.text)))


def number(text: str) -> float | None:
    """A CSV number (empty = null)."""
    return None if text == "" else float(text)


def test_every_number_of_the_json_leaderboard_is_in_a_csv_table(client, voted):
    url = f"/api/v1/competitions/{voted.competition.id}/leaderboard"
    board = client.get(url).json()
    by_accept = client.get(url, headers={"Accept": "text/csv"})
    assert by_accept.text == client.get(url, params={"format": "csv", "table": "classifiers"}).text
    assert "leaderboard-classifiers.csv" in by_accept.headers["content-disposition"]

    rows = csv_rows(client, url)
    assert [int(row["classifier_id"]) for row in rows] == [s["classifier_id"] for s in board["classifiers"]]
    for row, standing in zip(rows, board["classifiers"], strict=True):
        assert set(row) == set(standing)
        for key, value in standing.items():
            if isinstance(value, bool):
                assert row[key] == str(value)
            elif isinstance(value, int | float) or value is None:
                assert number(row[key]) == value
            else:
                assert row[key] == value

    ids = board["matrices"]["classifier_ids"]
    pairs = csv_rows(client, url, table="pairs")
    assert [(int(row["classifier_i_id"]), int(row["classifier_j_id"])) for row in pairs] == [
        (i, j) for i in ids for j in ids
    ]
    m = len(ids)
    for key, matrix in (("a_ij", "accuracy"), ("b_ij", "dominance"), ("n_ij", "labelled")):
        rebuilt = np.array([number(row[key]) for row in pairs]).reshape(m, m)
        assert rebuilt.tolist() == board["matrices"][matrix]
    names = {s["classifier_id"]: s["name"] for s in board["classifiers"]}
    assert all(row["classifier_i"] == names[int(row["classifier_i_id"])] for row in pairs)

    (summary,) = csv_rows(client, url, table="summary")
    shares, bootstrap = board["case_shares"], board["bootstrap"]
    expected = {
        "competition_id": board["competition_id"],
        "smoothing": board["smoothing"],
        "classifiers": m,
        "lambda_max": board["lambda_max"],
        "consistency_index": board["consistency_index"],
        "srcc": board["srcc"],
        "krcc": board["krcc"],
        "correlated_classifiers": board["correlated_classifiers"],
        "case_i": shares["case_i"],
        "case_ii": shares["case_ii"],
        "case_iii": shares["case_iii"],
        "labelled_pair_images": shares["images"],
        "bootstrap_resamples": bootstrap["n_resamples"],
        "bootstrap_level": bootstrap["level"],
        "bootstrap_seed": bootstrap["seed"],
    }
    assert {key: number(summary[key]) for key in expected} == expected
    assert summary["competition_name"] == board["competition_name"]
    assert set(summary) == {*expected, "competition_name"}

    refused = client.get(url, params={"table": "pairs"})
    assert refused.status_code == 422 and "format=csv" in refused.json()["detail"]
    assert client.get(url, params={"format": "csv", "table": "nope"}).status_code == 422
    parameters = client.get("/openapi.json").json()["paths"][
        "/api/v1/competitions/{competition_id}/leaderboard"
    ]
    (table,) = [p for p in parameters["get"]["parameters"] if p["name"] == "table"]
    assert "pairs" in str(table["schema"]) and "long form" in table["description"]


def test_an_empty_competition_and_a_lone_classifier_have_a_leaderboard(
    client, db_session, settings, tmp_path
):
    competition = digits_competition(db_session, name="lonely")
    hashes = corpus(db_session, settings, competition, 5)
    db_session.commit()
    url = f"/api/v1/competitions/{competition.id}/leaderboard"
    empty = client.get(url).json()
    assert empty["classifiers"] == [] and empty["lambda_max"] is None and empty["case_shares"]["images"] == 0
    register(
        db_session, settings, competition, tmp_path, "solo", hashes, np.arange(5), reported_accuracy=70.0
    )
    board = client.get(url).json()
    (solo,) = board["classifiers"]
    assert (solo["mad_rank"], solo["mad_score"], solo["provisional"]) == (None, None, True)
    assert solo["no_rank"] == "no other classifier to compare it with"
    assert (solo["accuracy_rank"], solo["delta_rank"]) == (None, None)  # nothing labelled, nothing compared
    assert [entry["name"] for entry in board["unranked"]] == ["solo"]
    assert (board["lambda_max"], board["matrices"]["accuracy"]) == (None, [[None]])
    german = client.get(f"/competitions/{competition.id}/leaderboard", headers={"Accept-Language": "de"}).text
    assert (
        "Noch kein Rang für solo (kein anderer Klassifikator, mit dem er verglichen werden kann)." in german
    )


def off_by(truth: np.ndarray, accuracy: float, shift: int, seed: int) -> np.ndarray:
    """Top-1 labels equal to the truth with probability `accuracy`, else the digit `shift` above it."""
    right = np.random.default_rng(seed).random(len(truth)) < accuracy
    return np.where(right, truth, (truth + shift) % N_CLASSES)


def three_classifiers(db_session, settings, tmp_path, name: str):
    """A digits competition of 40 images and three classifiers (with reported accuracies) that are right or
    wrong by one digit, their pairs selected; its id, image hashes and true digits."""
    competition = digits_competition(db_session, name=name)
    hashes = corpus(db_session, settings, competition, 40)
    db_session.commit()
    truth = np.random.default_rng(3).integers(0, N_CLASSES, 40)
    for seed, (classifier, accuracy, reported) in enumerate(
        (("alpha", 0.8, 80.0), ("beta", 0.5, 70.0), ("gamma", 0.3, 60.0))
    ):
        register(
            db_session,
            settings,
            competition,
            tmp_path,
            classifier,
            hashes,
            off_by(truth, accuracy, 1, seed),
            reported,
            seed,
        )
    run_select_jobs(db_session, settings)
    return competition, hashes, truth


def test_without_labels_no_classifier_claims_a_rank(client, db_session, settings, tmp_path):
    """No label at all: no rank, score or interval, every classifier provisional and listed as unranked,
    Δrank and the correlations wait, and each pair says how many annotators it waits for; one annotator's
    answers bring that down by one."""
    competition, hashes, truth = three_classifiers(db_session, settings, tmp_path, "unlabelled")
    url = f"/api/v1/competitions/{competition.id}/leaderboard"

    board = client.get(url).json()
    m = len(board["classifiers"])
    for row in board["classifiers"]:
        assert (row["rank_low"], row["rank_high"], row["provisional"]) == (None, None, True)
        assert (row["score_low"], row["score_high"]) == (None, None)
        ranks = [row[key] for key in ("mad_rank", "hodge_rank", "bradley_terry_rank", "win_rate_rank")]
        assert ranks == [None] * 4
        assert (row["accuracy_rank"], row["delta_rank"], row["labelled_images"]) == (None, None, 0)
        assert row["no_rank"] == "no labelled image yet: of its 2 pairs, 2 wait for votes"
    assert [entry["name"] for entry in board["unranked"]] == ["alpha", "beta", "gamma"]
    assert (board["srcc"], board["krcc"], board["correlated_classifiers"]) == (None, None, 0)
    assert board["panel_size"] == 5
    waiting = board["pairs_without_labels"]
    assert len(waiting) == m * (m - 1) // 2
    assert all(pair["selected"] and pair["annotators_needed"] == 3 for pair in waiting)  # 3 of 5 agree

    (voter,) = annotators(db_session, 1)
    vote(db_session, competition, [voter], lambda ordinal, c: c == truth[ordinal], hashes, limit=3)
    needed = [pair["annotators_needed"] for pair in client.get(url).json()["pairs_without_labels"]]
    assert len(needed) == m * (m - 1) // 2 and min(needed) == 2 and set(needed) <= {2, 3}

    page = client.get(f"/competitions/{competition.id}/leaderboard").text
    assert page.count('data-label="Rank interval">—</td>') == m and page.count(">no labels yet</td>") == m
    text = " ".join(page.split())
    assert f"No labels yet for {m} of {m} pairs: alpha vs beta (" in text
    assert all(f"{count} more annotators needed" in text for count in needed)
    assert "a question is decided once 3 of a panel of 5 annotators agree" in text
    spanish = client.get(
        f"/competitions/{competition.id}/leaderboard", headers={"Accept-Language": "es"}
    ).text
    assert spanish.count('title="aún ninguna imagen etiquetada: de sus 2 pares, 2 esperan votos"') == m


def test_a_classifier_added_later_has_no_rank_until_it_has_labels(client, db_session, settings, tmp_path):
    """It used to be ranked 2 with the interval 2–2, above classifiers with labels, from b = 1 alone, and
    then 4 of 4. Its labels (three digits above the truth) were never asked about, so none of its images is
    labelled: it has no rank, and the others are ranked among themselves."""
    competition, hashes, truth = three_classifiers(db_session, settings, tmp_path, "later")
    vote(db_session, competition, annotators(db_session, 3), lambda o, c: c == truth[o], hashes)
    late = register(
        db_session, settings, competition, tmp_path, "late", hashes, (truth + 3) % N_CLASSES, 99.0, seed=9
    )
    run_select_jobs(db_session, settings)
    board = client.get(f"/api/v1/competitions/{competition.id}/leaderboard").json()
    standings = {row["name"]: row for row in board["classifiers"]}
    row = standings["late"]
    assert (row["mad_rank"], row["rank_low"], row["rank_high"], row["provisional"]) == (
        None,
        None,
        None,
        True,
    )
    assert [(entry["name"], entry["reason"]) for entry in board["unranked"]] == [("late", row["no_rank"])]
    assert (row["labelled_images"], row["accuracy_rank"], row["delta_rank"]) == (0, None, None)
    assert [standings[name]["mad_rank"] for name in ("alpha", "beta", "gamma")] == [1, 2, 3]
    assert all(standings[name]["rank_high"] <= 3 for name in ("alpha", "beta", "gamma"))
    assert board["correlated_classifiers"] == 3 and board["srcc"] == pytest.approx(1.0)
    waiting = board["pairs_without_labels"]
    assert sorted(pair["classifier_a_id"] for pair in waiting) == sorted(
        standings[name]["classifier_id"] for name in ("alpha", "beta", "gamma")
    )
    assert all(pair["classifier_b_id"] == late.id and pair["annotators_needed"] == 3 for pair in waiting)
