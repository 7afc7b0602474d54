"""Pair subsets: storing selections, shared questions, outcomes per pair, and difficult images replaced."""

from datetime import timedelta

import numpy as np
import pytest
from sqlalchemy import func, select, update

from app.db.base import utcnow
from app.errors import Conflict, InvalidInput, NotFound
from app.labelling.annotating.answers import flag_image, submit_answers
from app.labelling.annotating.queue import next_item
from app.labelling.models import Assignment, LabelItem, PairImage, PairSubset, Question
from app.labelling.results import pair_outcomes
from app.labelling.subsets import discard_image, store_pair_subset
from app.labelling.types import Answer
from app.users.models import Role
from tests.conftest import make_user
from tests.labelling.factories import add_classifiers, add_images, answer_next, entries, labelling_competition


def roles(db_session, subset: PairSubset) -> list[tuple[int, str]]:
    """(image id, role) of a subset in position order."""
    rows = db_session.execute(
        select(PairImage.image_id, PairImage.role)
        .where(PairImage.subset_id == subset.id)
        .order_by(PairImage.position)
        .execution_options(populate_existing=True)
    )
    return [(image_id, role.value) for image_id, role in rows]


def questions_of(db_session, image_id: int) -> set[int]:
    """Class indexes asked about an image."""
    return set(db_session.scalars(select(Question.class_index).where(Question.image_id == image_id)))


def take_and_flag(db_session, competition, user, item_id: int) -> bool:
    """The annotator is given the item and flags it; whether the image is now discarded."""
    given = next_item(db_session=db_session, competition=competition, user=user).item
    assert given.item_id == item_id
    return flag_image(db_session=db_session, competition=competition, user=user, item_id=item_id)


def test_the_first_k_are_selected_the_rest_reserve_and_only_selected_are_asked(db_session, competition):
    competition.k = 2
    a, b = add_classifiers(db_session, competition, 2)
    images = add_images(db_session, competition, 4)
    subset = store_pair_subset(
        db_session=db_session,
        competition=competition,
        classifier_a_id=a,
        classifier_b_id=b,
        entries=entries(images, [(10, 20), (11, 21), (12, 22), (13, 23)]),
    )
    assert roles(db_session, subset) == [
        (images[0], "selected"),
        (images[1], "selected"),
        (images[2], "reserve"),
        (images[3], "reserve"),
    ]
    assert [questions_of(db_session, image) for image in images] == [{10, 20}, {11, 21}, set(), set()]
    stored = db_session.scalars(select(PairImage).where(PairImage.position == 0)).one()
    assert (stored.label_a, stored.label_b, stored.distance, stored.prob_a) == (10, 20, 1.0, 0.9)


def test_storing_a_pair_again_is_a_no_op(db_session, competition):
    a, b = add_classifiers(db_session, competition, 2)
    images = add_images(db_session, competition, 2)
    first = store_pair_subset(
        db_session=db_session,
        competition=competition,
        classifier_a_id=a,
        classifier_b_id=b,
        entries=entries(images, [(1, 2), (3, 4)]),
    )
    again = store_pair_subset(
        db_session=db_session,
        competition=competition,
        classifier_a_id=a,
        classifier_b_id=b,
        entries=entries(images[:1], [(5, 6)]),
    )
    assert again.id == first.id
    assert db_session.scalar(select(func.count()).select_from(PairImage)) == 2
    assert db_session.scalar(select(func.count()).select_from(Question)) == 4


def test_a_question_asked_by_two_pairs_is_stored_once(db_session, competition):
    a, b, c = add_classifiers(db_session, competition, 3)
    (image,) = add_images(db_session, competition, 1)
    for pair, labels in (((a, b), (5, 6)), ((a, c), (5, 7))):
        store_pair_subset(
            db_session=db_session,
            competition=competition,
            classifier_a_id=pair[0],
            classifier_b_id=pair[1],
            entries=entries([image], [labels]),
        )
    assert sorted(db_session.scalars(select(Question.class_index))) == [5, 6, 7]
    assert db_session.scalar(select(func.count()).select_from(LabelItem)) == 1


@pytest.mark.parametrize(
    ("pair", "labels", "error"),
    [
        ((1, 0), [(1, 2)], InvalidInput),  # a must be below b
        ((0, 1), [(3, 3)], InvalidInput),  # the two labels differ
        ((0, 1), [(1, 5000)], InvalidInput),  # outside the label set
    ],
)
def test_bad_pairs_are_refused(db_session, competition, pair, labels, error):
    ids = add_classifiers(db_session, competition, 2)
    images = add_images(db_session, competition, 1)
    with pytest.raises(error):
        store_pair_subset(
            db_session=db_session,
            competition=competition,
            classifier_a_id=ids[pair[0]],
            classifier_b_id=ids[pair[1]],
            entries=entries(images, labels),
        )


def test_classifiers_and_images_must_belong_to_the_competition(db_session, competition):
    a, b = add_classifiers(db_session, competition, 2)
    images = add_images(db_session, competition, 1)
    with pytest.raises(NotFound):
        store_pair_subset(
            db_session=db_session,
            competition=competition,
            classifier_a_id=a,
            classifier_b_id=b + 1000,
            entries=entries(images, [(1, 2)]),
        )
    with pytest.raises(InvalidInput):
        store_pair_subset(
            db_session=db_session,
            competition=competition,
            classifier_a_id=a,
            classifier_b_id=b,
            entries=entries([images[0] + 1000], [(1, 2)]),
        )


def test_pair_outcomes_count_only_images_with_both_questions_decided(db_session, competition):
    competition.k = 2
    subsets = labelling_competition(db_session, competition, classifiers=3, images_per_pair=2)
    users = [make_user(db_session, f"user-{index}", Role.annotator) for index in range(3)]
    for user in users:  # three annotators answer the first item they get with yes
        answer_next(db_session, competition, user, True)
    outcomes = pair_outcomes(db_session=db_session, competition=competition)
    pairs = [(s.classifier_a_id, s.classifier_b_id) for s in subsets]
    assert list(outcomes) == pairs
    assert sorted(len(outcomes[pair]) for pair in pairs) == [0, 0, 1]
    labelled = next(array for array in outcomes.values() if len(array))
    assert labelled.dtype == np.bool_ and labelled.tolist() == [[True, True]]
    assert all(outcomes[pair].shape == (0, 2) for pair in pairs if not len(outcomes[pair]))


def test_pair_outcomes_say_which_classifier_was_right(db_session, competition):
    competition.k = 1
    (subset,) = labelling_competition(db_session, competition, classifiers=2, images_per_pair=1)
    image = db_session.scalar(select(PairImage).where(PairImage.subset_id == subset.id))
    truth = {image.label_a: False, image.label_b: True}
    for index in range(3):
        user = make_user(db_session, f"user-{index}", Role.annotator)
        item = next_item(db_session=db_session, competition=competition, user=user).item
        submit_answers(
            db_session=db_session,
            competition=competition,
            user=user,
            answers=[Answer(q.question_id, truth[q.class_index], 1.0) for q in item.questions],
        )
    outcomes = pair_outcomes(db_session=db_session, competition=competition)
    assert outcomes[(subset.classifier_a_id, subset.classifier_b_id)].tolist() == [[False, True]]


def test_four_of_five_flags_discard_an_image_for_every_pair_and_promote_their_reserves(
    db_session, competition
):
    competition.k = 1
    a, b, c = add_classifiers(db_session, competition, 3)
    shared, reserve_ab, reserve_ac = add_images(db_session, competition, 3)
    subset_ab = store_pair_subset(
        db_session=db_session,
        competition=competition,
        classifier_a_id=a,
        classifier_b_id=b,
        entries=entries([shared, reserve_ab], [(1, 2), (3, 4)]),
    )
    subset_ac = store_pair_subset(
        db_session=db_session,
        competition=competition,
        classifier_a_id=a,
        classifier_b_id=c,
        entries=entries([shared, reserve_ac], [(1, 5), (6, 7)]),
    )
    db_session.commit()
    users = [make_user(db_session, f"user-{index}", Role.annotator) for index in range(5)]
    item_id = db_session.scalar(select(LabelItem.id).where(LabelItem.image_id == shared))
    discarded = [take_and_flag(db_session, competition, user, item_id) for user in users[:4]]
    assert discarded == [False, False, False, True]
    assert roles(db_session, subset_ab) == [(shared, "discarded"), (reserve_ab, "selected")]
    assert roles(db_session, subset_ac) == [(shared, "discarded"), (reserve_ac, "selected")]
    assert questions_of(db_session, reserve_ab) == {3, 4} and questions_of(db_session, reserve_ac) == {6, 7}
    item = db_session.get(LabelItem, item_id)
    assert item.discarded and item.needed == 0 and item.flags == 4
    offered = next_item(db_session=db_session, competition=competition, user=users[4]).item
    assert offered.item_id != item_id  # the fifth annotator gets a replacement, not the discarded image


def test_an_image_already_discarded_is_replaced_when_another_pair_selects_it(db_session, competition):
    competition.k = 1
    a, b, c = add_classifiers(db_session, competition, 3)
    shared, reserve_ab, reserve_ac = add_images(db_session, competition, 3)
    store_pair_subset(
        db_session=db_session,
        competition=competition,
        classifier_a_id=a,
        classifier_b_id=b,
        entries=entries([shared, reserve_ab], [(1, 2), (3, 4)]),
    )
    item_id = db_session.scalar(select(LabelItem.id).where(LabelItem.image_id == shared))
    for index in range(4):
        take_and_flag(
            db_session, competition, make_user(db_session, f"user-{index}", Role.annotator), item_id
        )
    later = store_pair_subset(
        db_session=db_session,
        competition=competition,
        classifier_a_id=a,
        classifier_b_id=c,
        entries=entries([shared, reserve_ac], [(1, 5), (6, 7)]),
    )
    assert roles(db_session, later) == [(shared, "discarded"), (reserve_ac, "selected")]
    assert 5 not in questions_of(db_session, shared)


def test_a_flagger_is_not_asked_the_image_again(db_session, competition):
    competition.k = 1
    labelling_competition(db_session, competition, classifiers=2, images_per_pair=2)
    user = make_user(db_session, "flagger", Role.annotator)
    item = next_item(db_session=db_session, competition=competition, user=user).item
    assert (
        flag_image(db_session=db_session, competition=competition, user=user, item_id=item.item_id) is False
    )
    assert next_item(db_session=db_session, competition=competition, user=user).status == "finished"


def test_a_flag_on_an_image_decided_or_discarded_meanwhile_is_refused(db_session, competition):
    competition.k = 2
    (subset,) = labelling_competition(db_session, competition, classifiers=2, images_per_pair=3)
    first_image = roles(db_session, subset)[0][0]
    first_item = db_session.scalar(select(LabelItem.id).where(LabelItem.image_id == first_image))
    late, *voters = [make_user(db_session, f"user-{index}", Role.annotator) for index in range(4)]
    assert next_item(db_session=db_session, competition=competition, user=late).item.item_id == (first_item)
    db_session.execute(update(Assignment).values(expires_at=utcnow() - timedelta(seconds=1)))
    for voter in voters:  # the late annotator's lease ran out; three others decide both questions
        assert answer_next(db_session, competition, voter, True).item_id == first_item
    with pytest.raises(Conflict, match="decided meanwhile"):
        flag_image(db_session=db_session, competition=competition, user=late, item_id=first_item)
    db_session.rollback()
    item = db_session.get(LabelItem, first_item, populate_existing=True)
    assert (item.flags, item.discarded) == (0, False)
    assert roles(db_session, subset)[0] == (first_image, "selected")

    second_item = db_session.scalar(select(LabelItem.id).where(LabelItem.image_id != first_image))
    assert next_item(db_session=db_session, competition=competition, user=late).item.item_id == (second_item)
    flaggers = [make_user(db_session, f"flagger-{index}", Role.annotator) for index in range(4)]
    assert [take_and_flag(db_session, competition, f, second_item) for f in flaggers][-1] is True
    with pytest.raises(Conflict, match="discarded this image meanwhile"):
        flag_image(db_session=db_session, competition=competition, user=late, item_id=second_item)


def test_a_new_question_on_a_finished_image_is_asked_to_those_who_finished_it(db_session, competition):
    competition.k = 1
    a, b, c = add_classifiers(db_session, competition, 3)
    (image,) = add_images(db_session, competition, 1)
    store_pair_subset(
        db_session=db_session,
        competition=competition,
        classifier_a_id=a,
        classifier_b_id=b,
        entries=entries([image], [(1, 2)]),
    )
    user = make_user(db_session, "early", Role.annotator)
    answer_next(db_session, competition, user, True)
    assert next_item(db_session=db_session, competition=competition, user=user).item is None
    store_pair_subset(  # Algorithm 2: a new classifier's pair selects the same image
        db_session=db_session,
        competition=competition,
        classifier_a_id=a,
        classifier_b_id=c,
        entries=entries([image], [(1, 9)]),
    )
    item = next_item(db_session=db_session, competition=competition, user=user).item
    assert [q.class_index for q in item.questions] == [9]
    assert db_session.scalar(select(func.count()).select_from(Assignment)) == 1


def test_discarding_an_image_promotes_each_pairs_reserve_once(db_session, competition):
    competition.k = 1
    (subset,) = labelling_competition(db_session, competition, classifiers=2, images_per_pair=2)
    selected, reserve = (image_id for image_id, _ in roles(db_session, subset))
    assert discard_image(db_session=db_session, competition=competition, image_id=selected) is True
    assert roles(db_session, subset) == [(selected, "discarded"), (reserve, "selected")]
    assert discard_image(db_session=db_session, competition=competition, image_id=selected) is False
    assert discard_image(db_session=db_session, competition=competition, image_id=reserve + 1000) is False
