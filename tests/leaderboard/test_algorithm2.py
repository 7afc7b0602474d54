"""Paper Algorithm 2: a new classifier adds exactly its m new pairs, asks only questions never asked before,
and reuses the answers already given, so the leaderboard grows by one row and column."""

import numpy as np
from sqlalchemy import select

from app.jobs.enums import JobKind
from app.jobs.models import Job
from app.labelling.models import PairImage, PairImageRole, PairSubset, Question
from tests.leaderboard.scenario import (
    annotators,
    corpus,
    digits_competition,
    noisy_predictions,
    register,
    run_select_jobs,
    vote,
)

N_IMAGES = 60


def pair_rows(db_session) -> dict[tuple[int, int], list[tuple]]:
    """Every stored pair's rows (position, image, role, labels) in order."""
    rows: dict[tuple[int, int], list[tuple]] = {}
    for subset in db_session.scalars(select(PairSubset).order_by(PairSubset.id)):
        rows[(subset.classifier_a_id, subset.classifier_b_id)] = [
            (r.position, r.image_id, r.role, r.label_a, r.label_b)
            for r in db_session.scalars(
                select(PairImage).where(PairImage.subset_id == subset.id).order_by(PairImage.position)
            )
        ]
    return rows


def asked(db_session) -> set[tuple[int, int]]:
    """(image, class) of every question."""
    return set(db_session.execute(select(Question.image_id, Question.class_index)).all())


def test_a_new_classifier_adds_its_pairs_and_reuses_every_answered_question(
    client, db_session, settings, tmp_path
):
    competition = digits_competition(db_session, k=5)
    hashes = corpus(db_session, settings, competition, N_IMAGES)
    truth = np.random.default_rng(3).integers(0, 10, N_IMAGES)
    labels = [noisy_predictions(truth, accuracy, seed) for seed, accuracy in enumerate((0.8, 0.5, 0.3))]
    first = [
        register(db_session, settings, competition, tmp_path, f"f{i + 1}", hashes, labels[i], seed=i)
        for i in range(3)
    ]
    assert len(run_select_jobs(db_session, settings)) == 3
    vote(db_session, competition, annotators(db_session, 3), lambda o, c: c == truth[o], hashes)
    before_rows, before_questions = pair_rows(db_session), asked(db_session)
    decided_before = db_session.scalar(select(Question.id).where(Question.outcome.is_(None)))
    assert decided_before is None  # every question answered by three concordant votes
    url = f"/api/v1/competitions/{competition.id}/leaderboard"
    board_before = client.get(url).json()

    # f4 predicts exactly as f1 (labels, probabilities): its pairs select f1's images, all answered already.
    copy = register(db_session, settings, competition, tmp_path, "f4", hashes, labels[0], seed=0)
    new_jobs = db_session.scalars(select(Job).where(Job.kind == JobKind.select, Job.status == "queued")).all()
    assert sorted((j.classifier_id, j.other_classifier_id) for j in new_jobs) == [
        (c.id, copy.id) for c in first
    ]
    run_select_jobs(db_session, settings)
    after_rows = pair_rows(db_session)
    assert set(after_rows) - set(before_rows) == {(c.id, copy.id) for c in first}
    assert {pair: after_rows[pair] for pair in before_rows} == before_rows  # old pairs untouched
    assert after_rows[(first[0].id, copy.id)] == []  # identical predictions never disagree
    same_as_f1 = {
        (first[1].id, copy.id): (first[0].id, first[1].id),
        (first[2].id, copy.id): (first[0].id, first[2].id),
    }
    for new_pair, old_pair in same_as_f1.items():
        assert {r[1] for r in after_rows[new_pair]} == {r[1] for r in before_rows[old_pair]}
    assert asked(db_session) == before_questions  # nothing new to ask

    board = client.get(url).json()
    assert board["matrices"]["classifier_ids"] == [c.id for c in first] + [copy.id]
    labelled = np.array(board["matrices"]["labelled"])
    accuracy = np.array(board["matrices"]["accuracy"])
    assert np.array_equal(labelled[:3, :3], board_before["matrices"]["labelled"])
    assert labelled[1, 3] == labelled[0, 1] > 0 and labelled[2, 3] == labelled[0, 2] > 0  # reused answers
    assert accuracy[3, 1] == accuracy[0, 1] and accuracy[1, 3] == accuracy[1, 0]
    assert labelled[0, 3] == 0
    history = client.get(f"{url}/history").json()["points"]
    assert history[0]["classifier_ids"] == [c.id for c in first]
    assert history[-1]["classifier_ids"] == board["matrices"]["classifier_ids"]
    assert history[-1]["labelled_images"] == board["case_shares"]["images"]

    # f5 is a different classifier: its pairs ask exactly the (image, class) questions nobody asked yet.
    fifth = register(
        db_session, settings, competition, tmp_path, "f5", hashes, noisy_predictions(truth, 0.6, 9), seed=9
    )
    run_select_jobs(db_session, settings)
    rows = pair_rows(db_session)
    fifth_pairs = [pair for pair in rows if fifth.id in pair]
    assert len(fifth_pairs) == 4
    wanted = {
        (image_id, label)
        for pair in fifth_pairs
        for _, image_id, role, label_a, label_b in rows[pair]
        if role == PairImageRole.selected
        for label in (label_a, label_b)
    }
    assert asked(db_session) - before_questions == wanted - before_questions
    assert wanted & before_questions  # some of its questions were answered before and are reused
