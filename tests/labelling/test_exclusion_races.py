"""An admin excludes and pauses annotators while twenty of them label at once, through real HTTP.

An exclusion and an annotator's answers in flight must not overlap: either an answer lands before the
exclusion (which then recounts it out) or after it (and is not counted). So whatever the timing, once the
admin is done every question's counters equal the votes of the annotators still counted, its outcome is
what those votes decide, every item's queue state follows from its questions, and no vote of a paused
annotator lands after their pause was answered.
"""

import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

import httpx
from sqlalchemy import func, select

from app.competitions.schemas import CompetitionCreate
from app.competitions.service import create_competition
from app.labelling import rules
from app.labelling.models import LabelItem, Question, Vote
from app.users.models import Role, User
from tests.labelling.factories import labelling_competition, users_with_tokens
from tests.support.http import HTTP_TIMEOUT_S

ANNOTATORS = 20
TOGGLED = 4
"""Annotators excluded, counted again and excluded again while they label."""
PAUSED = 2
"""Annotators paused while they label."""
ADMIN_PAUSE_S = 0.05
MAX_REQUESTS_PER_ANNOTATOR = 3000


def set_up(live_server) -> tuple[int, str, list[tuple[int, str]]]:
    """A competition of 5 classifiers (10 pairs, 8 images selected and 2 in reserve each), an admin token
    and the annotators' (id, token)."""
    with live_server.sessions() as db_session:
        competition = create_competition(db_session=db_session, spec=CompetitionCreate(name="racing", k=8))
        labelling_competition(db_session, competition, classifiers=5, images_per_pair=10)
        ((_, admin_token),) = users_with_tokens(db_session, "admin", 1, Role.admin)
        annotators = users_with_tokens(db_session, "racer", ANNOTATORS)
        db_session.commit()
        return competition.id, admin_token, annotators


def label_until_done(url: str, token: str, seed: int, paused: threading.Event) -> str | None:
    """Label (each answer brings the next image) until nothing is left or the annotator is paused; an error
    met, else None. Answers are yes, or no on one question in three (by id and seed)."""
    with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=120) as client:
        response = client.post("/next")
        for _ in range(MAX_REQUESTS_PER_ANNOTATOR):
            if response.status_code == 401 and paused.is_set():
                return None
            if response.status_code != 200:
                return f"{response.request.url.path}: {response.status_code} {response.text}"
            body = response.json()
            following = body["next"] if "next" in body else body
            if following["status"] == "finished":
                return None
            if following["status"] == "busy":
                time.sleep(0.02)
                response = client.post("/next")
                continue
            answers = [
                {"question_id": q["question_id"], "answer": (q["question_id"] + seed) % 3 != 0}
                for q in following["item"]["questions"]
            ]
            response = client.post("/answers", json={"answers": answers, "next": True})
    return "never finished"


def votes_of(live_server, user_id: int) -> int:
    """How many votes the annotator has stored."""
    with live_server.sessions() as db_session:
        return db_session.scalar(select(func.count()).select_from(Vote).where(Vote.user_id == user_id))


def test_excluding_and_pausing_annotators_while_they_answer_keeps_every_count_true(live_server):
    competition_id, admin_token, annotators = set_up(live_server)
    url = f"{live_server.url}/api/v1/competitions/{competition_id}/labelling"
    paused = {user_id: threading.Event() for user_id, _ in annotators[TOGGLED : TOGGLED + PAUSED]}
    votes_when_paused: dict[int, int] = {}

    def administer(crowd_done: threading.Event) -> None:
        """Exclude, count again and exclude the first annotators, and pause the next ones, as they label."""
        with httpx.Client(
            base_url=f"{live_server.url}/api/v1",
            headers={"Authorization": f"Bearer {admin_token}"},
            timeout=HTTP_TIMEOUT_S,
        ) as admin:
            for excluded in (True, False, True):
                for user_id, _ in annotators[:TOGGLED]:
                    response = admin.patch(f"/users/{user_id}", json={"votes_excluded": excluded})
                    assert response.status_code == 200, response.text
                    time.sleep(ADMIN_PAUSE_S)
                for user_id, event in paused.items():
                    if not event.is_set():
                        event.set()
                        response = admin.patch(f"/users/{user_id}", json={"is_active": False})
                        assert response.status_code == 200, response.text
                        votes_when_paused[user_id] = votes_of(live_server, user_id)
                        break
        assert not crowd_done.is_set(), (
            "the admin was done only after the crowd: make the crowd's work longer"
        )

    crowd_done = threading.Event()
    with ThreadPoolExecutor(ANNOTATORS + 1) as pool:
        admin_run = pool.submit(administer, crowd_done)
        runs = [
            pool.submit(label_until_done, url, token, seed, paused.get(user_id, threading.Event()))
            for seed, (user_id, token) in enumerate(annotators)
        ]
        errors = [run.result() for run in runs]
        crowd_done.set()
        admin_run.result()
    assert [error for error in errors if error] == []

    with live_server.sessions() as db_session:
        counted_users = set(db_session.scalars(select(User.id).where(~User.votes_excluded)))
        assert len(counted_users) == ANNOTATORS + 1 - TOGGLED  # the admin too
        counted = Counter(
            (question_id, answer)
            for question_id, user_id, answer in db_session.execute(
                select(Vote.question_id, Vote.user_id, Vote.answer)
            )
            if user_id in counted_users
        )
        questions = db_session.scalars(select(Question)).all()
        for question in questions:
            yes, no = counted[question.id, True], counted[question.id, False]
            assert (question.yes_votes, question.no_votes) == (yes, no), f"question {question.id}"
            assert question.outcome == rules.outcome(yes, no, 5), f"question {question.id}"
            assert (question.decided_at is None) == (question.outcome is None)
        for item in db_session.scalars(select(LabelItem)):
            open_on_image = [q for q in questions if q.image_id == item.image_id and q.outcome is None]
            nearest = min(
                (rules.votes_still_needed(q.yes_votes, q.no_votes, 5) for q in open_on_image), default=0
            )
            assert item.needed == (0 if item.discarded else nearest), f"item {item.id}"
    assert set(votes_when_paused) == set(paused)
    for user_id, votes in votes_when_paused.items():
        assert votes_of(live_server, user_id) == votes, "a vote landed after its annotator was paused"
