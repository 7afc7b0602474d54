"""The active policy's paced reads (app/labelling/active_sampling/reads.py): read a few pairs or items per
statement with pauses between, a rerun finds exactly what one statement each would, and the leaderboard's
labelled outcomes."""

from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np
from sqlalchemy import event, select, update

from app.competitions.models import Sampling
from app.competitions.schemas import CompetitionCreate
from app.competitions.service import create_competition
from app.db.base import utcnow
from app.labelling.active_sampling import cost, policy, reads
from app.labelling.active_sampling.cost import active_cost, full_design_votes
from app.labelling.active_sampling.reliability import tally_decided
from app.labelling.items import refresh_needed
from app.labelling.models import LabelItem, PairImage, PairSubset, Question, Vote
from app.labelling.results import pair_outcomes
from app.labelling.subsets import discard_item
from app.labelling.types import LabellingSettings
from app.users import service as users_service
from app.users.models import Role
from tests.labelling.factories import labelling_competition

PAIRS = 10
"""Pairs of the 5 classifiers."""


def half_labelled(db_session):
    """An active competition of 10 pairs of 6 images (k = 4 selected): the images at positions 0-1 of every
    pair labelled, at position 2 only the question about label_a decided (still open), the rest open."""
    competition = create_competition(db_session=db_session, spec=CompetitionCreate(name="paced", k=4))
    labelling_competition(db_session, competition, classifiers=5, images_per_pair=6)
    policy.set_sampling(db_session, competition, Sampling.active)
    at = (
        select(PairImage.image_id)
        .join(PairSubset, PairSubset.id == PairImage.subset_id)
        .where(PairSubset.competition_id == competition.id)
    )
    decide = update(Question).values(outcome=Question.id % 3 == 0, decided_at=utcnow())
    db_session.execute(decide.where(Question.image_id.in_(at.where(PairImage.position < 2))))
    first_label = select(PairImage.label_a).where(
        PairImage.position == 2, PairImage.image_id == Question.image_id
    )
    db_session.execute(
        decide.where(
            Question.image_id.in_(at.where(PairImage.position == 2)),
            Question.class_index == first_label.scalar_subquery(),
        )
    )
    db_session.commit()
    return competition


def test_a_paced_read_of_one_pair_at_a_time_finds_what_the_leaderboard_and_one_statement_find(
    db_session, monkeypatch
):
    competition = half_labelled(db_session)
    at_once = reads.read_pairs(db_session, competition, reads.Pace(0.0))
    monkeypatch.setattr(reads, "PAIRS_AT_ONCE", 1)
    pace = reads.Pace(0.5)
    one_by_one = reads.read_pairs(db_session, competition, pace)

    assert pace.paused_s > 0
    leaderboard = pair_outcomes(db_session=db_session, competition=competition)
    for read in (at_once, one_by_one):
        assert read.outcomes.keys() == leaderboard.keys() and len(leaderboard) == PAIRS
        for pair, labels in leaderboard.items():
            np.testing.assert_array_equal(read.outcomes[pair], labels)
            assert labels.shape == (2, 2), "positions 0 and 1 labelled, in selection order"
        # Positions 2 and 3 of every pair open (2 with one question decided), in both directions.
        assert read.open.open_images.sum() == 2 * 2 * PAIRS
        assert len(read.open.image_of_row) == 2 * PAIRS
    np.testing.assert_array_equal(one_by_one.open.image_of_row, at_once.open.image_of_row)
    np.testing.assert_array_equal(one_by_one.open.pair_of_row, at_once.open.pair_of_row)


@contextmanager
def counting_statements(db_session) -> Iterator[list[int]]:
    """A list that gets one entry per statement the session's connection executes within the block."""
    statements: list[int] = []

    def count(*_):
        statements.append(1)

    connection = db_session.connection()
    event.listen(connection, "before_cursor_execute", count)
    try:
        yield statements
    finally:
        event.remove(connection, "before_cursor_execute", count)


def test_statements_of_a_paced_read_each_cover_a_few_pairs(db_session, monkeypatch):
    competition = half_labelled(db_session)
    with counting_statements(db_session) as statements:
        reads.read_pairs(db_session, competition, reads.Pace(0.0))
        at_once = len(statements)
        monkeypatch.setattr(reads, "PAIRS_AT_ONCE", 3)
        reads.read_pairs(db_session, competition, reads.Pace(0.01))
    in_chunks = len(statements) - at_once
    # ceil(10 / 3) = 4 statements of selected images where one did at once; the rest the same.
    assert in_chunks - at_once == 4 - 1


def test_a_paced_rerun_changes_the_levels_an_unpaced_one_does_and_counts_its_pauses(db_session, monkeypatch):
    competition = half_labelled(db_session)
    unpaced = policy.rerun(db_session, competition)
    monkeypatch.setattr(reads, "PAIRS_AT_ONCE", 2)
    monkeypatch.setattr(reads, "ITEMS_AT_ONCE", 7)  # several statements, the last one short
    paced = policy.rerun(db_session, competition, pause=0.5)

    assert unpaced.paused_s == 0 and paced.paused_s > 0
    assert unpaced.decision is not None and paced.decision is not None
    np.testing.assert_array_equal(paced.decision.priority, unpaced.decision.priority)
    np.testing.assert_array_equal(paced.levels.item_ids, unpaced.levels.item_ids)
    np.testing.assert_array_equal(paced.levels.priorities, unpaced.levels.priorities)
    assert (unpaced.levels.priorities == 0).sum() == 2 * PAIRS, "the labelled images are parked"


def test_a_paced_full_design_counts_a_few_questions_at_a_time_what_one_statement_counts(
    db_session, monkeypatch
):
    competition = half_labelled(db_session)
    voters = [
        users_service.create_user(
            db_session=db_session, username=f"voter-{at}", role=Role.annotator, password="long enough"
        )
        for at in range(3)
    ]
    questions = db_session.scalars(
        select(Question).where(Question.competition_id == competition.id).order_by(Question.id)
    ).all()
    for at, question in enumerate(questions):  # 1, 2, 3, 1, 2, 3, … votes
        db_session.add_all(
            Vote(competition_id=competition.id, question_id=question.id, user_id=voter.id, answer=True)
            for voter in voters[: at % 3 + 1]
        )
    questions[0].gold_answer = True  # a gold question's votes and the question itself are not counted
    last_image = questions[-1].image_id
    item = db_session.scalars(select(LabelItem).where(LabelItem.image_id == last_image)).one()
    discard_item(db_session, LabellingSettings.of(competition), item)  # nor a discarded image's questions
    db_session.commit()
    regular = db_session.scalars(  # the reserve promoted in its place brought questions of its own
        select(Question.id).where(
            Question.competition_id == competition.id,
            Question.gold_answer.is_(None),
            Question.image_id != last_image,
        )
    ).all()
    with counting_statements(db_session) as statements:
        unpaced = full_design_votes(db_session, competition.id, 5, reads.Pace(0.0))
        at_once = len(statements)
        monkeypatch.setattr(cost, "QUESTIONS_AT_ONCE", 7)
        paced = full_design_votes(db_session, competition.id, 5, reads.Pace(0.001))
    assert unpaced == paced == len(regular) * 3  # a strict majority of 5
    span = max(regular) - questions[0].id + 1
    assert at_once == 3  # the ids' range, the questions at once, those on discarded images
    assert len(statements) - at_once == 1 + -(-span // 7) + 1, "no statement reads every vote or item"
    used = active_cost(db_session, competition.id, 5)
    assert used.votes_used == sum(at % 3 + 1 for at in range(1, len(questions)))
    assert used.full_design_votes == unpaced


def test_a_rerun_does_not_rewrite_the_items_with_nothing_left_to_ask(db_session):
    competition = half_labelled(db_session)
    items = db_session.scalars(select(LabelItem).where(LabelItem.competition_id == competition.id)).all()
    refresh_needed(db_session, LabellingSettings.of(competition), list(items))  # as deciding them does
    done = {item.id: item.priority for item in items if item.needed == 0}
    assert len(done) == 2 * PAIRS, "positions 0 and 1 of every pair decided"

    rerun = policy.rerun(db_session, competition)
    policy.write_levels(db_session, rerun.levels)

    # The queue never hands out an item that needs no vote: parking them would only write them.
    assert not set(rerun.levels.item_ids.tolist()) & set(done)
    db_session.expire_all()
    assert {item_id: db_session.get_one(LabelItem, item_id).priority for item_id in done} == done
    assert len(rerun.levels.item_ids), "the open items are still ranked"


def test_the_tally_takes_the_decisions_left_to_it_by_an_index(db_session):
    competition = half_labelled(db_session)
    connection = db_session.connection()
    postgres = connection.dialect.name == "postgresql"
    if postgres:  # a table this small would be scanned whatever the indexes: ask which the planner can use
        connection.exec_driver_sql("ANALYZE untallied_decisions")
        connection.exec_driver_sql("SET LOCAL enable_seqscan = off")
    executed: list[tuple[str, object]] = []

    def keep(_connection, _cursor, statement, parameters, _context, _many):
        executed.append((statement, parameters))

    event.listen(connection, "before_cursor_execute", keep)
    try:
        tally_decided(db_session, competition.id, 5)
    finally:
        event.remove(connection, "before_cursor_execute", keep)
    statement, parameters = executed[0]  # the decisions left to the tally, taken
    explain = "EXPLAIN " if postgres else "EXPLAIN QUERY PLAN "
    plan = " ".join(str(row) for row in connection.exec_driver_sql(explain + statement, parameters))
    # Under uniform sampling every decided question stays in the table: a scan would read them all.
    assert "ix_untallied_decisions_competition_id" in plan, plan
