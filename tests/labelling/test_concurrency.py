"""Fifty annotators labelling at once through real HTTP, on Postgres and on SQLite; two undos at once.

Each simulated annotator takes images, answers at random, sometimes undoes the answer it just stored and
answers again, and always flags a few chosen images (so discards and reserve promotions happen under
load), until nothing is left for them; they come back while an undo after the others had finished reopened a
question. Then the database must hold exactly the answers the server acknowledged, every question at most its
panel, each decided exactly when a strict majority was reached.
"""

import random
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
from sqlalchemy import select, text

from app.competitions.models import Competition
from app.competitions.schemas import CompetitionCreate
from app.competitions.service import create_competition
from app.db.engine import create_db_engine, create_sessionmaker
from app.errors import Conflict
from app.images.models import Image
from app.labelling import rules
from app.labelling.annotating.answers import submit_answers
from app.labelling.annotating.queue import next_item
from app.labelling.annotating.undo import undo_last
from app.labelling.models import LabelItem, Question, UndoDepth, Vote
from app.labelling.quality_control.gold import add_gold_questions
from app.labelling.types import Answer
from app.users import service as users_service
from app.users.models import Role, User
from tests.conftest import make_user
from tests.labelling.factories import add_images, answer_next, labelling_competition

ANNOTATORS = 50
BUSY_PAUSE_S = 0.02
MAX_REQUESTS_PER_ANNOTATOR = 3000
UNDO_PROBABILITY = 0.1
MAX_CROWD_PASSES = 5


def set_up(live_server) -> tuple[int, list[str], set[int]]:
    """A competition of 4 classifiers (6 pairs, 5 images selected and 2 in reserve each) and 50 annotators
    with tokens; returns the competition id, the tokens, and the items every annotator will flag."""
    with live_server.sessions() as db_session:
        competition = create_competition(db_session=db_session, spec=CompetitionCreate(name="crowd", k=5))
        labelling_competition(db_session, competition, classifiers=4, images_per_pair=7)
        tokens = []
        for index in range(ANNOTATORS):
            user = users_service.create_user(
                db_session=db_session, username=f"crowd-{index}", role=Role.annotator, password="long enough"
            )
            tokens.append(users_service.create_api_token(db_session=db_session, user=user, name="test"))
        items = sorted(db_session.scalars(select(LabelItem.id)))
        db_session.commit()
        return competition.id, tokens, set(items[::7])


class Annotator:
    """One simulated annotator: what the server acknowledged and any error it met."""

    def __init__(self, base_url: str, competition_id: int, token: str, seed: int, to_flag: set[int], stop):
        self.client = httpx.Client(
            base_url=f"{base_url}/api/v1/competitions/{competition_id}/labelling",
            headers={"Authorization": f"Bearer {token}"},
            timeout=120,
        )
        self.random = random.Random(seed)
        self.to_flag = to_flag
        self.stop = stop
        self.recorded: dict[int, bool] = {}
        self.flags_refused: set[int] = set()
        self.error: str | None = None
        self.labelled = False

    def post(self, path: str, body: dict | None = None) -> dict:
        """POST and return the JSON body; any other status than 200 stops everyone."""
        response = self.client.post(path, json=body)
        if response.status_code != 200:
            raise RuntimeError(f"{path}: {response.status_code} {response.text}")
        return response.json()

    def answer(self, item: dict) -> list[int]:
        """Answer every question of an item at random; remember what the server stored. The questions
        whose answers were stored, in the order sent."""
        answers = [
            {"question_id": q["question_id"], "answer": self.random.random() < 0.5, "seconds": 1.0}
            for q in item["questions"]
        ]
        result = self.post("/answers", {"answers": answers})
        stored = [a for a in answers if a["question_id"] not in result["already_decided"]]
        assert result["recorded"] == len(stored)
        self.recorded.update({a["question_id"]: a["answer"] for a in stored})
        return [a["question_id"] for a in stored]

    def flag(self, item_id: int) -> None:
        """Flag an item; a 409 is right only when the panel discarded it since it was given (remembered)."""
        response = self.client.post("/flags", json={"item_id": item_id})
        if response.status_code == 409 and "discarded this image meanwhile" in response.json()["detail"]:
            self.flags_refused.add(item_id)
        elif response.status_code != 200:
            raise RuntimeError(f"/flags: {response.status_code} {response.text}")

    def undo(self, question_id: int) -> None:
        """Undo the answer just stored (it must be what the server takes back) and answer its image again."""
        undone = self.post("/undo")
        if (undone["undone"], undone["question_id"]) != ("answer", question_id):
            raise AssertionError(f"undo took back {undone}, not the answer to question {question_id}")
        del self.recorded[question_id]
        if undone["item"] is not None:
            self.answer(undone["item"])

    def run(self) -> None:
        """Label until nothing is left for this annotator; `labelled` says whether it was given any image."""
        self.labelled = False
        try:
            for _ in range(MAX_REQUESTS_PER_ANNOTATOR):
                if self.stop.is_set():
                    return
                following = self.post("/next")
                if following["status"] == "finished":
                    return
                if following["status"] == "busy":
                    time.sleep(BUSY_PAUSE_S)
                    continue
                item = following["item"]
                self.labelled = True
                if item["item_id"] in self.to_flag:
                    self.flag(item["item_id"])
                    continue
                stored = self.answer(item)
                if stored and self.random.random() < UNDO_PROBABILITY:
                    self.undo(stored[-1])  # the last answer sent is the latest stored
            self.error = "never finished"
        except Exception as error:  # noqa: BLE001 - any failure is reported by the test
            self.error = repr(error)
            self.stop.set()


def test_fifty_annotators_at_once_lose_no_vote_and_overfill_no_question(live_server):
    competition_id, tokens, to_flag = set_up(live_server)
    stop = threading.Event()
    crowd = [
        Annotator(live_server.url, competition_id, token, seed, to_flag, stop)
        for seed, token in enumerate(tokens)
    ]
    with ThreadPoolExecutor(ANNOTATORS) as pool:
        for _ in range(MAX_CROWD_PASSES):  # an undo after others finished reopens a question: they come back
            list(pool.map(lambda annotator: annotator.run(), crowd))
            if stop.is_set() or not any(annotator.labelled for annotator in crowd):
                break
    for annotator in crowd:
        annotator.client.close()
    assert [a.error for a in crowd if a.error] == []
    assert not any(annotator.labelled for annotator in crowd), "a pass in which nobody was given an image"

    with live_server.sessions() as db_session:
        index_of = {f"crowd-{index}": index for index in range(ANNOTATORS)}
        usernames = dict(db_session.execute(select(User.id, User.username)).all())
        rows = db_session.execute(select(Vote.question_id, Vote.user_id, Vote.answer)).all()
        stored = {
            (index_of[usernames[user_id]], question_id, answer) for question_id, user_id, answer in rows
        }
        assert len({(user, question) for user, question, _ in stored}) == len(stored) == len(rows)
        acknowledged = {
            (index, question_id, answer)
            for index, annotator in enumerate(crowd)
            for question_id, answer in annotator.recorded.items()
        }
        assert stored == acknowledged  # no vote lost, none stored that the server did not acknowledge
        per_question = Counter(question_id for _, question_id, _ in stored)

        majority = rules.majority(5)
        discarded = set(db_session.scalars(select(LabelItem.image_id).where(LabelItem.discarded)))
        assert discarded, "the always-flagged images were discarded"
        refused = {item_id for annotator in crowd for item_id in annotator.flags_refused}
        assert refused <= set(db_session.scalars(select(LabelItem.id).where(LabelItem.discarded)))
        questions = db_session.scalars(select(Question)).all()
        for question in questions:
            yes = sum(1 for _, q, answer in stored if q == question.id and answer)
            no = per_question[question.id] - yes
            assert (question.yes_votes, question.no_votes) == (yes, no)
            assert yes + no <= 5
            if question.image_id in discarded:
                continue
            assert question.outcome is not None, "every question left to the crowd was decided"
            assert max(yes, no) == majority  # decided exactly at the majority, never asked past it
            assert question.outcome == (yes > no)
        assert db_session.scalar(select(LabelItem.id).where(LabelItem.needed > 0)) is None


def test_two_undos_at_once_neither_fail_nor_take_back_the_same_answer(fresh_database_url):
    engine = create_db_engine(fresh_database_url)
    sessions = create_sessionmaker(engine)
    with sessions() as db_session:
        competition = create_competition(db_session=db_session, spec=CompetitionCreate(name="twice", k=4))
        labelling_competition(db_session, competition, classifiers=2, images_per_pair=4)
        user = make_user(db_session, "twice", Role.annotator)
        for _ in range(2):  # four answers on two images, and no undo row yet
            answer_next(db_session, competition, user)
        competition_id, user_id = competition.id, user.id
    both_ready = threading.Barrier(2)

    def undo() -> int | None:
        """Undo in a session of its own once both are ready; the question undone, or None on a 409."""
        both_ready.wait()
        with sessions() as db_session:
            try:
                result = undo_last(
                    db_session=db_session,
                    competition=db_session.get_one(Competition, competition_id),
                    user=db_session.get_one(User, user_id),
                )
            except Conflict:
                return None
            db_session.commit()
            return result.question_id

    try:
        with ThreadPoolExecutor(2) as pool:
            undone = [question_id for question_id in pool.map(lambda _: undo(), range(2)) if question_id]
        assert undone and len(set(undone)) == len(undone)
        with sessions() as db_session:
            votes = Counter(db_session.scalars(select(Vote.question_id)))
            assert sum(votes.values()) == 4 - len(undone) and not set(undone) & set(votes)
            assert db_session.get_one(UndoDepth, (competition_id, user_id)).depth == len(undone)
            for question in db_session.scalars(select(Question)):
                assert question.yes_votes + question.no_votes == votes[question.id]
    finally:
        engine.dispose()


def test_next_does_not_wait_for_a_gold_image_another_request_has_locked(fresh_database_url):
    """An undo locks its image's item before the annotator's undo row; a submit that brings the next item
    holds that row when it picks a gold image, so waiting for the gold item's lock there would deadlock."""
    if fresh_database_url.startswith("sqlite"):
        pytest.skip("SQLite serialises writers: no row locks to wait for")
    engine = create_db_engine(fresh_database_url)
    sessions = create_sessionmaker(engine)
    with sessions() as db_session:
        competition = create_competition(
            db_session=db_session, spec=CompetitionCreate(name="gold-held", k=1, gold_rate=0.5)
        )
        labelling_competition(db_session, competition, classifiers=2, images_per_pair=1)  # one regular image
        (gold_image_id,) = add_images(db_session, competition, 1, seed=99)  # selected by no pair
        gold_sha256 = db_session.get_one(Image, gold_image_id).sha256
        add_gold_questions(
            db_session=db_session,
            competition=competition,
            image_sha256=gold_sha256,
            answers=[(7, True), (8, False)],
        )
        user = make_user(db_session, "gold-held", Role.annotator)
        db_session.commit()
        competition_id, user_id = competition.id, user.id
    try:
        with sessions() as holder, sessions() as db_session:
            holder.execute(select(LabelItem).where(LabelItem.image_id == gold_image_id).with_for_update())
            db_session.execute(text("SET LOCAL lock_timeout = '5s'"))
            given = next_item(
                db_session=db_session,
                competition=db_session.get_one(Competition, competition_id),
                user=db_session.get_one(User, user_id),
            ).item
            assert given is not None and given.image_sha256 != gold_sha256  # the queue's, at once
            holder.rollback()
            db_session.commit()
        with sessions() as db_session:  # the gold image comes once it is free (and nothing else is left)
            competition = db_session.get_one(Competition, competition_id)
            user = db_session.get_one(User, user_id)
            submit_answers(
                db_session=db_session,
                competition=competition,
                user=user,
                answers=[Answer(q.question_id, True, 1.0) for q in given.questions],
            )
            after = next_item(db_session=db_session, competition=competition, user=user).item
            assert after is not None and after.image_sha256 == gold_sha256
    finally:
        engine.dispose()
