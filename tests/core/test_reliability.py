"""Per-annotator reliability: from gold and from agreement with many others, never self-certified."""

import numpy as np
import pytest

from app.core.reliability import (
    MIN_EVIDENCE,
    CrowdEvidence,
    annotator_reliability,
    base_rate,
    unbiased_votes,
    vote_weight,
)


def evidence_from_votes(
    accuracy: np.ndarray,
    questions: int,
    seed: int,
    copies: tuple[int, int] | None = None,
    gold: int = 0,
) -> CrowdEvidence:
    """Pairs among the three voters of each question, voters drawn at random; `copies` = (a, b): b answers
    as a did wherever both vote (one person behind two accounts); `gold` answers per annotator."""
    rng = np.random.default_rng(seed)
    count = len(accuracy)
    total = np.zeros((count, count), dtype=np.int64)
    agreeing = np.zeros((count, count), dtype=np.int64)
    for _ in range(questions):
        voters = rng.choice(count, 3, replace=False)
        if copies is not None and rng.random() < 0.3:
            others = np.setdiff1d(np.arange(count), copies)
            voters = np.array([copies[0], copies[1], rng.choice(others)])
        truth = rng.random() < 0.35
        votes = truth ^ (rng.random(3) >= accuracy[voters])
        if copies is not None and copies[0] in voters and copies[1] in voters:
            votes[voters == copies[1]] = votes[voters == copies[0]]
        for x in range(3):
            for y in range(x + 1, 3):
                a, b = sorted((voters[x], voters[y]))
                total[a, b] += 1
                agreeing[a, b] += bool(votes[x] == votes[y])
    a, b = np.nonzero(total)
    gold_right = rng.binomial(gold, accuracy) if gold else np.zeros(count, dtype=np.int64)
    return CrowdEvidence(gold_right, np.full(count, gold), a, b, total[a, b], agreeing[a, b])


def test_agreement_with_many_others_recovers_each_annotators_accuracy():
    accuracy = np.array([0.97] * 4 + [0.9] * 4 + [0.75] * 4 + [0.5] * 2)
    reliability = annotator_reliability(evidence_from_votes(accuracy, 4000, seed=1))
    assert reliability.accuracy == pytest.approx(accuracy, abs=0.04)
    assert reliability.vetted[:12].all() and not reliability.colluding.any()
    weights = vote_weight(reliability)
    assert np.all(weights[:4] > weights[4:8]) and np.all(np.isfinite(weights[:12]))


def test_nobody_is_vetted_before_their_evidence_is_worth_enough():
    accuracy = np.full(10, 0.95)
    early = annotator_reliability(evidence_from_votes(accuracy, 20, seed=2))
    assert np.all(early.evidence < MIN_EVIDENCE) and not early.vetted.any()
    assert np.all(np.isnan(vote_weight(early)))


def test_two_accounts_that_only_agree_with_each_other_vet_nobody():
    # Accounts 0 and 1 answer the same questions and always agree; nobody else ever votes with them.
    evidence = CrowdEvidence(
        gold_right=np.zeros(2),
        gold_answered=np.zeros(2),
        pair_a=np.array([0]),
        pair_b=np.array([1]),
        pair_total=np.array([500]),
        pair_agreeing=np.array([500]),
    )
    reliability = annotator_reliability(evidence)
    assert not reliability.vetted.any()
    assert reliability.evidence.max() < MIN_EVIDENCE


def test_one_person_behind_two_accounts_is_caught_by_the_collusion_check():
    accuracy = np.full(12, 0.93)
    evidence = evidence_from_votes(accuracy, 6000, seed=3, copies=(0, 1))
    reliability = annotator_reliability(evidence)
    rows = np.flatnonzero(reliability.colluding)
    flagged = {(int(evidence.pair_a[row]), int(evidence.pair_b[row])) for row in rows}
    assert flagged == {(0, 1)}
    assert not reliability.vetted[0] and not reliability.vetted[1] and reliability.vetted[2:].all()


def copies_on_a_lucky_start(agreeing_with_others: int) -> CrowdEvidence:
    """Annotators 0-9 agree on all 10 questions each pair of them shares; 10 and 11 are accounts of one
    coin-flipper that vote together with one honest annotator third (the simulation's colluders): 3 questions
    with each of 0-5, `agreeing_with_others` of those 18 agreeing, and all 30 of their own agreeing."""
    pairs = [(a, b, 10, 10) for a in range(10) for b in range(a + 1, 10)]
    agreeing = [3] * (agreeing_with_others - 12) + [2] * (18 - agreeing_with_others)
    pairs += [(honest, copy, 3, agreeing[honest]) for copy in (10, 11) for honest in range(6)]
    pairs.append((10, 11, 30, 30))
    a, b, total, agree = (np.array(column) for column in zip(*pairs, strict=True))
    return CrowdEvidence(np.zeros(12), np.zeros(12), a, b, total, agree)


@pytest.mark.parametrize("agreeing_with_others", [14, 16], ids=["14-of-18", "16-of-18"])
def test_two_accounts_of_a_coin_flipper_do_not_vet_each_other(agreeing_with_others):
    # Their record with others is worth under MIN_EVIDENCE; their row with each other lifted both over it (at
    # 16 of 18, to an accuracy at which the two of them would decide a question alone).
    evidence = copies_on_a_lucky_start(agreeing_with_others)
    reliability = annotator_reliability(evidence)
    rows = np.flatnonzero(reliability.colluding)
    assert {(int(evidence.pair_a[row]), int(evidence.pair_b[row])) for row in rows} <= {(10, 11)}
    assert not reliability.vetted[10] and not reliability.vetted[11]
    assert reliability.vetted[:10].all()


def test_three_accounts_of_one_person_do_not_stand_on_each_other():
    # Accounts 10-12 answer alike: 40 of 40 on each of their three rows, 35 of 50 with the perfect annotators
    # 0-9. Each account's accuracy without only the tested row still stood on its 40 of 40 with the third
    # account, so the collusion test found their agreement plausible and all three were vetted at 0.81.
    pairs = [(a, b, 10, 10) for a in range(10) for b in range(a + 1, 10)]
    pairs += [(honest, copy, 5, 4 - honest % 2) for copy in (10, 11, 12) for honest in range(10)]
    pairs += [(10, 11, 40, 40), (10, 12, 40, 40), (11, 12, 40, 40)]
    a, b, total, agree = (np.array(column) for column in zip(*pairs, strict=True))
    evidence = CrowdEvidence(np.zeros(13), np.zeros(13), a, b, total, agree)
    reliability = annotator_reliability(evidence)
    rows = np.flatnonzero(reliability.colluding)
    assert {(int(evidence.pair_a[row]), int(evidence.pair_b[row])) for row in rows} == {
        (10, 11),
        (10, 12),
        (11, 12),
    }
    assert reliability.vetted.tolist() == [True] * 10 + [False] * 3


def test_gold_alone_vets_and_shows_a_spammer_for_what_they_are():
    accuracy = np.array([0.95, 0.95, 0.6])
    evidence = CrowdEvidence(
        gold_right=np.array([48, 47, 30]),
        gold_answered=np.array([50, 50, 50]),
        pair_a=np.zeros(0, dtype=np.int64),
        pair_b=np.zeros(0, dtype=np.int64),
        pair_total=np.zeros(0, dtype=np.int64),
        pair_agreeing=np.zeros(0, dtype=np.int64),
    )
    reliability = annotator_reliability(evidence)
    assert reliability.vetted.tolist() == [True, True, False], "0.6 is too poor to decide anything early"
    assert reliability.accuracy == pytest.approx(accuracy, abs=0.04)


def test_only_the_votes_no_stopping_rule_chose_count():
    assert unbiased_votes(5, early_eligible=True, cast=4) == 2
    assert unbiased_votes(5, early_eligible=False, cast=4) == 3
    assert unbiased_votes(5, early_eligible=False, cast=3) == 3
    assert unbiased_votes(3, early_eligible=False, cast=3) == 2
    assert unbiased_votes(7, early_eligible=False, cast=7) == 4
    assert unbiased_votes(1, early_eligible=False, cast=1) == 1


def test_the_base_rate_is_the_share_of_yes_among_decided_questions():
    assert base_rate(0, 0) == 0.5
    assert base_rate(33, 98) == pytest.approx(34 / 100)
