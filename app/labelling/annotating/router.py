"""Labelling API for the annotator: lease the next image, answer, flag, skip, undo, progress.

These endpoints are the hot path (every answer passes through them): the caller and the competition are
read in one query, then the endpoint's database work and its commit follow, all in one worker thread
(LabellingRequest.run, app.db.session.in_one_thread). The admins' labelling endpoints, which use the usual
dependencies, are in admin_router.py.
"""

from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, TypeVar

from fastapi import APIRouter, BackgroundTasks, Depends, Request
from sqlalchemy.orm import Session

from app.competitions.members import MEMBERS_ONLY
from app.db.session import SessionDep, in_one_thread
from app.errors import Forbidden, NotFound
from app.labelling.active_sampling.policy_runner import PolicyRunner
from app.labelling.annotating import answers, queue
from app.labelling.annotating.caller import labelling_caller
from app.labelling.annotating.skip import skip_item
from app.labelling.annotating.undo import undo_last
from app.labelling.metrics import VOTES
from app.labelling.quality_control import quality
from app.labelling.quality_control.annotators import annotator_stats, images_left
from app.labelling.schemas import (
    AnswersCreate,
    AnswersRead,
    FlagCreate,
    FlagRead,
    ItemRead,
    MyStatsRead,
    NextItemRead,
    SkipCreate,
    UndoRead,
)
from app.labelling.types import Answer, Labeller, LabellingSettings, actively_sampled, nothing_useful_left
from app.users import service as users_service
from app.users.auth import (
    ANNOTATOR_ROLES,
    SAFE_METHODS,
    Credentials,
    CredentialsDep,
    check_role,
    identify,
    refuse_before_lookup,
    require_caller,
)
from app.web.errors import error_responses

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
        app.labelling.annotating.caller), so that pausing them or excluding their votes never overlaps it.
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
                    languages=(
                        self.request.session.get("locale"),
                        self.request.headers.get("accept-language", ""),
                    ),
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
            raise Forbidden(quality.paused_message(caller.paused, caller.labeller.locale))
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


def policy_runner(request: Request) -> PolicyRunner:
    """The application's PolicyRunner (a dependency, so that tests can rerun the policy in their
    transaction)."""
    return request.app.state.policy_runner


PolicyRunnerDep = Annotated[PolicyRunner, Depends(policy_runner)]


@router.post("/next", summary="Lease the next image to label", responses=error_responses(401, 403, 404, 422))
async def next_item(db_session: SessionDep, labelling: LabellingRequestDep) -> NextItemRead:
    """The image the caller should label now with its yes/no questions, leased to them for two minutes.

    A reload returns the same image while the lease runs. Never an image the caller flagged or a question
    they answered; images already partly voted come first. `status` is `busy` when every open image is
    leased to others (ask again shortly) and `finished` when nothing is left for the caller. Under active
    sampling the images of the pairs that can still change the ranking come first, and `status` is `settled`
    once the ranking is settled (nothing useful is left).
    """
    return await labelling.run(db_session, lambda call: _lease_next(db_session, call))


def _lease_next(
    db_session: Session, call: LabellingCall, not_now: int | None = None, rerun_policy: bool = True
) -> NextItemRead:
    """Lease the caller's next item (never item `not_now`; rerun_policy as queue.next_item); its API
    view."""
    result = queue.next_item(
        db_session=db_session,
        competition=call.competition,
        user=call.labeller,
        not_now=not_now,
        rerun_policy=rerun_policy,
    )
    return NextItemRead(status=result.status, item=None if result.item is None else ItemRead.of(result.item))


@router.post(
    "/answers", summary="Answer questions of one image", responses=error_responses(401, 403, 404, 409, 422)
)
async def submit_answers(
    body: AnswersCreate,
    db_session: SessionDep,
    labelling: LabellingRequestDep,
    policy_runner: PolicyRunnerDep,
    background: BackgroundTasks,
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
    of very fast answers or a long run of one answer is flagged for an admin to review. Under active sampling
    two or more agreeing votes of reliable annotators may decide a question before a majority, and once
    enough questions are decided (or the caller's queue ran dry) the policy reruns after the response, in a
    process of its own."""

    def answer(call: LabellingCall) -> AnswersRead:
        result = answers.submit_answers(
            db_session=db_session,
            competition=call.competition,
            user=call.labeller,
            answers=[Answer(a.question_id, a.answer, a.seconds) for a in body.answers],
        )
        leased = None
        if body.next and result.paused is None:  # the policy reruns after the response, not here
            leased = _lease_next(db_session, call, rerun_policy=False)
        active = actively_sampled(call.competition)
        ran_dry = active and leased is not None and leased.status == "finished"
        if active:
            policy_runner.start()
        if (
            active and result.decided and policy_runner.count(call.competition.id, result.decided)
        ) or ran_dry:
            background.add_task(policy_runner.refresh_if_due, call.competition.id, ran_dry)
        return AnswersRead(
            recorded=result.recorded,
            already_decided=result.already_decided,
            item_done=result.item_done,
            annotators_needed=result.annotators_needed,
            next=leased,
            paused=None
            if result.paused is None
            else quality.paused_message(result.paused, call.labeller.locale),
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
    `finished` or `settled`; `settled`: the competition samples actively and nothing useful is left). Not
    the caller's accuracy on gold questions: it would tell which images were gold (admins see it in
    …/annotators)."""

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
            settled=nothing_useful_left(call.competition),
        )

    return await labelling.run(db_session, progress)
