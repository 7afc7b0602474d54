"""Adjudication: the review queue lists split decisions, discarded images and images flagged as not natural
photos; an admin's verdict is recorded with its reason, exported, released, and an overturned outcome
flows into the leaderboard and survives recounts."""

import csv
import io

import pyarrow.parquet as pq
import pytest
from sqlalchemy import select

from app.labelling.annotating.queue import next_item
from app.labelling.models import LabelItem, PairImage
from app.labelling.quality_control.annotators import set_votes_excluded
from app.leaderboard.standings import compute_leaderboard
from app.release.bundle import write_release
from tests.labelling.contested import contested_competition
from tests.release.test_release import rebuilt_ranking
from tests.support.numbers import as_served


@pytest.fixture
def contested(db_session, competition):
    """The contested competition of tests/labelling/contested.py."""
    return contested_competition(db_session, competition)


def review(client, contested, headers) -> list[dict]:
    """The review queue from the API."""
    response = client.get(
        f"/api/v1/competitions/{contested.competition.id}/labelling/review", headers=headers
    )
    assert response.status_code == 200, response.text
    return response.json()


def adjudicate(client, contested, headers, position: int, verdict: str, question_id=None, reason="checked"):
    """POST a verdict on the image at this position (and question); the response."""
    body = {"image_sha256": contested.hashes[position], "verdict": verdict, "reason": reason}
    if question_id is not None:
        body["question_id"] = question_id
    return client.post(
        f"/api/v1/competitions/{contested.competition.id}/labelling/adjudications", json=body, headers=headers
    )


def accuracy_a_over_b(client, contested) -> float:
    """a_ab of the leaderboard API."""
    board = client.get(f"/api/v1/competitions/{contested.competition.id}/leaderboard").json()
    return board["matrices"]["accuracy"][0][1]


def roles(db_session, contested) -> list[str]:
    """The pair's image roles by position."""
    rows = db_session.scalars(
        select(PairImage.role)
        .where(PairImage.subset_id == contested.subset.id)
        .order_by(PairImage.position)
        .execution_options(populate_existing=True)
    )
    return [role.value for role in rows]


def test_adjudication_queue_lists_split_decisions_discards_and_not_natural_flags(
    client, db_session, contested, admin_headers
):
    split = contested.question(db_session, 0, 1)
    assert (split.yes_votes, split.no_votes, split.outcome) == (3, 2, True)
    entries = review(client, contested, admin_headers)
    assert [(entry["kind"], entry["image_sha256"]) for entry in entries] == [
        ("split", contested.hashes[0]),
        ("discarded", contested.hashes[1]),
        ("not_natural", contested.hashes[2]),
    ]
    assert entries[0]["question_id"] == split.id and entries[0]["class_name"]
    assert (entries[1]["too_difficult_flags"], entries[1]["discarded"]) == (4, True)
    assert (entries[2]["not_natural_flags"], entries[2]["discarded"]) == (1, False)
    assert roles(db_session, contested) == ["selected", "discarded", "selected", "selected", "reserve"]


def test_an_overturned_split_adjudication_flows_into_the_leaderboard_and_survives_recounts(
    client, db_session, contested, admin_headers, competition
):
    split = contested.question(db_session, 0, 1)
    labelled, alpha = 2, competition.smoothing  # images 0 and 2 (the promoted reserve has two answers)
    assert accuracy_a_over_b(client, contested) == (labelled + alpha) / (labelled + 2 * alpha)
    response = adjudicate(client, contested, admin_headers, 0, "overturned", split.id, "a cat, not a lynx")
    assert response.status_code == 201, response.text
    verdict = response.json()
    assert (verdict["kind"], verdict["panel_outcome"], verdict["outcome"]) == ("split", True, False)
    assert verdict["reason"] == "a cat, not a lynx" and verdict["decided_by"] == "admin"
    assert accuracy_a_over_b(client, contested) == (labelled - 1 + alpha) / (labelled + 2 * alpha)
    assert "split" not in [entry["kind"] for entry in review(client, contested, admin_headers)]
    set_votes_excluded(db_session=db_session, user=contested.annotators[0], votes_excluded=True)
    assert contested.question(db_session, 0, 1).outcome is False  # 3–1 now, but the verdict stands
    again = adjudicate(client, contested, admin_headers, 0, "confirmed", split.id)
    assert again.status_code == 409 and "already" in again.json()["detail"]
    unanimous = contested.question(db_session, 0, 2)
    refused = adjudicate(client, contested, admin_headers, 0, "overturned", unanimous.id)
    assert refused.status_code == 409 and "not a split decision" in refused.json()["detail"]


def test_adjudication_keeps_a_discarded_image_and_discards_a_confirmed_artificial_one(
    client, db_session, contested, admin_headers, competition
):
    kept = adjudicate(client, contested, admin_headers, 1, "overturned", reason="clear enough at full size")
    assert kept.status_code == 201, kept.text
    assert (kept.json()["kind"], kept.json()["panel_outcome"], kept.json()["outcome"]) == (
        "discarded",
        True,
        False,
    )
    assert roles(db_session, contested) == ["selected", "selected", "selected", "selected", "reserve"]
    item = db_session.scalars(
        select(LabelItem)
        .where(LabelItem.image_id == contested.image_ids[1])
        .execution_options(populate_existing=True)
    ).one()
    assert (item.discarded, item.kept) == (False, True) and item.needed > 0
    offered = next_item(db_session=db_session, competition=competition, user=contested.annotators[4]).item
    assert offered.image_sha256 == contested.hashes[1]  # asked again, of the one who did not flag it
    artificial = adjudicate(client, contested, admin_headers, 2, "confirmed", reason="a rendering")
    assert artificial.status_code == 201 and artificial.json()["kind"] == "not_natural"
    assert artificial.json()["outcome"] is True
    assert roles(db_session, contested) == ["selected", "selected", "discarded", "selected", "selected"]
    assert review(client, contested, admin_headers)[-1]["kind"] == "split"
    twice = adjudicate(client, contested, admin_headers, 2, "overturned")
    assert twice.status_code == 409


def test_adjudication_refuses_bad_requests(client, db_session, contested, admin_headers, annotator_headers):
    assert adjudicate(client, contested, annotator_headers, 1, "confirmed").status_code == 403
    assert adjudicate(client, contested, admin_headers, 1, "confirmed", reason="").status_code == 422
    assert adjudicate(client, contested, admin_headers, 1, "confirmed", reason="   ").status_code == 422
    assert adjudicate(client, contested, admin_headers, 1, "maybe").status_code == 422
    unknown = adjudicate(client, contested, admin_headers, 1, "confirmed", question_id=10**9)
    assert unknown.status_code == 404
    untouched = adjudicate(client, contested, admin_headers, 3, "confirmed")
    assert untouched.status_code == 409 and "neither discarded" in untouched.json()["detail"]
    body = {"image_sha256": "0" * 64, "verdict": "confirmed", "reason": "x"}
    missing = client.post(
        f"/api/v1/competitions/{contested.competition.id}/labelling/adjudications",
        json=body,
        headers=admin_headers,
    )
    assert missing.status_code == 404


def test_adjudications_are_listed_exported_and_released(
    app, client, db_session, contested, admin_headers, settings, tmp_path
):
    from contextlib import nullcontext

    from app.leaderboard.router import export_sessions

    app.dependency_overrides[export_sessions] = lambda: lambda: nullcontext(db_session)
    split = contested.question(db_session, 0, 1)
    adjudicate(client, contested, admin_headers, 0, "overturned", split.id, reason="=cmd|' /C calc'!A0")
    adjudicate(client, contested, admin_headers, 1, "confirmed", reason="too dark")
    base = f"/api/v1/competitions/{contested.competition.id}"
    listed = client.get(f"{base}/labelling/adjudications", headers=admin_headers).json()
    assert [(entry["kind"], entry["verdict"]) for entry in listed] == [
        ("split", "overturned"),
        ("discarded", "confirmed"),
    ]
    exported = client.get(f"{base}/exports/adjudications", params={"format": "csv"}, headers=admin_headers)
    rows = list(csv.DictReader(io.StringIO(exported.text)))
    assert [row["reason"] for row in rows] == ["'=cmd|' /C calc'!A0", "too dark"]
    assert rows[0]["class_key"] and rows[0]["outcome"] == "false" and rows[1]["decided_by"] == "admin"
    bundle = write_release(
        db_session=db_session,
        competition=contested.competition,
        settings=settings,
        out=tmp_path / "r",
        license_id="other",
    ).path
    released = pq.read_table(bundle / "adjudications.parquet")
    assert released.column("verdict").to_pylist() == ["overturned", "confirmed"]
    assert "decided_by" not in released.column_names
    subsets = pq.read_table(bundle / "subsets.parquet").to_pylist()
    assert subsets[0]["outcome_a"] is False  # the overturned outcome, as the leaderboard counts it
    served = compute_leaderboard(db_session=db_session, competition=contested.competition)
    ids, ranking = rebuilt_ranking(bundle)
    assert ids == served.matrices.classifier_ids and as_served(ranking.accuracy) == served.matrices.accuracy
    assert as_served(ranking.perron.scores) == [standing.mad_score for standing in served.classifiers]
