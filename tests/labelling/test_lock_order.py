"""One annotator's requests on several connections at once, on Postgres: no deadlock, nothing half-written.

A person with two tabs, or a script with a connection pool, sends their next, answers, undos and flags
side by side. Each request takes its locks in one order (the annotator's row, an item, their undo row,
then their assignment to that item, always under the item's lock), so none of them waits in a cycle:
a deadlock would come back as a 503. Every request must end in 200 or a clear 4xx (409 when another of
the annotator's requests changed what it acts on), and the counters must equal the votes after.
"""

import random
import threading
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
from sqlalchemy import select

from app.competitions.schemas import CompetitionCreate
from app.competitions.service import create_competition
from app.labelling.models import Question, Vote
from tests.labelling.factories import labelling_competition, users_with_tokens

CONNECTIONS = 4
REQUESTS = 200


class Budget:
    """A shared count of requests left; each connection takes one before every request."""

    def __init__(self, requests: int):
        self.left = requests
        self.lock = threading.Lock()

    def take(self) -> bool:
        """True while requests are left (and one is now taken)."""
        with self.lock:
            self.left -= 1
            return self.left >= 0


def label_on_one_connection(url: str, token: str, seed: int, budget: Budget) -> Counter:
    """Label on a connection of its own until the budget is spent: next, answers that bring the next image,
    now and then an undo or a flag. The statuses answered."""
    statuses: Counter = Counter()
    chance = random.Random(seed)
    with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=120) as client:

        def post(path: str, body: dict | None = None) -> dict | None:
            response = client.post(path, json=body)
            statuses[response.status_code] += 1
            return response.json() if response.status_code == 200 else None

        item = None
        while budget.take():
            if item is None:
                following = post("/next")
                if following is not None and following["status"] == "finished":
                    return statuses
                item = following and following["item"]
            elif chance.random() < 0.1:
                undone = post("/undo")
                item = undone and undone["item"]
            elif chance.random() < 0.05:
                post("/flags", {"item_id": item["item_id"]})
                item = None
            else:
                answers = [
                    {"question_id": q["question_id"], "answer": chance.random() < 0.5, "seconds": 1.0}
                    for q in item["questions"]
                ]
                result = post("/answers", {"answers": answers, "next": True})
                item = result and result["next"]["item"]
    return statuses


def test_one_annotators_requests_on_several_connections_never_deadlock(live_server, backend):
    if backend != "postgres":
        pytest.skip("SQLite runs one writer at a time: no row locks to wait for in a cycle")
    with live_server.sessions() as db_session:
        competition = create_competition(db_session=db_session, spec=CompetitionCreate(name="tabs", k=30))
        labelling_competition(db_session, competition, classifiers=4, images_per_pair=30)
        ((_, token),) = users_with_tokens(db_session, "tabs", 1)
        db_session.commit()
        url = f"{live_server.url}/api/v1/competitions/{competition.id}/labelling"

    budget = Budget(REQUESTS)
    with ThreadPoolExecutor(CONNECTIONS) as pool:
        runs = pool.map(lambda seed: label_on_one_connection(url, token, seed, budget), range(CONNECTIONS))
        statuses = sum(runs, Counter())

    assert sum(statuses.values()) == REQUESTS
    assert set(statuses) <= {200, 404, 409}, statuses  # 503: a deadlock (or a lock wait past its limit)
    assert statuses[200] > REQUESTS // 2, statuses
    with live_server.sessions() as db_session:
        votes = Counter(
            (question_id, answer)
            for question_id, answer in db_session.execute(select(Vote.question_id, Vote.answer))
        )
        for question in db_session.scalars(select(Question)):
            assert (question.yes_votes, question.no_votes) == (
                votes[question.id, True],
                votes[question.id, False],
            )
