"""Labelling API: lease the next image, answer, flag, skip, undo, progress; gold, annotators and adjudication
(admin).

The annotator's endpoints are the hot path (every answer passes through them): the caller and the
competition are read in one query, then the endpoint's database work and its commit follow, all in one
worker thread (LabellingRequest.run, app.db.session.in_one_thread). The admin endpoints use the usual
dependencies.
"""

from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, TypeVar

from fastapi import APIRouter, Depends, Request, status
from sqlalchemy.orm import Session

from app.competitions.members import MEMBERS_ONLY
from app.db.session import SessionDep, in_one_thread
from app.errors import Forbidden, NotFound
from app.labelling import adjudication, answers, gold, quality, queue
from app.labelling.annotators import annotator_stats, images_left
from app.labelling.caller import labelling_caller
from app.labelling.schemas import (
    AdjudicationCreate,
    AdjudicationRead,
    AnnotatorStatsRead,
    AnswersCreate,
    AnswersRead,
    FlagCreate,
    FlagRead,
    GoldCreate,
    GoldRead,
    ItemRead,
    MyStatsRead,
    NextItemRead,
    QualityDecisionCreate,
    QualityFlagRead,
    ReviewEntryRead,
    SkipCreate,
    UndoRead,
)
from app.labelling.skip import skip_item
from app.labelling.types import Answer, Labeller, LabellingSettings
from app.labelling.undo import undo_last
from app.users import service as users_service
from app.users.auth import (
    ANNOTATOR_ROLES,
    SAFE_METHODS,
    AdminUser,
    Credentials,
    CredentialsDep,
    check_role,
    identify,
    refuse_before_lookup,
    require_caller,
)
from app.web.dependencies import CompetitionDep
from app.web.errors import error_responses
from app.web.metrics import VOTES

Result = TypeVar("Result")

router = APIRouter(prefix="/api/v1/competitions/{competition_id}/labelling", tags=["labelling"])


@dataclass(frozen=True)
class LabellingCall:
    """Who labels (an annotator or an admin) and in which competition."""

    labeller: Labeller
    competition: LabellingSettings


@dataclass(frozen=True)
class LabellingRequest:
    """An annotator's request whose caller is read in the endpoint's one worker thread, with its work."""

    competition_id: int
    request: Request
    credentials: Credentials

    async def run(self, db_session: Session, work: Callable[[LabellingCall], Result]) -> Result:
        """work(the caller) and the commit in one worker thread, once the caller is read."""
        return await in_one_thread(db_session, lambda: work(self.caller(db_session)))

    def caller(self, db_session: Session) -> LabellingCall:
        """The caller and the competition in one query: 401, 403, 404, then 403 for an annotator who is not a
        member of a members-only competition, then 403 for a write by a paused annotator.

        A request that changes state holds the caller's row locked FOR SHARE until it commits (see
        app.labelling.caller), so that pausing them or excluding their votes never overlaps it.
        """
        writes = self.request.method not in SAFE_METHODS
        caller = require_caller(
            identify(
                self.request,
                self.credentials,
                lambda given: labelling_caller(
                    db_session=db_session,
                    token=given.token,
                    user_id=given.session_user_id,
                    session_generation=given.session_generation,
                    competition_id=self.competition_id,
                    writes=writes,
                ),
            )
        )
        if caller.token_id is not None:
            users_service.record_token_use(
                db_session=db_session, token_id=caller.token_id, last_used_at=caller.token_last_used_at
            )
        check_role(caller.labeller, ANNOTATOR_ROLES)
        if caller.competition is None:
            raise NotFound(f"no competition with id {self.competition_id}")
        if not caller.may_label:
            raise Forbidden(MEMBERS_ONLY)
        if caller.paused is not None and writes:
            raise Forbidden(quality.paused_message(caller.paused))
        return LabellingCall(caller.labeller, caller.competition)


async def labelling_request(
    competition_id: int, request: Request, credentials: CredentialsDep
) -> LabellingRequest:
    """The annotator's request, its caller read later by LabellingRequest.run in the endpoint's thread: one
    thread hop per request rather than two (a dependency's and the endpoint's), the hot path's largest
    avoidable CPU cost. 401 without credentials and 403 for a cookie's write without the CSRF header come
    first; a bad token, role or competition is refused after the body is validated (the body guard refuses
    an anonymous write before reading it)."""
    refuse_before_lookup(request, credentials)
    return LabellingRequest(competition_id, request, credentials)


LabellingRequestDep = Annotated[LabellingRequest, Depends(labelling_request)]


@router.post("/next", summary="Lease the next image to label", responses=error_responses(401, 403, 404, 422))
async def next_item(db_session: SessionDep, labelling: LabellingRequestDep) -> NextItemRead:
    """The image the caller should label now with its yes/no questions, leased to them for two minutes.

    A reload returns the same image while the lease runs. Never an image the caller flagged or a question
    they answered; images already partly voted come first. `status` is `busy` when every open image is
    leased to others (ask again shortly) and `finished` when nothing is left for the caller.
    """
    return await labelling.run(db_session, lambda call: _lease_next(db_session, call))


def _lease_next(db_session: Session, call: LabellingCall, not_now: int | None = None) -> NextItemRead:
    """Lease the caller's next item (never item `not_now`); its API view."""
    result = queue.next_item(
        db_session=db_session, competition=call.competition, user=call.labeller, not_now=not_now
    )
    return NextItemRead(status=result.status, item=None if result.item is None else ItemRead.of(result.item))


@router.post(
    "/answers", summary="Answer questions of one image", responses=error_responses(401, 403, 404, 409, 422)
)
async def submit_answers(
    body: AnswersCreate, db_session: SessionDep, labelling: LabellingRequestDep
) -> AnswersRead:
    """Store yes/no answers with the seconds each took (bounded by the server's clock: the time since the
    image was handed out, or since the last answer on it, shared among them). A question is decided once a
    strict majority of the panel agrees (3 of 5) and is then asked no more; answers to questions decided
    meanwhile are listed in `already_decided` and not stored. Sending a stored answer again is a no-op;
    changing one needs undo (409). Only an image given to the caller (by …/next or …/undo, even if the lease
    has run out since) can be answered, and not one they flagged: 409 otherwise. With `"next": true` the
    response also carries the next image, leased as by POST …/next. The answers are then checked: when the
    caller's accuracy on gold questions falls below the competition's threshold, `paused` says why and every
    further labelling request of theirs in this competition is refused (403) until an admin decides; a streak
    of very fast answers or a long run of one answer is flagged for an admin to review."""

    def answer(call: LabellingCall) -> AnswersRead:
        result = answers.submit_answers(
            db_session=db_session,
            competition=call.competition,
            user=call.labeller,
            answers=[Answer(a.question_id, a.answer, a.seconds) for a in body.answers],
        )
        return AnswersRead(
            recorded=result.recorded,
            already_decided=result.already_decided,
            item_done=result.item_done,
            annotators_needed=result.annotators_needed,
            next=_lease_next(db_session, call) if body.next and result.paused is None else None,
            paused=None if result.paused is None else quality.paused_message(result.paused),
        )

    stored = await labelling.run(db_session, answer)
    VOTES.inc(stored.recorded)
    return stored


@router.post(
    "/flags",
    summary="Flag an image as too difficult or not a natural photo",
    responses=error_responses(401, 403, 404, 409, 422),
)
async def flag_image(body: FlagCreate, db_session: SessionDep, labelling: LabellingRequestDep) -> FlagRead:
    """The caller is not asked this image again. When more than 60% of the panel flag it (4 of 5), it is
    discarded for every pair that selected it and each pair's next reserve image is asked instead. Only an
    image given to the caller (by …/next or …/undo) can be flagged, and only while it still has questions
    for them: 409 otherwise (never given, or decided or discarded meanwhile). Flagging again is a no-op."""

    def flag(call: LabellingCall) -> FlagRead:
        discarded = answers.flag_image(
            db_session=db_session,
            competition=call.competition,
            user=call.labeller,
            item_id=body.item_id,
            reason=body.reason,
        )
        return FlagRead(discarded=discarded)

    return await labelling.run(db_session, flag)


@router.post(
    "/skip", summary="Skip an image without answering", responses=error_responses(401, 403, 404, 409, 422)
)
async def skip_image(
    body: SkipCreate, db_session: SessionDep, labelling: LabellingRequestDep
) -> NextItemRead:
    """Hand back an image without an answer (when the caller would rather not judge it; an image nobody
    could judge is flagged instead): no vote or flag is recorded, the lease ends so that others may take
    it, and the response carries the next image. The skipped image is offered to the caller again only
    once nothing else is left for them (`status` is then `skipped`). Only an image given to the caller and
    not yet answered, flagged or finished by them can be skipped: 409 otherwise; skipping again is a
    no-op."""

    def skip(call: LabellingCall) -> NextItemRead:
        skip_item(
            db_session=db_session, competition=call.competition, user=call.labeller, item_id=body.item_id
        )
        return _lease_next(db_session, call, not_now=body.item_id)

    return await labelling.run(db_session, skip)


@router.post(
    "/undo", summary="Undo the last answer or flag", responses=error_responses(401, 403, 404, 409, 422)
)
async def undo(db_session: SessionDep, labelling: LabellingRequestDep) -> UndoRead:
    """Take back the caller's latest answer (or flag) and lease its image again with the undone question
    first. A flag on an image the panel has already discarded stays: undo steps past it to the step before
    (`flags_kept` counts those passed). Up to ten steps back; 404 when there is nothing to undo, 409 past ten
    or when another of the caller's requests changed their latest answer meanwhile (try again)."""

    def take_back(call: LabellingCall) -> UndoRead:
        result = undo_last(db_session=db_session, competition=call.competition, user=call.labeller)
        return UndoRead(
            undone=result.undone,
            question_id=result.question_id,
            item=None if result.item is None else ItemRead.of(result.item),
            flags_kept=result.flags_kept,
        )

    return await labelling.run(db_session, take_back)


@router.get("/me", summary="My labelling progress", responses=error_responses(401, 403, 404, 422))
async def my_stats(db_session: SessionDep, labelling: LabellingRequestDep) -> MyStatsRead:
    """Answers today (UTC) and in total, flags, and the images left for the caller (0 once the queue says
    `finished`). Not the caller's accuracy on gold
    questions: it would tell which images were gold (admins see it in …/annotators)."""

    def progress(call: LabellingCall) -> MyStatsRead:
        (stats,) = annotator_stats(
            db_session=db_session, competition=call.competition, user_ids=[call.labeller.id]
        )
        return MyStatsRead(
            answered_today=stats.answered_today,
            answered_total=stats.answered_total,
            flagged=stats.flagged,
            images_left=images_left(
                db_session=db_session, user_id=call.labeller.id, competition_id=call.competition.id
            ).get(call.competition.id, 0),
        )

    return await labelling.run(db_session, progress)


@router.get(
    "/annotators",
    summary="Annotators' progress and gold accuracy (admin)",
    responses=error_responses(401, 403, 404, 422),
)
def annotators(
    db_session: SessionDep, _admin: AdminUser, competition: CompetitionDep
) -> list[AnnotatorStatsRead]:
    """Every account that answered or flagged in this competition: answers, flags, accuracy on gold
    questions (of each one's first answers: undo changes a vote, not the score), mean seconds per answer,
    and whether it is paused or its votes are excluded."""
    return [
        AnnotatorStatsRead.of(stats)
        for stats in annotator_stats(db_session=db_session, competition=LabellingSettings.of(competition))
    ]


@router.post(
    "/gold",
    status_code=status.HTTP_201_CREATED,
    summary="Add gold questions (admin)",
    responses=error_responses(401, 403, 404, 422),
)
def add_gold(
    body: GoldCreate, db_session: SessionDep, _admin: AdminUser, competition: CompetitionDep
) -> list[GoldRead]:
    """Questions with known answers on one image, mixed into annotators' work at the competition's
    gold_rate to measure their accuracy; a known answer is also the question's outcome. The image must end
    up with at least two questions, as every image does (422 otherwise): give two classes, or one on an
    image a pair already asks about."""
    questions = gold.add_gold_questions(
        db_session=db_session,
        competition=competition,
        image_sha256=body.image_sha256,
        answers=[(gold.class_index, gold.answer) for gold in body.questions],
    )
    return [_gold_read(question, body.image_sha256, competition.class_names) for question in questions]


@router.get("/gold", summary="List gold questions (admin)", responses=error_responses(401, 403, 404, 422))
def list_gold(db_session: SessionDep, _admin: AdminUser, competition: CompetitionDep) -> list[GoldRead]:
    """Every gold question of the competition with its known answer."""
    return [
        _gold_read(found.Question, found.sha256, competition.class_names)
        for found in gold.gold_questions(db_session=db_session, competition=competition)
    ]


def _gold_read(question, image_sha256: str, class_names: list) -> GoldRead:
    """The API view of a gold question."""
    return GoldRead(
        question_id=question.id,
        image_sha256=image_sha256,
        class_index=question.class_index,
        class_name=str(class_names[question.class_index]),
        answer=question.gold_answer,
    )


@router.get(
    "/quality-flags",
    summary="Flags on annotators' answers (admin)",
    responses=error_responses(401, 403, 404, 422),
)
def list_quality_flags(
    db_session: SessionDep, _admin: AdminUser, competition: CompetitionDep
) -> list[QualityFlagRead]:
    """Open flags first, then decided ones, newest first: `gold` (accuracy on gold questions below the
    competition's gold_threshold after gold_min_answers; the annotator is paused in this competition until
    decided), `fast` (a streak of answers each under a quarter of the annotator's median seconds) and `run`
    (a long run of one answer)."""
    flags = quality.list_flags(db_session=db_session, competition=competition)
    return [QualityFlagRead.of(view) for view in flags]


@router.post(
    "/quality-flags/{flag_id}/decision",
    summary="Decide on a flag: resume the annotator or exclude their votes (admin)",
    responses=error_responses(401, 403, 404, 409, 422),
)
def decide_quality_flag(
    flag_id: int,
    body: QualityDecisionCreate,
    db_session: SessionDep,
    _admin: AdminUser,
    competition: CompetitionDep,
) -> QualityFlagRead:
    """`resumed`: the annotator goes on, their votes counting (a gold pause ends; their gold accuracy is
    measured afresh from here). `excluded`: their votes stop counting everywhere and every question they
    answered is re-decided, as excluding an account does. 409 when the flag is already decided."""
    view = quality.decide_flag(
        db_session=db_session, competition=competition, flag_id=flag_id, decision=body.decision
    )
    return QualityFlagRead.of(view)


@router.get(
    "/review",
    summary="The adjudication queue (admin)",
    responses=error_responses(401, 403, 404, 422),
)
def review_queue(
    db_session: SessionDep, _admin: AdminUser, competition: CompetitionDep
) -> list[ReviewEntryRead]:
    """What awaits an admin's verdict, oldest first: questions decided by the narrowest majority (3–2 in a
    panel of 5) on images still in their pairs, then images the panel discarded as too difficult or that an
    annotator flagged as not a natural photo (not excluded, not yet adjudicated)."""
    return [
        ReviewEntryRead(
            **vars(entry),
            class_name=None if entry.class_index is None else str(competition.class_names[entry.class_index]),
        )
        for entry in adjudication.review_queue(db_session=db_session, competition=competition)
    ]


@router.post(
    "/adjudications",
    status_code=status.HTTP_201_CREATED,
    summary="Confirm or overturn a split decision, a discard or a not-natural flag (admin)",
    responses=error_responses(401, 403, 404, 409, 422),
)
def adjudicate(
    body: AdjudicationCreate, db_session: SessionDep, admin: AdminUser, competition: CompetitionDep
) -> AdjudicationRead:
    """With question_id: a split question's outcome is confirmed, or overturned to the other answer, which
    the leaderboard counts from then on (recounts no longer change it). Without: an image the panel
    discarded, or flagged as not a natural photo, is confirmed (a not-natural image is then discarded) or
    overturned (it returns to its pairs beside the reserve that replaced it, and flags no longer discard
    it). The reason is recorded and exported. 404: no such image or question; 409: not a split decision,
    nothing to review on the image, or adjudicated already."""
    verdict = adjudication.adjudicate(
        db_session=db_session,
        competition=competition,
        image_sha256=body.image_sha256,
        question_id=body.question_id,
        verdict=body.verdict,
        reason=body.reason,
        user=admin,
    )
    return _adjudication_read(verdict, body.image_sha256)


@router.get(
    "/adjudications", summary="List adjudications (admin)", responses=error_responses(401, 403, 404, 422)
)
def list_adjudications(
    db_session: SessionDep, _admin: AdminUser, competition: CompetitionDep
) -> list[AdjudicationRead]:
    """Every verdict of the competition, oldest first (also exported: …/exports/adjudications)."""
    return [
        _adjudication_read(verdict, sha256)
        for verdict, sha256 in adjudication.adjudications(db_session=db_session, competition=competition)
    ]


def _adjudication_read(verdict, image_sha256: str) -> AdjudicationRead:
    """The API view of a recorded verdict."""
    return AdjudicationRead(
        id=verdict.id,
        kind=verdict.kind,
        image_sha256=image_sha256,
        question_id=verdict.question_id,
        verdict=verdict.verdict,
        panel_outcome=verdict.panel_outcome,
        outcome=verdict.outcome,
        reason=verdict.reason,
        decided_by=verdict.decided_by,
        created_at=verdict.created_at,
    )
