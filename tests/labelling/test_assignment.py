"""Handing out images under leases, resuming, and undo (the last ten stay editable)."""

from datetime import timedelta

import pytest
from sqlalchemy import select, update

from app.db.base import utcnow
from app.errors import Conflict, NotFound
from app.labelling.annotating.answers import flag_image, submit_answers
from app.labelling.annotating.queue import next_item
from app.labelling.annotating.undo import undo_last
from app.labelling.models import (
    Assignment,
    AssignmentStatus,
    DifficultyFlag,
    LabelItem,
    PairImage,
    Question,
    Vote,
)
from app.labelling.types import Answer, PresentedItem
from app.users.models import Role
from tests.conftest import make_user
from tests.labelling.factories import answer_next, labelling_competition


def annotators(db_session, count: int):
    """count annotator accounts."""
    return [make_user(db_session, f"annotator-{index}", Role.annotator) for index in range(count)]


def take(db_session, competition, user) -> PresentedItem | None:
    """The annotator's next item (leased, not answered), committed."""
    item = next_item(db_session=db_session, competition=competition, user=user).item
    db_session.commit()
    return item


def answer(db_session, competition, user, item: PresentedItem, value: bool = True, count: int | None = None):
    """Answer the first `count` (default all) questions of an item."""
    submit_answers(
        db_session=db_session,
        competition=competition,
        user=user,
        answers=[Answer(q.question_id, value, 1.5) for q in item.questions[:count]],
    )
    db_session.commit()


def position_of(db_session, item: PresentedItem) -> tuple[int, int]:
    """(subset id, position) of the image of an item in its pair."""
    image_id = db_session.get(LabelItem, item.item_id).image_id
    return db_session.execute(
        select(PairImage.subset_id, PairImage.position).where(PairImage.image_id == image_id)
    ).one()


def test_a_reload_resumes_the_leased_item(db_session, competition):
    labelling_competition(db_session, competition, classifiers=2, images_per_pair=5)
    (user,) = annotators(db_session, 1)
    first = take(db_session, competition, user)
    assert take(db_session, competition, user).item_id == first.item_id
    answer(db_session, competition, user, first, count=1)  # half answered: the other question is still due
    resumed = take(db_session, competition, user)
    assert resumed.item_id == first.item_id
    assert [q.question_id for q in resumed.questions] == [first.questions[1].question_id]


def test_an_annotator_is_never_given_an_image_twice(db_session, competition):
    competition.k = 4
    labelling_competition(db_session, competition, classifiers=3, images_per_pair=4)
    (user,) = annotators(db_session, 1)
    seen = []
    while (item := answer_next(db_session, competition, user)) is not None:
        seen.append(item.item_id)
    assert len(seen) == len(set(seen)) == 12
    assert next_item(db_session=db_session, competition=competition, user=user).status == "finished"


def test_no_more_leases_on_an_image_than_votes_it_still_needs(db_session, competition):
    competition.k = 1
    labelling_competition(db_session, competition, classifiers=2, images_per_pair=1)
    users = annotators(db_session, 5)
    items = [take(db_session, competition, user) for user in users[:3]]
    assert len({item.item_id for item in items}) == 1  # three votes needed: three leases
    fourth = next_item(db_session=db_session, competition=competition, user=users[3])
    assert fourth.item is None and fourth.status == "busy"
    db_session.rollback()

    answer(db_session, competition, users[0], items[0], value=True)
    answer(
        db_session, competition, users[1], items[1], value=True
    )  # one vote from a decision, one lease left
    assert take(db_session, competition, users[3]) is None

    db_session.execute(
        update(Assignment)
        .where(Assignment.user_id == users[2].id)
        .values(expires_at=utcnow() - timedelta(seconds=1))
    )
    db_session.commit()
    assert (
        take(db_session, competition, users[3]).item_id == items[0].item_id
    )  # the expired lease is taken over
    assert take(db_session, competition, users[4]) is None


def test_pausing_an_annotator_ends_their_leases_at_once(db_session, competition, client, admin_headers):
    competition.k = 1
    labelling_competition(db_session, competition, classifiers=2, images_per_pair=1)
    users = annotators(db_session, 4)
    held = [take(db_session, competition, user) for user in users[:3]]  # three votes needed: three leases
    assert take(db_session, competition, users[3]) is None
    paused = client.patch(f"/api/v1/users/{users[0].id}", json={"is_active": False}, headers=admin_headers)
    assert paused.status_code == 200, paused.text
    assert take(db_session, competition, users[3]).item_id == held[0].item_id
    statuses = db_session.execute(
        select(Assignment.user_id, Assignment.status, Assignment.expires_at > utcnow()).order_by(
            Assignment.user_id
        )
    ).all()
    assert [(status, running) for _, status, running in statuses] == [
        (AssignmentStatus.leased, False),  # the paused annotator's lease ended
        (AssignmentStatus.leased, True),
        (AssignmentStatus.leased, True),
        (AssignmentStatus.leased, True),
    ]


def test_a_late_answer_after_the_lease_expired_still_counts_while_the_question_is_open(
    db_session, competition
):
    competition.k = 1
    labelling_competition(db_session, competition, classifiers=2, images_per_pair=1)
    (user,) = annotators(db_session, 1)
    item = take(db_session, competition, user)
    db_session.execute(update(Assignment).values(expires_at=utcnow() - timedelta(minutes=5)))
    answer(db_session, competition, user, item)
    assert db_session.scalar(select(Question.yes_votes).limit(1)) == 1


def test_partly_voted_images_come_first(db_session, competition):
    competition.k = 3
    labelling_competition(db_session, competition, classifiers=3, images_per_pair=3)
    first_user, second_user = annotators(db_session, 2)
    started = answer_next(db_session, competition, first_user)
    assert take(db_session, competition, second_user).item_id == started.item_id


def test_pairs_advance_together(db_session, competition):
    competition.k = 3
    subsets = labelling_competition(db_session, competition, classifiers=3, images_per_pair=3)
    (user,) = annotators(db_session, 1)
    order = []
    while (item := answer_next(db_session, competition, user)) is not None:
        order.append(position_of(db_session, item))
    assert [position for _, position in order] == [0, 0, 0, 1, 1, 1, 2, 2, 2]
    for start in (0, 3, 6):
        assert {subset for subset, _ in order[start : start + 3]} == {subset.id for subset in subsets}


def test_undo_takes_back_the_last_answer_and_asks_it_again_first(db_session, competition):
    labelling_competition(db_session, competition, classifiers=2, images_per_pair=5)
    (user,) = annotators(db_session, 1)
    item = answer_next(db_session, competition, user, True)
    last_question = item.questions[-1].question_id
    undone = undo_last(db_session=db_session, competition=competition, user=user)
    db_session.commit()
    assert undone.undone == "answer"
    assert [q.question_id for q in undone.item.questions] == [last_question]
    assert db_session.scalar(select(Vote).where(Vote.question_id == last_question)) is None
    assert take(db_session, competition, user).item_id == item.item_id  # the page shows it again


def test_undoing_a_deciding_vote_reopens_the_question(db_session, competition):
    competition.k = 1
    labelling_competition(db_session, competition, classifiers=2, images_per_pair=1)
    users = annotators(db_session, 3)
    for user in users:
        answer_next(db_session, competition, user, True)
    assert db_session.scalar(select(LabelItem.needed)) == 0
    undo_last(db_session=db_session, competition=competition, user=users[2])
    db_session.commit()
    undone = db_session.scalars(select(Question).where(Question.yes_votes == 2)).one()
    assert undone.outcome is None and undone.decided_at is None
    assert db_session.scalar(select(LabelItem.needed).execution_options(populate_existing=True)) == 1


def test_only_the_last_ten_answers_stay_editable(db_session, competition):
    competition.k = 8
    labelling_competition(db_session, competition, classifiers=2, images_per_pair=8)
    (user,) = annotators(db_session, 1)
    for _ in range(6):  # twelve answers
        answer_next(db_session, competition, user)
    for _ in range(10):
        undo_last(db_session=db_session, competition=competition, user=user)
        db_session.commit()
    with pytest.raises(Conflict, match="last 10"):
        undo_last(db_session=db_session, competition=competition, user=user)
    db_session.rollback()

    item = take(db_session, competition, user)  # one new answer: one step of undo comes back
    answer(db_session, competition, user, item, count=1)
    undo_last(db_session=db_session, competition=competition, user=user)
    db_session.commit()
    with pytest.raises(Conflict):
        undo_last(db_session=db_session, competition=competition, user=user)
    db_session.rollback()
    assert len(db_session.scalars(select(Vote)).all()) == 2


def test_undo_takes_back_a_flag(db_session, competition):
    labelling_competition(db_session, competition, classifiers=2, images_per_pair=5)
    (user,) = annotators(db_session, 1)
    item = take(db_session, competition, user)
    flag_image(db_session=db_session, competition=competition, user=user, item_id=item.item_id)
    db_session.commit()
    undone = undo_last(db_session=db_session, competition=competition, user=user)
    db_session.commit()
    assert undone.undone == "flag" and undone.item.item_id == item.item_id
    assert len(undone.item.questions) == 2
    assert db_session.scalars(select(DifficultyFlag)).all() == []
    assert db_session.get(LabelItem, item.item_id).flags == 0
    status = db_session.scalar(select(Assignment.status).where(Assignment.item_id == item.item_id))
    assert status == AssignmentStatus.leased


def test_nothing_to_undo_is_not_found(db_session, competition):
    labelling_competition(db_session, competition, classifiers=2, images_per_pair=1)
    (user,) = annotators(db_session, 1)
    with pytest.raises(NotFound):
        undo_last(db_session=db_session, competition=competition, user=user)
