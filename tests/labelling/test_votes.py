"""Vote logic on both databases: majority with early stop, excluded votes, gold questions."""

from datetime import timedelta

import pytest
from sqlalchemy import func, select, update

from app.db.base import utcnow
from app.errors import Conflict, InvalidInput
from app.images.models import Image
from app.labelling.annotating.answers import submit_answers
from app.labelling.annotating.queue import next_item
from app.labelling.models import Assignment, LabelItem, Question, Vote
from app.labelling.quality_control.annotators import annotator_stats, set_votes_excluded
from app.labelling.quality_control.gold import add_gold_questions
from app.labelling.types import Answer
from app.users.models import Role
from tests.conftest import make_user
from tests.labelling.factories import add_images, answer_next, labelling_competition


def annotators(db_session, count: int, prefix: str = "annotator"):
    """count annotator accounts."""
    return [make_user(db_session, f"{prefix}-{index}", Role.annotator) for index in range(count)]


def one_image_competition(db_session, competition):
    """One pair selecting one image (k = 1) with two reserves; returns the selected image's questions."""
    competition.k = 1
    labelling_competition(db_session, competition, classifiers=2, images_per_pair=3)
    return db_session.scalars(select(Question).order_by(Question.id)).all()


def counts(db_session, question: Question) -> tuple[int, int, bool | None, int]:
    """(yes_votes, no_votes, outcome, stored votes) of a question, read afresh."""
    db_session.refresh(question)
    stored = db_session.scalar(select(func.count()).where(Vote.question_id == question.id))
    return question.yes_votes, question.no_votes, question.outcome, stored


def test_three_concordant_votes_of_five_decide_and_stop_the_asking(db_session, competition):
    questions = one_image_competition(db_session, competition)
    assert len(questions) == 2
    users = annotators(db_session, 4)
    for user in users[:2]:
        answer_next(db_session, competition, user, True)
    assert [counts(db_session, q)[:3] for q in questions] == [(2, 0, None)] * 2
    answer_next(db_session, competition, users[2], True)
    assert [counts(db_session, q) for q in questions] == [(3, 0, True, 3)] * 2
    assert all(q.decided_at is not None for q in questions)
    fourth = next_item(db_session=db_session, competition=competition, user=users[3])
    assert fourth.item is None and fourth.status == "finished"


def test_split_votes_go_on_to_the_fifth_annotator_and_never_past_the_panel(db_session, competition):
    questions = one_image_competition(db_session, competition)
    users = annotators(db_session, 6)
    for user, answer in zip(users, [True, False, True, False], strict=False):
        answer_next(db_session, competition, user, answer)
    assert [counts(db_session, q)[:3] for q in questions] == [(2, 2, None)] * 2
    assert answer_next(db_session, competition, users[4], False) is not None
    assert [counts(db_session, q) for q in questions] == [(2, 3, False, 5)] * 2
    assert answer_next(db_session, competition, users[5], True) is None


def test_an_answer_to_a_question_decided_meanwhile_is_not_stored(db_session, competition):
    questions = one_image_competition(db_session, competition)
    users = annotators(db_session, 4)
    assert next_item(db_session=db_session, competition=competition, user=users[3]).item is not None
    db_session.execute(  # users[3] keeps the image past its lease: the others take its place
        update(Assignment).values(expires_at=utcnow() - timedelta(seconds=1))
    )
    db_session.commit()
    for user in users[:3]:
        answer_next(db_session, competition, user, True)
    late = submit_answers(
        db_session=db_session,
        competition=competition,
        user=users[3],
        answers=[Answer(q.id, False, 1.0) for q in questions],
    )
    assert late.recorded == 0 and sorted(late.already_decided) == [q.id for q in questions]
    assert [counts(db_session, q) for q in questions] == [(3, 0, True, 3)] * 2


def test_resending_an_answer_is_a_no_op_and_changing_it_needs_undo(db_session, competition):
    questions = one_image_competition(db_session, competition)
    (user,) = annotators(db_session, 1)
    answer_next(db_session, competition, user, True)
    again = submit_answers(
        db_session=db_session,
        competition=competition,
        user=user,
        answers=[Answer(questions[0].id, True, 1.0)],
    )
    assert again.recorded == 0
    with pytest.raises(Conflict, match="undo"):
        submit_answers(
            db_session=db_session,
            competition=competition,
            user=user,
            answers=[Answer(questions[0].id, False, 1.0)],
        )
    db_session.rollback()
    assert counts(db_session, questions[0])[:2] == (1, 0)


def test_excluded_votes_do_not_count_and_toggling_exclusion_re_decides(db_session, competition):
    questions = one_image_competition(db_session, competition)
    users = annotators(db_session, 4)
    for user in users[:3]:
        answer_next(db_session, competition, user, True)
    assert [counts(db_session, q)[2] for q in questions] == [True, True]

    set_votes_excluded(db_session=db_session, user=users[0], votes_excluded=True)
    db_session.commit()
    assert [counts(db_session, q) for q in questions] == [(2, 0, None, 3)] * 2
    assert all(q.decided_at is None for q in questions)
    item = db_session.scalar(select(LabelItem).where(LabelItem.image_id == questions[0].image_id))
    assert item.needed == 1
    assert answer_next(db_session, competition, users[3], False) is not None  # reopened for a fourth person
    assert [counts(db_session, q) for q in questions] == [(2, 1, None, 4)] * 2

    set_votes_excluded(db_session=db_session, user=users[0], votes_excluded=False)
    db_session.commit()
    assert [counts(db_session, q) for q in questions] == [(3, 1, True, 4)] * 2
    db_session.refresh(item)
    assert item.needed == 0


def test_an_excluded_annotator_still_labels_but_is_not_counted(db_session, competition):
    questions = one_image_competition(db_session, competition)
    users = annotators(db_session, 4)
    set_votes_excluded(db_session=db_session, user=users[0], votes_excluded=True)
    for user in users:
        answer_next(db_session, competition, user, True)
    assert [counts(db_session, q) for q in questions] == [(3, 0, True, 4)] * 2


def test_gold_questions_are_mixed_in_and_measure_accuracy(db_session, competition):
    one_image_competition(db_session, competition)
    competition.gold_rate = 0.5
    (gold_image,) = add_images(db_session, competition, 1, seed=99)  # selected by no pair
    image = db_session.get(Image, gold_image)
    gold = add_gold_questions(
        db_session=db_session,
        competition=competition,
        image_sha256=image.sha256,
        answers=[(7, True), (8, False)],
    )
    db_session.commit()
    (user,) = annotators(db_session, 1)

    given = [answer_next(db_session, competition, user, False) for _ in range(2)]  # no, no: one gold is right
    assert answer_next(db_session, competition, user) is None  # gold at random or when nothing else is left
    gold_ids = sorted(q.id for q in gold)
    assert sorted(sorted(q.question_id for q in item.questions) == gold_ids for item in given) == [
        False,
        True,
    ]
    for question in gold:
        db_session.refresh(question)
    assert [q.outcome for q in gold] == [True, False]
    assert all(q.yes_votes == q.no_votes == 0 for q in gold)
    (stats,) = annotator_stats(db_session=db_session, competition=competition, user_ids=[user.id])
    assert (stats.answered_total, stats.gold_answered, stats.gold_correct) == (4, 2, 1)
    assert stats.gold_accuracy == 0.5


def test_a_gold_image_must_show_two_questions_like_the_others(db_session, competition):
    one_image_competition(db_session, competition)
    (lone,) = add_images(db_session, competition, 1, seed=98)  # selected by no pair
    with pytest.raises(InvalidInput, match="two questions"):
        add_gold_questions(
            db_session=db_session,
            competition=competition,
            image_sha256=db_session.get(Image, lone).sha256,
            answers=[(7, True)],
        )
    assert db_session.scalars(select(Question).where(Question.image_id == lone)).all() == []
    assert db_session.scalar(select(LabelItem).where(LabelItem.image_id == lone)) is None


def test_a_gold_answer_decides_an_open_question(db_session, competition):
    questions = one_image_competition(db_session, competition)
    image = db_session.get(Image, questions[0].image_id)
    add_gold_questions(
        db_session=db_session,
        competition=competition,
        image_sha256=image.sha256,
        answers=[(questions[0].class_index, False)],
    )
    db_session.commit()
    assert counts(db_session, questions[0])[2] is False
    item = db_session.scalar(select(LabelItem).where(LabelItem.image_id == image.id))
    assert item.needed == 3  # the other question is still open
