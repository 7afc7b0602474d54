"""Exports: every format carries the same rows, and the leaderboard is recomputed from them with the core."""

import csv
import io
import json
from contextlib import nullcontext

import numpy as np
import pyarrow.parquet as pq
import pytest

from app.core.ranking import bootstrap_perron, count_outcomes, rank_classifiers
from app.labelling import rules
from app.leaderboard.router import export_sessions

FORMATS = ("csv", "parquet", "jsonl")


@pytest.fixture
def exporting(app, client, db_session):
    """The client, with exports reading through the test's transaction (they open their own sessions)."""
    app.dependency_overrides[export_sessions] = lambda: lambda: nullcontext(db_session)
    return client


def fetch(client, competition_id: int, table: str, export_format: str, headers=None) -> list[dict]:
    """An export's rows as dicts (CSV: strings; empty = null)."""
    response = client.get(
        f"/api/v1/competitions/{competition_id}/exports/{table}",
        params={"format": export_format},
        headers=headers,
    )
    assert response.status_code == 200, response.text
    assert f"{table}.{export_format}" in response.headers["content-disposition"]
    if export_format == "parquet":
        return pq.read_table(io.BytesIO(response.content)).to_pylist()
    if export_format == "jsonl":
        return [json.loads(line) for line in response.text.splitlines()]
    return list(csv.DictReader(io.StringIO(response.text)))


def test_the_leaderboard_is_recomputed_from_the_exports(exporting, voted, admin_headers):
    competition_id = voted.competition.id
    exporting.post(f"/api/v1/classifiers/{voted.retired.id}/retire", headers=admin_headers)
    board = exporting.get(f"/api/v1/competitions/{competition_id}/leaderboard").json()
    competition = exporting.get(f"/api/v1/competitions/{competition_id}").json()
    classifiers = exporting.get(f"/api/v1/competitions/{competition_id}/classifiers").json()
    subsets = fetch(exporting, competition_id, "subsets", "parquet", admin_headers)

    with_subset = {row["classifier_a_id"] for row in subsets} | {row["classifier_b_id"] for row in subsets}
    ranked = [
        c["id"]
        for c in classifiers
        if c["status"] not in ("failed", "retired") and (c["status"] == "ready" or c["id"] in with_subset)
    ]
    assert ranked == board["matrices"]["classifier_ids"]
    index_of = {classifier_id: index for index, classifier_id in enumerate(ranked)}
    labels: dict[tuple[int, int], list[tuple[bool, bool]]] = {}
    for row in subsets:
        a, b = index_of.get(row["classifier_a_id"]), index_of.get(row["classifier_b_id"])
        if a is None or b is None:
            continue
        labels.setdefault((a, b), [])
        if row["role"] == "selected" and row["outcome_a"] is not None and row["outcome_b"] is not None:
            labels[(a, b)].append((row["outcome_a"], row["outcome_b"]))
    outcomes = {pair: tuple(np.array(rows, dtype=bool).reshape(-1, 2).T) for pair, rows in labels.items()}
    counts = count_outcomes(outcomes, len(ranked))
    ranking = rank_classifiers(counts, alpha=competition["smoothing"])
    intervals = bootstrap_perron(counts, competition["smoothing"], **board["bootstrap"])

    assert board["matrices"]["labelled"] == counts.n.tolist()
    assert np.allclose(board["matrices"]["accuracy"], ranking.accuracy)
    assert np.allclose([row["mad_score"] for row in board["classifiers"]], ranking.perron.scores)
    assert [row["mad_rank"] for row in board["classifiers"]] == ranking.ranks.tolist()
    assert [row["rank_low"] for row in board["classifiers"]] == intervals.rank_low.tolist()
    assert [row["rank_high"] for row in board["classifiers"]] == intervals.rank_high.tolist()
    assert board["lambda_max"] == pytest.approx(ranking.perron.lambda_max)


def test_votes_reproduce_the_question_outcomes(exporting, voted, admin_headers):
    competition_id = voted.competition.id
    votes = fetch(exporting, competition_id, "votes", "parquet", admin_headers)
    questions = fetch(exporting, competition_id, "questions", "parquet", admin_headers)
    tally: dict[int, list[int]] = {}
    for row in votes:
        if row["counted"]:
            tally.setdefault(row["question_id"], [0, 0])[0 if row["answer"] else 1] += 1
    assert questions and any(q["outcome"] is None for q in questions)
    for question in questions:
        yes, no = tally.get(question["question_id"], (0, 0))
        assert (question["yes_votes"], question["no_votes"]) == (yes, no)
        assert question["outcome"] == rules.outcome(yes, no, voted.competition.panel_size)


@pytest.mark.parametrize("table", ["subsets", "predictions", "votes", "questions"])
def test_every_format_carries_the_same_rows(exporting, voted, admin_headers, table):
    by_format = {f: fetch(exporting, voted.competition.id, table, f, admin_headers) for f in FORMATS}
    reference = by_format["parquet"]
    assert reference
    assert by_format["jsonl"] == [
        {key: (value.isoformat() if hasattr(value, "isoformat") else value) for key, value in row.items()}
        for row in reference
    ]
    assert len(by_format["csv"]) == len(reference)
    assert list(by_format["csv"][0]) == list(reference[0])
    for csv_row, row in zip(by_format["csv"], reference, strict=True):
        for key, value in row.items():
            if isinstance(value, bool):
                assert csv_row[key] == str(value).lower()
            elif value is None:
                assert csv_row[key] == ""
            elif isinstance(value, int | str):
                assert csv_row[key] == str(value)


def test_predictions_export_has_every_classifiers_top1(exporting, voted, admin_headers):
    rows = fetch(exporting, voted.competition.id, "predictions", "parquet", admin_headers)
    for classifier_id, top1 in voted.top1.items():
        mine = [row for row in rows if row["classifier_id"] == classifier_id]
        assert [row["ordinal"] for row in mine] == list(range(len(voted.hashes)))
        assert [row["top1"] for row in mine] == top1.tolist()
        assert [row["image_sha256"] for row in mine] == voted.hashes


def test_every_export_is_for_admins_only(exporting, voted, annotator_headers):
    # subsets and predictions name each model's label on images still being labelled
    for table in ("votes", "questions", "subsets", "predictions"):
        url = f"/api/v1/competitions/{voted.competition.id}/exports/{table}"
        assert exporting.get(url).status_code == 401
        assert exporting.get(url, headers=annotator_headers).status_code == 403
