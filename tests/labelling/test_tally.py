"""The active policy's tally of decided questions (app/labelling/active_sampling/reliability.py) counts every
decision once, whatever order the deciding transactions commit in and whatever the deciding server's clock
says: two servers decide two images, the policy reruns between them, and both images' agreements are in the
annotators' tallies afterwards, each once; decisions made under uniform sampling are tallied once it switches
to active."""

from datetime import timedelta

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session

from app.competitions.models import Competition, Sampling
from app.competitions.schemas import CompetitionCreate
from app.competitions.service import create_competition
from app.db.base import utcnow
from app.db.engine import create_db_engine
from app.labelling.active_sampling import policy
from app.labelling.annotating import answers
from app.labelling.annotating.answers import submit_answers
from app.labelling.annotating.queue import next_item
from app.labelling.models import ActivePolicy, AnnotatorAgreement, LabelItem, Question, UntalliedDecision
from app.labelling.types import Answer, Labeller, LabellingSettings
from app.users import service as users_service
from app.users.models import Role
from tests.labelling.factories import labelling_competition


def two_images(db_session: Session) -> tuple[int, list[Labeller]]:
    """An active competition of one pair with two selected images, whose questions two agreeing votes decide
    (a panel of 3, nobody vetted yet), and four annotators."""
    competition = create_competition(
        db_session=db_session, spec=CompetitionCreate(name="tally", k=2, panel_size=3)
    )
    labelling_competition(db_session, competition, classifiers=2, images_per_pair=2)
    policy.set_sampling(db_session, competition, Sampling.active)
    people = [
        users_service.create_user(
            db_session=db_session, username=f"a{n}", role=Role.annotator, password="x" * 12
        )
        for n in range(4)
    ]
    db_session.commit()
    return competition.id, [Labeller(person.id, person.role, False, "en") for person in people]


def answer_yes(db_session: Session, competition_id: int, annotator: Labeller) -> int:
    """The annotator takes the next image and answers yes to its questions (not committed); its item id."""
    competition = LabellingSettings.of(db_session.get_one(Competition, competition_id))
    item = next_item(db_session=db_session, competition=competition, user=annotator).item
    assert item is not None
    submit_answers(
        db_session=db_session,
        competition=competition,
        user=annotator,
        answers=[Answer(question.question_id, True, 2.0) for question in item.questions],
    )
    return item.item_id


def rerun(sessions, competition_id: int) -> None:
    """The active policy reruns, in a transaction of its own."""
    with sessions() as db_session, db_session.begin():
        policy.refresh(db_session, db_session.get_one(Competition, competition_id))


def tallies(sessions, competition_id: int) -> tuple[dict[tuple[int, int], int], int, int]:
    """The pairs' tallied questions, the regular questions tallied, and the decisions still untallied."""
    with sessions() as db_session:
        pairs = {
            (row.user_a_id, row.user_b_id): row.questions
            for row in db_session.scalars(
                select(AnnotatorAgreement).where(AnnotatorAgreement.competition_id == competition_id)
            )
        }
        decided = db_session.scalar(
            select(ActivePolicy.decided_regular).where(ActivePolicy.competition_id == competition_id)
        )
        waiting = db_session.scalars(
            select(UntalliedDecision.id).where(UntalliedDecision.competition_id == competition_id)
        ).all()
        return pairs, decided, len(waiting)


def questions_of(sessions, item_id: int) -> int:
    """The item's decided questions."""
    with sessions() as db_session:
        decided = select(Question.id).join(LabelItem, LabelItem.image_id == Question.image_id)
        return len(
            db_session.scalars(decided.where(LabelItem.id == item_id, Question.outcome.is_not(None))).all()
        )


@pytest.fixture
def sessions(fresh_database_url):
    """Sessions on a database of the test's own, each committing for real (two servers and the policy)."""
    engine = create_db_engine(fresh_database_url)
    yield lambda: Session(engine, expire_on_commit=False)
    engine.dispose()


def test_a_decision_committed_after_a_rerun_that_tallied_a_later_one_is_tallied(sessions, backend):
    if backend == "sqlite":
        pytest.skip("SQLite runs one writer at a time: the first server's answer blocks the second's")
    with sessions() as db_session:
        competition_id, (first, second, third, fourth) = two_images(db_session)
        image = answer_yes(db_session, competition_id, first)
        db_session.commit()
    with sessions() as slow, sessions() as quick:
        assert answer_yes(slow, competition_id, second) == image  # decided first, not committed yet
        other = answer_yes(quick, competition_id, third)
        assert other != image, "the image the slow server holds locked is passed over"
        assert answer_yes(quick, competition_id, fourth) == other
        quick.commit()  # decided second, committed first
        rerun(sessions, competition_id)
        slow.commit()
    rerun(sessions, competition_id)

    pairs, decided, waiting = tallies(sessions, competition_id)
    per_image = questions_of(sessions, image)
    assert per_image == questions_of(sessions, other) == 2
    # A tally that took the newest decision time it read as its mark never counted the slow server's image.
    assert pairs == {(first.id, second.id): per_image, (third.id, fourth.id): per_image}
    assert (decided, waiting) == (2 * per_image, 0)


def test_a_decision_stamped_by_a_server_whose_clock_lags_is_tallied_once(sessions, monkeypatch):
    with sessions() as db_session:
        competition_id, (first, second, third, fourth) = two_images(db_session)
        image = answer_yes(db_session, competition_id, first)
        assert answer_yes(db_session, competition_id, second) == image
        other = answer_yes(db_session, competition_id, third)
        db_session.commit()
    rerun(sessions, competition_id)
    assert tallies(sessions, competition_id) == ({(first.id, second.id): 2}, 2, 0)

    monkeypatch.setattr(answers, "utcnow", lambda: utcnow() - timedelta(minutes=1))  # this server's clock
    with sessions() as db_session:
        assert answer_yes(db_session, competition_id, fourth) == other
        db_session.commit()
    rerun(sessions, competition_id)
    rerun(sessions, competition_id)

    # A tally that took the newest decision time it read as its mark never counted the lagging server's.
    assert tallies(sessions, competition_id) == ({(first.id, second.id): 2, (third.id, fourth.id): 2}, 4, 0)


def test_decisions_made_under_uniform_sampling_are_tallied_when_it_switches_to_active(sessions):
    with sessions() as db_session:
        competition_id, (first, second, _, _) = two_images(db_session)
        competition = db_session.get_one(Competition, competition_id)
        policy.set_sampling(db_session, competition, Sampling.uniform)
        db_session.commit()
        image = answer_yes(db_session, competition_id, first)
        assert answer_yes(db_session, competition_id, second) == image
        db_session.commit()
    assert questions_of(sessions, image) == 2

    with sessions() as db_session, db_session.begin():
        policy.set_sampling(db_session, db_session.get_one(Competition, competition_id), Sampling.active)

    assert tallies(sessions, competition_id) == ({(first.id, second.id): 2}, 2, 0)
