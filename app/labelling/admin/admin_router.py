"""Labelling API for admins: annotators' progress, gold questions, quality flags, the review queue and
adjudications of a competition, and the annotators' work records for paying them. The annotator's own
endpoints, the hot path, are in router.py."""

import csv
import io
from datetime import date
from typing import Annotated, Literal

from fastapi import APIRouter, Query, Response, status

from app.competitions.dependencies import CompetitionDep
from app.competitions.service import get_competition
from app.csv_cells import neutralised
from app.db.session import SessionDep
from app.labelling.active_sampling import policy
from app.labelling.quality_control import adjudication, gold, quality
from app.labelling.quality_control.annotators import annotator_stats
from app.labelling.quality_control.work_records import DEFAULT_DAYS, span, work_records
from app.labelling.schemas import (
    AdjudicationCreate,
    AdjudicationRead,
    AnnotatorStatsRead,
    GoldCreate,
    GoldRead,
    QualityDecisionCreate,
    QualityFlagRead,
    ReviewEntryRead,
    SamplingRead,
    SamplingUpdate,
    WorkRecordRead,
)
from app.labelling.types import LabellingSettings
from app.users.auth import AdminUser
from app.web.errors import error_responses

router = APIRouter(prefix="/api/v1/competitions/{competition_id}/labelling", tags=["labelling"])
work_records_router = APIRouter(prefix="/api/v1", tags=["users"])
"""Included after the accounts API (app.users.router), whose section of the documentation it ends."""


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


@router.put(
    "/sampling",
    summary="Choose uniform or active sampling (admin)",
    responses=error_responses(401, 403, 404, 422),
)
def set_sampling(
    body: SamplingUpdate, db_session: SessionDep, _admin: AdminUser, competition: CompetitionDep
) -> SamplingRead:
    """`uniform` labels every selected image of every pair to a strict majority of the panel (the paper's
    protocol); `active` asks first about the pairs that can still change the ranking, lets two or more
    agreeing votes of reliable annotators decide a question, and stops asking once the ranking is settled
    (the leaderboard then says so, with the votes used). Switching to active runs the policy at once;
    switching back to uniform goes on to the full design (questions already decided stay decided)."""
    policy.set_sampling(db_session, competition, body.sampling)
    return SamplingRead(
        sampling=competition.sampling,
        settled=competition.settled,
        annotator_reliability=competition.annotator_reliability,
    )


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


@work_records_router.get(
    "/work-records",
    summary="Annotators' work per day, for paying them (admin; JSON or CSV)",
    response_model=list[WorkRecordRead],
    responses={200: {"content": {"text/csv": {}}}, **error_responses(401, 403, 404, 422)},
)
def read_work_records(
    db_session: SessionDep,
    _admin: AdminUser,
    until: Annotated[date | None, Query(description="Last UTC day (default: today).")] = None,
    since: Annotated[
        date | None, Query(description=f"First UTC day (default: {DEFAULT_DAYS} days to until).")
    ] = None,
    competition_id: Annotated[int | None, Query(description="One competition (default: all).")] = None,
    format: Annotated[Literal["json", "csv"], Query(description="json or csv")] = "json",
) -> list[WorkRecordRead] | Response:
    """Per annotator and UTC day on which they answered: answers, active time (the seconds each answer took,
    each capped at 60 s: a longer wait was time away; answers sent without seconds add none) and accuracy on
    gold questions (first answers). At most 366 days at once; 404 for an unknown competition. `format=csv`
    gives the same rows as CSV (text a spreadsheet would run as a formula starts with an apostrophe)."""
    since, until = span(since, until)
    if competition_id is not None:
        get_competition(db_session=db_session, competition_id=competition_id)
    records = [
        WorkRecordRead.of(record)
        for record in work_records(
            db_session=db_session, since=since, until=until, competition_id=competition_id
        )
    ]
    if format == "json":
        return records
    return Response(
        work_records_csv(records),
        media_type="text/csv; charset=utf-8",
        headers={"Content-Disposition": f'attachment; filename="work-records-{since}-to-{until}.csv"'},
    )


def work_records_csv(records: list[WorkRecordRead]) -> str:
    """Work records as CSV with a header, one row per annotator and day (empty gold_accuracy: no gold)."""
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=list(WorkRecordRead.model_fields), lineterminator="\n")
    writer.writeheader()
    writer.writerows(
        {key: neutralised(value) for key, value in record.model_dump().items()} for record in records
    )
    return buffer.getvalue()
