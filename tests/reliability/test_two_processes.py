"""Two server processes on one database and one store behave as one service (issue 16, item 6): a leaderboard
change made through one is seen through the other (the data version lives in the database), sign-in
failures counted by one are refused by the other, and a job leased through one is not handed out again
through the other. Real uvicorn processes on 127.0.0.1, on SQLite (one file) and on Postgres."""

import re
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from app.competitions.schemas import CompetitionCreate
from app.competitions.service import create_competition
from app.db.engine import create_db_engine, create_sessionmaker
from app.jobs.service import enqueue_selections
from app.users.models import Role
from tests.labelling.factories import labelling_competition, users_with_tokens
from tests.reliability.test_faults import Server
from tests.support.http import HTTP_TIMEOUT_S

MAX_FAILURES = 2


def one_vote_competition(database_url: str) -> tuple[int, str, str]:
    """A competition whose one pair has 2 selected images and a queued select job, where one answer decides
    a question; its id, an annotator's token and a worker's token."""
    engine = create_db_engine(database_url)
    try:
        with create_sessionmaker(engine)() as session:
            competition = create_competition(
                db_session=session, spec=CompetitionCreate(name="two-processes", k=2, panel_size=1)
            )
            labelling_competition(session, competition, classifiers=2, images_per_pair=3)
            enqueue_selections(db_session=session, competition_id=competition.id, max_attempts=3)
            ((_, annotator),) = users_with_tokens(session, "annotator", 1)
            ((_, worker),) = users_with_tokens(session, "worker", 1, Role.worker)
            session.commit()
            return competition.id, annotator, worker
    finally:
        engine.dispose()


@pytest.fixture
def servers(fresh_database_url, tmp_path):
    """Two server processes on the same database and data directory."""
    pair = [Server(fresh_database_url, tmp_path / "data") for _ in range(2)]
    try:
        for server in pair:
            server.environment["MAD_LOGIN_MAX_FAILURES"] = str(MAX_FAILURES)
        with ThreadPoolExecutor(len(pair)) as starting:  # both start up at once
            list(starting.map(Server.start, pair))
        yield pair
    finally:
        for server in pair:
            server.stop()


def labelled(url: str, competition_id: int) -> list[int]:
    """Each ranked classifier's labelled pair images on this server's leaderboard."""
    board = httpx.get(
        f"{url}/api/v1/competitions/{competition_id}/leaderboard", timeout=HTTP_TIMEOUT_S
    ).json()
    return [row["labelled_images"] for row in board["classifiers"]]


def sign_in(url: str, password: str) -> int:
    """The status of a sign-in through the form of this server."""
    with httpx.Client(base_url=url, timeout=HTTP_TIMEOUT_S) as client:
        csrf = re.search(r'name="csrf_token" value="([^"]+)"', client.get("/login").text).group(1)
        form = {"username": "annotator0", "password": password, "csrf_token": csrf, "next": "/"}
        return client.post("/login", data=form).status_code


def test_two_processes_share_the_leaderboard_cache_sign_in_failures_and_job_leases(
    fresh_database_url, servers
):
    competition_id, annotator, worker = one_vote_competition(fresh_database_url)
    first, second = servers
    assert labelled(first.url, competition_id) == labelled(second.url, competition_id) == [0, 0]

    headers = {"Authorization": f"Bearer {annotator}"}
    prefix = f"{first.url}/api/v1/competitions/{competition_id}/labelling"
    item = httpx.post(f"{prefix}/next", headers=headers, timeout=HTTP_TIMEOUT_S).json()["item"]
    answers = [{"question_id": question["question_id"], "answer": True} for question in item["questions"]]
    assert httpx.post(
        f"{prefix}/answers", headers=headers, json={"answers": answers}, timeout=HTTP_TIMEOUT_S
    ).is_success
    assert labelled(second.url, competition_id) == labelled(first.url, competition_id) == [1, 1]

    assert [sign_in(first.url, "wrong guess") for _ in range(MAX_FAILURES)] == [401] * MAX_FAILURES
    assert sign_in(second.url, "long enough") == 429

    def claim(server: Server) -> list:
        response = httpx.post(
            f"{server.url}/api/v1/jobs/claim",
            headers={"Authorization": f"Bearer {worker}"},
            json={"worker": "w"},
            timeout=HTTP_TIMEOUT_S,
        )
        return response.json()["jobs"]

    assert len(claim(first)) == 1 and claim(second) == []
