"""Public reads are computed once per data version: served from the cache until the labels change, and one
computation for many concurrent requests (app/leaderboard/public_reads.py)."""

import asyncio

import httpx
import pytest
from sqlalchemy import text

from app.competitions.schemas import CompetitionCreate
from app.competitions.service import create_competition, data_version
from tests.conftest import make_user
from tests.labelling.factories import answer_next, labelling_competition


@pytest.fixture
def anyio_backend() -> str:
    """The server's event loop: asyncio."""
    return "asyncio"


@pytest.fixture
def one_vote_competition(db_session):
    """Two classifiers and their pair of 2 selected images (and a reserve); one answer decides a question."""
    competition = create_competition(
        db_session=db_session, spec=CompetitionCreate(name="one-vote", k=2, panel_size=1)
    )
    (subset,) = labelling_competition(db_session, competition, classifiers=2, images_per_pair=3)
    return competition, subset


def labelled(board: dict) -> list[int]:
    """Each ranked classifier's labelled pair images."""
    return [row["labelled_images"] for row in board["classifiers"]]


def test_a_cached_read_is_served_until_a_label_is_decided(app, client, db_session, one_vote_competition):
    competition, subset = one_vote_competition
    reads = app.state.public_reads
    urls = [
        f"/api/v1/competitions/{competition.id}/leaderboard",
        f"/api/v1/competitions/{competition.id}/leaderboard/history",
        f"/api/v1/competitions/{competition.id}/pairs/{subset.classifier_b_id}/{subset.classifier_a_id}",
    ]
    before = [client.get(url).json() for url in urls]
    assert labelled(before[0]) == [0, 0] and reads.computations == len(urls)
    assert [client.get(url).json() for url in urls] == before and reads.computations == len(urls)

    version = data_version(db_session=db_session, competition_id=competition.id)
    assert answer_next(db_session, competition, make_user(db_session, "voter", "annotator")) is not None
    assert data_version(db_session=db_session, competition_id=competition.id) > version

    after = [client.get(url).json() for url in urls]
    assert labelled(after[0]) == [1, 1] and reads.computations == 2 * len(urls)
    assert after[2] != before[2]  # the gallery marks the decided image's predictions right or wrong
    csv = client.get(urls[0], params={"format": "csv"})
    assert csv.status_code == 200 and reads.computations == 2 * len(urls)


def test_a_missing_competition_is_404_and_nothing_is_kept(app, client):
    response = client.get("/api/v1/competitions/999999/leaderboard")
    assert response.status_code == 404 and app.state.public_reads.results == {}


@pytest.mark.anyio
async def test_concurrent_misses_compute_once(app, one_vote_competition):
    competition, _ = one_vote_competition
    reads = app.state.public_reads
    url = f"/api/v1/competitions/{competition.id}/leaderboard"
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://test") as http:
        async with reads.computing:  # hold the process's one computation until all eight wait for it
            requests = [asyncio.ensure_future(http.get(url)) for _ in range(8)]
            for _ in range(10_000):
                if reads.waiting == 8:
                    break
                await asyncio.sleep(0.001)
            assert reads.waiting == 8 and len(reads.pending) == 1
        responses = await asyncio.gather(*requests)
    assert {response.status_code for response in responses} == {200}
    assert len({response.content for response in responses}) == 1
    assert reads.computations == 1


def test_every_change_to_the_rows_public_reads_come_from_raises_the_data_version(
    db_session, one_vote_competition
):
    """Each of these statements changes several rows: Postgres bumps once per statement (transition
    tables), except for a vote's counts (a row trigger); SQLite once per row."""
    competition, subset = one_vote_competition
    per_row = db_session.get_bind().dialect.name == "sqlite"
    changes = {  # statement: whether Postgres bumps per row
        "UPDATE pair_images SET distance = distance + 1 WHERE subset_id = :subset": False,
        "UPDATE questions SET yes_votes = yes_votes + 1 WHERE competition_id = :competition": True,
        "UPDATE classifiers SET name = name || '!' WHERE competition_id = :competition": False,
        "DELETE FROM pair_images WHERE subset_id = :subset": False,
    }
    for statement, row_trigger in changes.items():
        before = data_version(db_session=db_session, competition_id=competition.id)
        changed = db_session.execute(
            text(statement), {"subset": subset.id, "competition": competition.id}
        ).rowcount
        raised = data_version(db_session=db_session, competition_id=competition.id) - before
        assert changed > 1, statement
        assert raised == (changed if per_row or row_trigger else 1), statement
