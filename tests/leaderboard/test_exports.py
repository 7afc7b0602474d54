"""Exports: every format carries the same rows, and the leaderboard is recomputed from them with the core."""

import csv
import io
import json
import math
from contextlib import nullcontext
from datetime import UTC, datetime

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from sqlalchemy import select

from app.core.analysis import case_shares, krcc, ranking_stability, srcc
from app.core.ranking import (
    count_outcomes,
    rank_classifiers,
    ranks_from_scores,
    ranks_of_known,
    scored_intervals,
    scored_perron,
)
from app.images.models import Image
from app.labelling import rules
from app.leaderboard.exports import TABLES
from app.leaderboard.router import export_sessions
from app.leaderboard.standings import PROVISIONAL_RANK_SPREAD, STABLE_K
from tests.support.numbers import as_served, close

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


def utc(value) -> datetime:
    """An API or export timestamp (ISO text or datetime) as an aware UTC datetime."""
    moment = datetime.fromisoformat(value) if isinstance(value, str) else value
    return moment.astimezone(UTC)


def export_labels(subsets: list[dict], questions: list[dict], ranked: list[int]) -> list[tuple]:
    """(labelled_at, a_index, b_index, a right, b right) of each selected pair image of two ranked classifiers
    with both questions decided, in export order (pair, then position); labelled_at is the later of its two
    decisions and its pair's selection, as the history counts it."""
    index_of = {classifier_id: index for index, classifier_id in enumerate(ranked)}
    decided_at = {(q["image_sha256"], q["class_index"]): q["decided_at"] for q in questions}
    return [
        (
            max(
                utc(decided_at[(row["image_sha256"], row["label_a"])]),
                utc(decided_at[(row["image_sha256"], row["label_b"])]),
                utc(row["subset_created_at"]),
            ),
            index_of[row["classifier_a_id"]],
            index_of[row["classifier_b_id"]],
            row["outcome_a"],
            row["outcome_b"],
        )
        for row in subsets
        if row["classifier_a_id"] in index_of
        and row["classifier_b_id"] in index_of
        and row["role"] == "selected"
        and row["outcome_a"] is not None
        and row["outcome_b"] is not None
    ]


def pair_outcomes_of(labels: list[tuple], pairs: set[tuple[int, int]]) -> dict:
    """The core's per-pair outcome arrays from export_labels rows (every stored pair, even unlabelled)."""
    by_pair: dict[tuple[int, int], list[tuple[bool, bool]]] = {pair: [] for pair in pairs}
    for _, a, b, right_a, right_b in labels:
        by_pair[(a, b)].append((right_a, right_b))
    return {pair: tuple(np.array(rows, dtype=bool).reshape(-1, 2).T) for pair, rows in by_pair.items()}


def test_every_leaderboard_number_is_recomputed_from_the_exports(exporting, voted, admin_headers):
    competition_id = voted.competition.id
    exporting.post(f"/api/v1/classifiers/{voted.retired.id}/retire", headers=admin_headers)
    board = exporting.get(f"/api/v1/competitions/{competition_id}/leaderboard").json()
    history = exporting.get(f"/api/v1/competitions/{competition_id}/leaderboard/history").json()
    competition = exporting.get(f"/api/v1/competitions/{competition_id}").json()
    classifiers = exporting.get(f"/api/v1/competitions/{competition_id}/classifiers").json()
    subsets = fetch(exporting, competition_id, "subsets", "parquet", admin_headers)
    questions = fetch(exporting, competition_id, "questions", "parquet", admin_headers)
    alpha = competition["smoothing"]

    with_subset = {row["classifier_a_id"] for row in subsets} | {row["classifier_b_id"] for row in subsets}
    ranked = [
        c
        for c in classifiers
        if c["status"] not in ("failed", "retired") and (c["status"] == "ready" or c["id"] in with_subset)
    ]
    ids = [c["id"] for c in ranked]
    assert ids == board["matrices"]["classifier_ids"] and len(ids) == 4
    index_of = {classifier_id: index for index, classifier_id in enumerate(ids)}
    pairs = {
        (index_of[row["classifier_a_id"]], index_of[row["classifier_b_id"]])
        for row in subsets
        if row["classifier_a_id"] in index_of and row["classifier_b_id"] in index_of
    }
    labels = export_labels(subsets, questions, ids)
    counts = count_outcomes(pair_outcomes_of(labels, pairs), len(ids))
    ranking = rank_classifiers(counts, alpha)
    intervals = scored_intervals(counts, alpha, **board["bootstrap"])
    standings = board["classifiers"]

    def column(name: str) -> list:
        return [row[name] for row in standings]

    assert board["smoothing"] == alpha and board["matrices"]["labelled"] == counts.n.tolist()
    assert close(board["matrices"]["accuracy"], ranking.accuracy)
    assert close(board["matrices"]["dominance"], ranking.dominance)
    assert board["lambda_max"] == pytest.approx(ranking.perron.lambda_max)
    assert board["consistency_index"] == pytest.approx(ranking.perron.consistency_index)
    assert close(column("mad_score"), ranking.perron.scores)
    assert column("mad_rank") == as_served(ranking.ranks)
    assert close(column("score_low"), intervals.score_low)
    assert close(column("score_high"), intervals.score_high)
    assert column("rank_low") == as_served(intervals.rank_low)
    assert column("rank_high") == as_served(intervals.rank_high)
    assert close(column("hodge_score"), ranking.hodge)
    assert column("hodge_rank") == as_served(ranking.ranks_of(ranking.hodge))
    assert close(column("bradley_terry_score"), ranking.bradley_terry)
    assert column("bradley_terry_rank") == as_served(ranking.ranks_of(ranking.bradley_terry))
    assert close(column("win_rate"), ranking.win_rate)
    assert column("win_rate_rank") == as_served(ranking.ranks_of(ranking.win_rate))
    assert column("labelled_images") == counts.n.sum(axis=1).tolist()
    fewest = np.where(np.eye(len(ids), dtype=bool), counts.n.max() + 1, counts.n).min(axis=1)
    assert column("fewest_labelled_in_a_pair") == fewest.tolist()
    spread = intervals.rank_high - intervals.rank_low
    settled_with = min(competition["k"], STABLE_K)
    unsettled = ~ranking.scored | (spread > PROVISIONAL_RANK_SPREAD) | (fewest < settled_with)
    assert column("provisional") == unsettled.tolist()

    shares = case_shares(counts)
    assert board["case_shares"] == pytest.approx(
        {
            "case_i": shares.case_i,
            "case_ii": shares.case_ii,
            "case_iii": shares.case_iii,
            "images": shares.images,
        }
    )

    reporting = [  # Δrank and the correlations compare only classifiers with labels
        i for i, c in enumerate(ranked) if c["reported_accuracy"] is not None and ranking.scored[i]
    ]
    assert 2 <= len(reporting) < len(ranked)
    accuracy_ranks = ranks_from_scores([ranked[i]["reported_accuracy"] for i in reporting])
    mad_ranks = ranks_from_scores(ranking.perron.scores[reporting])
    assert column("reported_accuracy") == [c["reported_accuracy"] for c in ranked]
    expected_accuracy_rank = dict(zip(reporting, accuracy_ranks.tolist(), strict=True))
    expected_delta = dict(zip(reporting, (accuracy_ranks - mad_ranks).tolist(), strict=True))
    assert column("accuracy_rank") == [expected_accuracy_rank.get(i) for i in range(len(ids))]
    assert column("delta_rank") == [expected_delta.get(i) for i in range(len(ids))]
    assert board["correlated_classifiers"] == len(reporting)
    assert board["srcc"] == pytest.approx(srcc(mad_ranks, accuracy_ranks))
    assert board["krcc"] == pytest.approx(krcc(mad_ranks, accuracy_ranks))

    replay = sorted(labels, key=lambda label: label[0])  # stable: ties keep export order, as the service
    cuts = np.unique(np.linspace(1, len(replay), min(len(replay), 24)).round().astype(int))
    assert len(history["points"]) == len(cuts) >= 2
    for point, cut in zip(history["points"], cuts, strict=True):
        as_of = replay[cut - 1][0]
        present = [i for i, c in enumerate(ranked) if utc(c["created_at"]) <= as_of]
        local = {i: position for position, i in enumerate(present)}
        kept = [
            (at, local[a], local[b], ra, rb) for at, a, b, ra, rb in replay[:cut] if a in local and b in local
        ]
        by_pair = pair_outcomes_of(kept, {(a, b) for _, a, b, _, _ in kept})
        point_counts = count_outcomes(by_pair, len(present))
        scores = scored_perron(point_counts, alpha).scores
        assert (utc(point["as_of"]), point["labelled_images"]) == (as_of, int(cut))
        assert point["classifier_ids"] == [ids[i] for i in present]
        assert close(point["mad_scores"], scores)
        assert point["mad_ranks"] == as_served(ranks_of_known(scores))

    analysis = exporting.get(f"/api/v1/classifiers/{ids[0]}/analysis").json()
    curve = ranking_stability(pair_outcomes_of(labels, pairs), len(ids), k=competition["k"], alpha=alpha)
    assert analysis["stability"]["k_prime"] == curve.k_prime.tolist()
    assert analysis["stability"]["srcc"] == pytest.approx([None if np.isnan(v) else v for v in curve.srcc])


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
    schema = TABLES[table].schema
    compared = set()
    for csv_row, row in zip(by_format["csv"], reference, strict=True):
        for key, value in row.items():
            assert csv_value(csv_row[key], schema.field(key).type) == value or both_nan(csv_row[key], value)
            compared.add((key, type(value)))
    assert {key for key, kind in compared if kind is float} == {
        field.name for field in schema if pa.types.is_floating(field.type)
    }


def csv_value(text: str, kind: pa.DataType):
    """A CSV field read back as the export's column type (empty = null; float32 widened as Parquet does)."""
    if text == "":
        return None
    if pa.types.is_boolean(kind):
        return {"true": True, "false": False}[text]
    if pa.types.is_integer(kind):
        return int(text)
    if pa.types.is_float32(kind):
        return float(np.float32(text))
    if pa.types.is_floating(kind):
        return float(text)
    if pa.types.is_timestamp(kind):
        return datetime.fromisoformat(text)
    assert pa.types.is_string(kind), kind
    return text


def both_nan(text: str, value) -> bool:
    """A float column's NaN, written as nan in CSV."""
    return isinstance(value, float) and math.isnan(value) and text == "nan"


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


def test_the_subsets_export_carries_each_image_provenance(exporting, voted, admin_headers, db_session):
    subsets = fetch(exporting, voted.competition.id, "subsets", "csv", admin_headers)
    image = db_session.scalar(select(Image).where(Image.sha256 == subsets[0]["image_sha256"]))
    image.source_uri, image.source_url, image.license, image.author = (
        "s3://corpus/x.jpg",
        "https://example.org/x",
        "CC BY 4.0",
        "Ada",
    )
    db_session.flush()
    for export_format in FORMATS:
        rows = fetch(exporting, voted.competition.id, "subsets", export_format, admin_headers)
        row = next(row for row in rows if row["image_sha256"] == image.sha256)
        assert (
            row["image_source_uri"],
            row["image_source_url"],
            row["image_license"],
            row["image_author"],
        ) == (
            "s3://corpus/x.jpg",
            "https://example.org/x",
            "CC BY 4.0",
            "Ada",
        )
