"""An annotator's answers and difficulty flags on the image leased to them.

A strict majority of the panel decides a question and stops its asking (paper Sec. 3.1), or under active
sampling fewer agreeing votes of vetted annotators (rules.EarlyRule); when more than 60% of the panel flag
an image, it is
discarded for its pairs and their reserves are asked instead. Under active sampling, decided questions are
counted towards the policy's next refresh (app.labelling.active_sampling.policy).
submit_answers is a hot path: its statements are app.labelling.statements, its writes sent together.
"""

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import datetime

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.db.base import utcnow
from app.db.statements import pipelined
from app.errors import Conflict, InvalidInput, NotFound
from app.labelling import rules
from app.labelling.items import lock_item, note_decided, set_assignment
from app.labelling.models import Assignment, AssignmentStatus, DifficultyFlag, FlagReason, LabelItem
from app.labelling.quality_control.quality import check_answers, recent_votes
from app.labelling.statements import (
    GOLD_VOTE_COUNTS,
    IMAGE_QUESTIONS,
    INSERT_VOTE,
    LOCK_ITEMS_OF_QUESTIONS,
    STEP_UP,
    UPDATE_COUNTS,
    UPDATE_NEEDED,
    first_gold_answer,
    pending_questions,
)
from app.labelling.subsets import discard_item
from app.labelling.types import (
    Answer,
    Labeller,
    LabellingSettings,
    SubmitResult,
    actively_sampled,
    early_rule,
)


@dataclass
class _Votes:
    """A question's vote state while an answer is being recorded (never an adjudicated question's: only open
    questions are counted here, and an adjudicated one is decided)."""

    id: int
    yes_votes: int
    no_votes: int
    early_evidence: float | None
    outcome: bool | None
    decided_at: datetime | None
    gold_answer: bool | None
    my_answer: bool | None
    adjudicated: bool = False

    @classmethod
    def of(cls, row) -> "_Votes":
        """The vote state in an IMAGE_QUESTIONS row."""
        return cls(
            id=row.id,
            yes_votes=row.yes_votes,
            no_votes=row.no_votes,
            early_evidence=row.early_evidence,
            outcome=row.outcome,
            decided_at=row.decided_at,
            gold_answer=row.gold_answer,
            my_answer=row.my_answer,
        )


def submit_answers(
    *, db_session: Session, competition: LabellingSettings, user: Labeller, answers: Sequence[Answer]
) -> SubmitResult:
    """Record an annotator's answers on one image; a strict majority of the panel decides a question and
    stops its asking (paper Sec. 3.1). Answers to questions decided meanwhile are not stored; resending an
    answer already stored is a no-op; changing one needs undo. Each answer's seconds are the client's,
    bounded by the server's clock (timed_seconds). New answers are then checked
    (app.labelling.quality_control.quality), which may pause the annotator."""
    question_ids = [answer.question_id for answer in answers]
    if len(set(question_ids)) != len(question_ids):
        raise InvalidInput("each question may be answered once per submission")
    where = {"competition_id": competition.id, "user_id": user.id}
    items = LOCK_ITEMS_OF_QUESTIONS.rows(db_session, {**where, "question_ids": question_ids})
    if len(items) != len(question_ids):
        raise NotFound("some of these questions do not exist in this competition")
    if len(set(items)) != 1:
        raise InvalidInput("the answers of one submission must be about one image")
    item = items[0]
    rows = IMAGE_QUESTIONS.rows(db_session, {**where, "image_id": item.image_id, "item_id": item.id})
    _check_may_answer(rows[0].my_status)
    questions = {row.id: _Votes.of(row) for row in rows}
    now = utcnow()
    early = early_rule(competition)
    weight = user.weight if actively_sampled(competition) else None
    new_votes, gold_answers, counted, already_decided = [], [], [], []
    claimed: list[float | None] = []
    for answer in answers:
        question = questions[answer.question_id]
        if question.my_answer is not None:
            if question.my_answer != answer.answer:
                raise Conflict(f"question {answer.question_id} is already answered; undo it to change it")
            continue
        if question.gold_answer is None and (question.outcome is not None or item.discarded):
            already_decided.append(question.id)
            continue
        question.my_answer = answer.answer
        vote = {"question_id": question.id, "user_id": user.id, "answer": answer.answer, "created_at": now}
        new_votes.append({**vote, "competition_id": competition.id, "weight": weight})
        claimed.append(answer.seconds)
        if question.gold_answer is not None:
            gold_answers.append(vote)
        elif not user.votes_excluded:
            rules.count_vote(question, answer.answer, +1, competition.panel_size, now, early, weight)
            counted.append(question)
    item_done = not any(
        question.my_answer is None
        and (question.gold_answer is not None or (question.outcome is None and not item.discarded))
        for question in questions.values()
    )
    annotators_needed = _annotators_needed(
        db_session, competition, questions, item.discarded, new_votes, gold_answers
    )
    elapsed = max(0.0, (now - rows[0].my_leased_at).total_seconds())
    for vote, seconds in zip(new_votes, timed_seconds(claimed, elapsed), strict=True):
        vote["seconds"] = seconds
    decided_now = [question.id for question in counted if question.outcome is not None]  # open before
    with pipelined(db_session):
        if new_votes:
            INSERT_VOTE.write(db_session, new_votes)
            if rows[0].undo_depth:
                _step_up(db_session, competition, user)
        if gold_answers:
            first_gold_answer(db_session.get_bind().dialect.name).write(db_session, gold_answers)
        if counted:
            UPDATE_COUNTS.write(db_session, [_counts_row(question) for question in counted])
            note_decided(db_session, competition.id, decided_now)
            needed = rules.needed(item.discarded, questions.values(), competition.panel_size, early)
            UPDATE_NEEDED.write(db_session, {"item_id": item.id, "new_needed": needed})
        status = AssignmentStatus.done if item_done else AssignmentStatus.leased
        set_assignment(db_session, item.id, user.id, status, now)
        window = recent_votes(db_session, competition, user) if new_votes else None
    recent = window() if window else []
    paused = check_answers(db_session, competition, user, now, recent, bool(gold_answers)) if recent else None
    return SubmitResult(
        len(new_votes), already_decided, item_done, paused, annotators_needed, len(decided_now)
    )


def timed_seconds(claimed: Sequence[float | None], elapsed: float) -> list[float]:
    """The seconds stored for a submission's new answers: what the client claims for each, the server's own
    clock the upper bound. `elapsed` is the time since the image was handed to the annotator (or since their
    last answer on it); an answer sent without seconds claims an equal share of it, and claims that add up to
    more than `elapsed` are scaled down to add up to it: s_i = c_i · min(1, elapsed / Σ c)."""
    if not claimed:
        return []
    share = elapsed / len(claimed)
    claims = [share if seconds is None else seconds for seconds in claimed]
    total = sum(claims)
    scale = 1.0 if total <= elapsed else elapsed / total
    return [seconds * scale for seconds in claims]


def _annotators_needed(
    db_session: Session,
    competition: LabellingSettings,
    questions: dict[int, _Votes],
    discarded: bool,
    new_votes: list[dict],
    new_gold_answers: list[dict],
) -> int:
    """More annotators who must answer the image before its questions are decided (rules.annotators_to_decide,
    the caller's new votes included). A gold question counts its answers, and their weights, as votes, as if
    it were regular, so that the number never tells a gold image apart."""
    if discarded:
        return 0
    early = early_rule(competition)
    gold = [q for q in questions.values() if q.gold_answer is not None]
    if not gold:
        return rules.annotators_to_decide(questions.values(), competition.panel_size, early)
    counts: Counter = Counter()
    evidence: dict[int, float | None] = {q.id: 0.0 for q in gold}
    for row in db_session.execute(GOLD_VOTE_COUNTS, {"question_ids": [q.id for q in gold]}):
        counts[(row.question_id, row.answer)] = row.votes
        known = row.weighted == row.votes
        evidence[row.question_id] = rules.with_vote(
            evidence[row.question_id], row.evidence if known else None
        )
    weights = {vote["question_id"]: vote["weight"] for vote in new_votes}
    for vote in new_gold_answers:  # not stored yet
        counts[(vote["question_id"], vote["answer"])] += 1
        evidence[vote["question_id"]] = rules.with_vote(
            evidence[vote["question_id"]], weights[vote["question_id"]]
        )
    as_regular = {q.id: q for q in questions.values() if q.gold_answer is None}
    for q in gold:
        yes, no = counts[(q.id, True)], counts[(q.id, False)]
        outcome = rules.outcome(yes, no, competition.panel_size, early, evidence[q.id])
        as_regular[q.id] = replace(
            q, yes_votes=yes, no_votes=no, early_evidence=evidence[q.id], outcome=outcome, gold_answer=None
        )
    return rules.annotators_to_decide(as_regular.values(), competition.panel_size, early)


def _counts_row(question: _Votes) -> dict:
    """The parameters of UPDATE_COUNTS for a question."""
    return {
        "question_id": question.id,
        "yes": question.yes_votes,
        "no": question.no_votes,
        "evidence": question.early_evidence,
        "new_outcome": question.outcome,
        "new_decided_at": question.decided_at,
    }


def _check_may_answer(status: str | None) -> None:
    """Answers count only on an image handed to the caller (by next or undo) and not flagged by them."""
    if status is None:
        raise Conflict("this image was not given to you: take it from POST …/next, then answer it")
    if status == AssignmentStatus.flagged:
        raise Conflict("you flagged this image as too difficult: undo the flag to answer it")


def _step_up(db_session: Session, competition: LabellingSettings, user: Labeller) -> None:
    """A new answer or flag: the annotator climbs one step back towards their highest point."""
    STEP_UP.write(db_session, {"of_competition": competition.id, "of_user": user.id})


def flag_image(
    *,
    db_session: Session,
    competition: LabellingSettings,
    user: Labeller,
    item_id: int,
    reason: FlagReason = FlagReason.too_difficult,
) -> bool:
    """Record that the annotator finds an image too difficult or not a natural photo; when more than 60%
    of the panel flag it (for either reason), discard it for its pairs and promote their reserves, unless an
    admin has kept it (adjudication.py). Returns whether it was discarded.

    Only an image handed to the annotator (by next or undo) that still has questions for them can be
    flagged; flagging it again is a no-op.
    """
    image_id = db_session.scalar(
        select(LabelItem.image_id).where(LabelItem.id == item_id, LabelItem.competition_id == competition.id)
    )
    if image_id is None:
        raise NotFound(f"no item {item_id} in this competition")
    item = lock_item(db_session, competition, image_id)
    status = db_session.scalar(
        select(Assignment.status).where(Assignment.item_id == item.id, Assignment.user_id == user.id)
    )
    if status == AssignmentStatus.flagged:
        return item.discarded
    if status is None:
        raise Conflict("this image was not given to you: take it from POST …/next, then flag it")
    now = utcnow()
    if not _has_pending(db_session, competition, item, user, now):
        raise Conflict(
            "the panel has discarded this image meanwhile"
            if item.discarded
            else "every question on this image was decided meanwhile, so there is nothing to flag"
        )
    db_session.add(
        DifficultyFlag(
            competition_id=competition.id, image_id=image_id, user_id=user.id, reason=reason, created_at=now
        )
    )
    if not user.votes_excluded:
        item.flags += 1
    _step_up(db_session, competition, user)
    set_assignment(db_session, item.id, user.id, AssignmentStatus.flagged, now, keep_flagged=False)
    if not item.discarded and not item.kept and rules.too_difficult(item.flags, competition.panel_size):
        discard_item(db_session, competition, item)
    db_session.flush()
    return item.discarded


def _has_pending(
    db_session: Session, competition: LabellingSettings, item: LabelItem, user: Labeller, now: datetime
) -> bool:
    """Whether the image still has questions for the annotator (gold ones, or open ones unless discarded)."""
    pending = pending_questions(
        db_session,
        competition_id=competition.id,
        item_id=item.id,
        image_id=item.image_id,
        discarded=item.discarded,
        user_id=user.id,
        now=now,
    )
    return bool(pending)
