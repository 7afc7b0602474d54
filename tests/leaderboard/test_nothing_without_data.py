"""A classifier without any labelled image has no rank and no score anywhere (issue 34): the JSON, the
page, the CSV tables and the release bundle give null or leave it blank, λmax and the consistency index
are absent while no pair has labels, and a pair without labels has no a_ij. The JSON used to give every
classifier of an all-empty competition mad_rank 1, win_rate 0.5 and 0.5 in every cell of A; the page
showed Hodge 1, BT 1, Win "1 (50%)", λmax 3.0000. A partly labelled competition ranks the classifiers with
labels among themselves."""

import csv
import io
import re
from dataclasses import dataclass

import numpy as np
import pyarrow.parquet as pq
import pytest

from app.classifiers.models import Classifier
from app.competitions.models import Competition
from app.competitions.schemas import CompetitionCreate
from app.competitions.service import create_competition
from tests.leaderboard.scenario import DIGITS, N_CLASSES, annotators, corpus, register, run_select_jobs, vote
from tests.leaderboard.test_leaderboard import off_by
from tests.release.test_release import release

N_IMAGES = 40
TIMID = (0.1, 0.4)
"""Top-1 probabilities of a classifier never more than 40% sure: below T = 0.5 on every image."""
NO_NUMBER = (
    *("mad_score", "mad_rank", "score_low", "score_high", "rank_low", "rank_high", "hodge_score"),
    *("hodge_rank", "bradley_terry_score", "bradley_terry_rank", "win_rate", "win_rate_rank"),
    *("accuracy_rank", "mad_rank_among_reported", "delta_rank"),
)
"""Every rank and score of a standing: null for a classifier without labels."""
RANK_CELLS = ("Perron score", "Rank interval", "HodgeRank", "Bradley–Terry", "Win rate rank", "Δrank")


@dataclass
class Built:
    """A competition at T = 0.5 whose `empty` classifiers are too timid for any pair of theirs to select
    an image; the others (if any) are confident, and their pairs are labelled by three annotators."""

    competition: Competition
    confident: list[Classifier]
    empty: list[Classifier]


def build(db_session, settings, tmp_path, name: str, confident: int, empty: int) -> Built:
    """`confident` classifiers right 80%, 50%, 30% of the time and `empty` timid ones, all with reported
    accuracies; every pair selected and voted."""
    competition = create_competition(
        db_session=db_session,
        spec=CompetitionCreate(
            name=name, taxonomy="custom", taxonomy_source=DIGITS, k=6, confidence_threshold=0.5
        ),
    )
    hashes = corpus(db_session, settings, competition, N_IMAGES)
    db_session.commit()
    truth = np.random.default_rng(3).integers(0, N_CLASSES, N_IMAGES)
    specs = (("alpha", 0.8), ("beta", 0.5), ("gamma", 0.3))[:confident]
    sure = [
        register(
            db_session, settings, competition, tmp_path, label, hashes, off_by(truth, accuracy, 1, seed), 70.0
        )
        for seed, (label, accuracy) in enumerate(specs)
    ]
    timid = [
        register(
            db_session, settings, competition, tmp_path, f"timid{index}", hashes,
            off_by(truth, 0.5, 2, 9 + index), 90.0, seed=9 + index, confidence=TIMID,
        )
        for index in range(empty)
    ]  # fmt: skip
    run_select_jobs(db_session, settings)
    vote(db_session, competition, annotators(db_session, 3), lambda o, c: c == truth[o], hashes)
    return Built(competition, sure, timid)


def csv_table(client, competition_id: int, table: str) -> list[dict]:
    """A CSV table of the leaderboard as dicts of strings (empty = null)."""
    response = client.get(
        f"/api/v1/competitions/{competition_id}/leaderboard", params={"format": "csv", "table": table}
    )
    assert response.status_code == 200
    return list(csv.DictReader(io.StringIO(response.text)))


def page_row(page: str, classifier_id: int) -> str:
    """A classifier's row of the ranking table."""
    return page[page.index(f'<tr data-classifier-id="{classifier_id}"') :].split("</tr>")[0]


def matrix_cells(page: str, caption: str) -> list[list[str]]:
    """The cells of one matrix table of the page (A, B or n), row by row."""
    table = page[page.index(f"<caption>{caption}") :].split("</table>")[0]
    return [re.findall(r'<td class="num">(.*?)</td>', row) for row in table.split("<tr>")[2:]]


def heatmap_cells(page: str) -> list[tuple[str, str]]:
    """Each linked cell of the heatmap: the start of its label up to the first colon, and its text."""
    heatmap = re.search(r'<svg class="heatmap".*?</svg>', page, re.S).group(0)
    cells = re.findall(r'<a href="[^"]*" aria-label="([^:]*: ).*?<text [^>]*>([^<]*)</text>', heatmap, re.S)
    return [(label if label.startswith("no labels") else "", text) for label, text in cells]


def assert_no_number(standing: dict) -> None:
    """No rank or score in a standing of the JSON (or a CSV row: empty)."""
    assert {key: standing[key] for key in NO_NUMBER} == dict.fromkeys(NO_NUMBER, standing[NO_NUMBER[0]])
    assert standing[NO_NUMBER[0]] in (None, "")


@pytest.fixture
def all_empty(db_session, settings, tmp_path) -> Built:
    """Three timid classifiers: all three pairs selected no image, so nothing is labelled."""
    return build(db_session, settings, tmp_path, "all-empty", confident=0, empty=3)


@pytest.fixture
def partly_empty(db_session, settings, tmp_path) -> Built:
    """Three confident classifiers and a timid one: the timid one's three pairs selected no image."""
    return build(db_session, settings, tmp_path, "partly-empty", confident=3, empty=1)


def test_all_empty_the_json_has_no_score_rank_or_matrix_entry(client, all_empty):
    board = client.get(f"/api/v1/competitions/{all_empty.competition.id}/leaderboard").json()
    assert len(board["classifiers"]) == 3 and board["case_shares"]["images"] == 0
    for standing in board["classifiers"]:
        assert_no_number(standing)
        assert standing["no_rank"] == "all 2 of its pairs selected no image to label"
        assert standing["provisional"] and standing["labelled_images"] == 0
    assert [(entry["classifier_id"], entry["reason"]) for entry in board["unranked"]] == [
        (standing["classifier_id"], standing["no_rank"]) for standing in board["classifiers"]
    ]
    assert (board["lambda_max"], board["consistency_index"], board["srcc"]) == (None, None, None)
    matrices = board["matrices"]
    assert matrices["accuracy"] == matrices["dominance"] == [[None] * 3] * 3
    assert matrices["labelled"] == [[0] * 3] * 3


def test_all_empty_the_page_shows_no_number(client, all_empty):
    page = client.get(f"/competitions/{all_empty.competition.id}/leaderboard").text
    for classifier in all_empty.empty:
        row = page_row(page, classifier.id)
        assert row.split('<td class="rank" role="cell">')[1].startswith("— <span")
        for label in RANK_CELLS:
            assert f'data-label="{label}">—</td>' in row
    assert "λ<sub>max</sub>" not in page and "Consistency index" not in page
    assert matrix_cells(page, "A: pairwise accuracy") == [[""] * 3] * 3
    assert matrix_cells(page, "B: dominance") == [[""] * 3] * 3
    assert matrix_cells(page, "n: labelled images") == [["0"] * 3] * 3
    assert heatmap_cells(page) == [("no labels yet: ", "")] * 6


def test_all_empty_the_csv_tables_leave_every_score_blank(client, all_empty):
    competition_id = all_empty.competition.id
    for row in csv_table(client, competition_id, "classifiers"):
        assert_no_number(row)
    for row in csv_table(client, competition_id, "pairs"):
        assert (row["a_ij"], row["b_ij"], row["n_ij"]) == ("", "", "0")
    (summary,) = csv_table(client, competition_id, "summary")
    assert (summary["lambda_max"], summary["consistency_index"], summary["classifiers"]) == ("", "", "3")


def test_all_empty_the_release_bundle_holds_nulls(db_session, settings, all_empty, tmp_path):
    bundle = release(db_session, settings, all_empty, tmp_path / "bundle").path
    standings = pq.read_table(bundle / "leaderboard.parquet").to_pylist()
    assert len(standings) == 3
    for standing in standings:
        assert_no_number(standing)
    pairs = pq.read_table(bundle / "leaderboard_pairs.parquet").to_pylist()
    assert {(row["a_ij"], row["b_ij"], row["n_ij"]) for row in pairs} == {(None, None, 0)}
    (summary,) = pq.read_table(bundle / "leaderboard_summary.parquet").to_pylist()
    assert (summary["lambda_max"], summary["consistency_index"]) == (None, None)


def test_partly_empty_the_json_ranks_only_the_labelled_among_themselves(client, partly_empty):
    competition_id = partly_empty.competition.id
    board = client.get(f"/api/v1/competitions/{competition_id}/leaderboard").json()
    (timid,) = partly_empty.empty
    standings = {standing["classifier_id"]: standing for standing in board["classifiers"]}
    assert_no_number(standings[timid.id])
    assert [entry["classifier_id"] for entry in board["unranked"]] == [timid.id]
    ranked = [standings[classifier.id] for classifier in partly_empty.confident]
    assert sorted(standing["mad_rank"] for standing in ranked) == [1, 2, 3]
    assert all(standing["rank_high"] <= 3 for standing in ranked)
    assert sum(standing["mad_score"] for standing in ranked) == pytest.approx(1.0)  # Perron over the three
    assert board["consistency_index"] == pytest.approx((board["lambda_max"] - 3) / 2)
    # timid reports 90% but compares nothing: the three confident ones tie at 70%
    assert sorted(standing["accuracy_rank"] for standing in ranked) == [1, 1, 1]
    index = board["matrices"]["classifier_ids"].index(timid.id)
    for matrix in ("accuracy", "dominance"):
        rows = board["matrices"][matrix]
        assert rows[index] == [None] * 4 and [row[index] for row in rows] == [None] * 4
        others = [value for i, row in enumerate(rows) for j, value in enumerate(row) if index not in (i, j)]
        assert sum(value is None for value in others) == 3  # the diagonal
    history = client.get(f"/api/v1/competitions/{competition_id}/leaderboard/history").json()
    assert len(history["points"]) >= 2
    for point in history["points"]:
        ranks = dict(zip(point["classifier_ids"], point["mad_ranks"], strict=True))
        known = sorted(rank for rank in ranks.values() if rank is not None)
        assert ranks[timid.id] is None and known[0] == 1 and known[-1] <= len(known)
    assert len(known) == 3


def test_partly_empty_the_page_csv_and_release_blank_only_the_unlabelled(
    client, db_session, settings, partly_empty, tmp_path
):
    competition_id = partly_empty.competition.id
    board = client.get(f"/api/v1/competitions/{competition_id}/leaderboard").json()
    (timid,) = partly_empty.empty
    index = board["matrices"]["classifier_ids"].index(timid.id)

    page = client.get(f"/competitions/{competition_id}/leaderboard").text
    row = page_row(page, timid.id)
    assert all(f'data-label="{label}">—</td>' in row for label in RANK_CELLS)
    for classifier in partly_empty.confident:
        assert 'data-label="Rank interval">—</td>' not in page_row(page, classifier.id)
    assert f"{board['lambda_max']:.4f} (m = 3)" in page
    accuracy = matrix_cells(page, "A: pairwise accuracy")
    assert accuracy[index] == [""] * 4 and [cells[index] for cells in accuracy] == [""] * 4
    i, j = (index + 1) % 4, (index + 2) % 4
    assert accuracy[i][j] == f"{board['matrices']['accuracy'][i][j]:.3f}"
    blank = [label for label, text in heatmap_cells(page) if text == ""]
    assert blank == ["no labels yet: "] * 6  # timid's row and column

    rows = {int(row["classifier_id"]): row for row in csv_table(client, competition_id, "classifiers")}
    assert_no_number(rows[timid.id])
    assert all(rows[classifier.id]["mad_rank"] in ("1", "2", "3") for classifier in partly_empty.confident)
    for row in csv_table(client, competition_id, "pairs"):
        with_timid = timid.id in (int(row["classifier_i_id"]), int(row["classifier_j_id"]))
        if with_timid or row["classifier_i_id"] == row["classifier_j_id"]:
            assert (row["a_ij"], row["b_ij"], row["n_ij"]) == ("", "", "0")
        else:
            assert float(row["a_ij"]) > 0 and int(row["n_ij"]) > 0

    bundle = release(db_session, settings, partly_empty, tmp_path / "bundle").path
    released = {
        row["classifier_id"]: row for row in pq.read_table(bundle / "leaderboard.parquet").to_pylist()
    }
    assert_no_number(released[timid.id])
    assert {released[classifier.id]["mad_rank"] for classifier in partly_empty.confident} == {1, 2, 3}
    pairs = pq.read_table(bundle / "leaderboard_pairs.parquet").to_pylist()
    with_timid = [row for row in pairs if timid.id in (row["classifier_i_id"], row["classifier_j_id"])]
    assert {(row["a_ij"], row["b_ij"]) for row in with_timid} == {(None, None)}
    (summary,) = pq.read_table(bundle / "leaderboard_summary.parquet").to_pylist()
    assert summary["lambda_max"] == pytest.approx(board["lambda_max"])
