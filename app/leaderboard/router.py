"""Leaderboard API: standings (JSON or CSV), history, snapshots, pair galleries, analyses, exports, and
the agreement and reliability of the votes behind them.

Public: the leaderboard, its history and snapshots, pair galleries and classifier analyses (which show a
model's prediction on an image only once every question on the image is decided); a members-only
competition's to its members and admins only (401 or 403 to anyone else: nothing of it is public).
Admin: freezing a snapshot and every export: subsets and predictions name each model's label on every
image, open ones too, which would tell annotators which model asked which question; votes and questions
are per-annotator answers and live tallies; so is the quality report (agreement and reliability per
annotator).

The public computed reads are kept per data version of their competition (app/leaderboard/public_reads.py);
their endpoints take the database in short steps (DatabaseSteps), never holding the gate while they wait.
"""

import csv
import io
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, Query, Request, status
from fastapi.responses import Response, StreamingResponse
from sqlalchemy.orm import Session, sessionmaker

from app.competitions.dependencies import CompetitionDep, VisibleCompetitionDep
from app.competitions.members import check_visible
from app.competitions.service import get_competition
from app.csv_cells import neutralised
from app.db.session import DatabaseStepsDep, SessionDep, through_database_gate
from app.errors import InvalidInput
from app.leaderboard import exports, public_reads, snapshots
from app.leaderboard.agreement import competition_quality
from app.leaderboard.public_reads import PublicReadsDep
from app.leaderboard.schemas import (
    ClassifierAnalysisRead,
    HistoryRead,
    LeaderboardRead,
    PairGalleryRead,
    QualityRead,
    SnapshotCreate,
    SnapshotRead,
    SnapshotWithLeaderboard,
)
from app.leaderboard.tables import LEADERBOARD_TABLES, LeaderboardTable
from app.users.auth import AdminUser, OptionalUser, SteppedUser
from app.web.dependencies import SettingsDep
from app.web.errors import error_responses

router = APIRouter(prefix="/api/v1", tags=["leaderboard"])

CSV_MEDIA_TYPE = "text/csv; charset=utf-8"
FORMAT_DESCRIPTION = "csv, parquet or jsonl (JSON Lines)."


def export_sessions(request: Request) -> sessionmaker[Session]:
    """The session factory exports read their batches with (one short transaction per batch)."""
    return request.app.state.sessionmaker


ExportSessions = Annotated[sessionmaker[Session], Depends(export_sessions)]


def leaderboard_csv(leaderboard: LeaderboardRead, table: LeaderboardTable) -> str:
    """One table of the leaderboard as CSV with a header (empty field = null; text a spreadsheet would run
    as a formula starts with an apostrophe)."""
    columns, rows = LEADERBOARD_TABLES[table]
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=columns, lineterminator="\n")
    writer.writeheader()
    writer.writerows({key: neutralised(value) for key, value in row.items()} for row in rows(leaderboard))
    return buffer.getvalue()


def _wants_csv(request: Request, requested: str | None) -> bool:
    """?format=csv, or no format and an Accept header asking for text/csv."""
    if requested is not None:
        return requested == "csv"
    return "text/csv" in request.headers.get("accept", "")


@router.get(
    "/competitions/{competition_id}/leaderboard",
    summary="The leaderboard (JSON or CSV)",
    response_model=LeaderboardRead,
    responses={200: {"content": {"text/csv": {}}}, **error_responses(401, 403, 404, 409, 422)},
)
async def read_leaderboard(
    request: Request,
    competition_id: int,
    steps: DatabaseStepsDep,
    reads: PublicReadsDep,
    user: SteppedUser,
    format: Annotated[Literal["json", "csv"] | None, Query(description="json (default) or csv")] = None,
    table: Annotated[
        LeaderboardTable | None,
        Query(
            description="With CSV, which table: classifiers (default; one row per compared classifier, "
            "ranked or not), pairs (A, B and n in long form: i, j, a_ij, b_ij, n_ij) or summary (λmax, "
            "consistency index, SRCC, KRCC, case shares). The JSON holds them all."
        ),
    ] = None,
) -> LeaderboardRead | Response:
    """The MAD ranking from the decided questions: Perron score and rank with seeded bootstrap intervals,
    HodgeRank / Bradley–Terry / win-rate ranks, labelled images, reported accuracy, accuracy rank and
    Δrank (Table 1), SRCC and KRCC, λmax and consistency index, case shares, and matrices A, B and n.

    `?format=csv` (or `Accept: text/csv`) gives one table as CSV, chosen by `table`: classifiers, pairs or
    summary; together they hold every number of the JSON. `table` without CSV is refused (422). The same
    votes always give the same numbers. 409 when the competition's smoothing α is 0 (a Perron rank needs
    every a_ij > 0; only competitions created before α > 0 was required can have it).
    """
    wants_csv = _wants_csv(request, format)
    if table is not None and not wants_csv:
        raise InvalidInput("table= chooses a CSV table: add format=csv (the JSON holds every table)")
    leaderboard = await public_reads.leaderboard(steps, reads, user, competition_id)
    if wants_csv:
        table = table or "classifiers"
        name = leaderboard.competition_name
        return Response(
            leaderboard_csv(leaderboard, table),
            media_type=CSV_MEDIA_TYPE,
            headers={"Content-Disposition": f'inline; filename="{name}-leaderboard-{table}.csv"'},
        )
    return leaderboard


@router.get(
    "/competitions/{competition_id}/leaderboard/history",
    summary="How the ranking formed",
    responses=error_responses(401, 403, 404, 409, 422),
)
async def read_history(
    competition_id: int, steps: DatabaseStepsDep, reads: PublicReadsDep, user: SteppedUser
) -> HistoryRead:
    """Perron ranks after up to 24 evenly spaced numbers of labelled pair images, replaying today's labels
    in the order their questions were decided; classifiers take part from their registration."""
    return await public_reads.history(steps, reads, user, competition_id)


@router.get(
    "/competitions/{competition_id}/pairs/{a_id}/{b_id}",
    summary="A pair's selected images",
    responses=error_responses(401, 403, 404, 422),
)
async def read_pair_gallery(
    competition_id: int,
    a_id: int,
    b_id: int,
    steps: DatabaseStepsDep,
    reads: PublicReadsDep,
    user: SteppedUser,
) -> PairGalleryRead:
    """The images selected for classifiers a and b (either order; a is returned as the lower id) with both
    predictions, marked right or wrong once decided, and the images discarded as too difficult."""
    return await public_reads.gallery(steps, reads, user, competition_id, a_id, b_id)


@router.get(
    "/classifiers/{classifier_id}/analysis",
    summary="Where a classifier fails",
    responses=error_responses(401, 403, 404, 409, 422),
)
async def read_classifier_analysis(
    classifier_id: int,
    steps: DatabaseStepsDep,
    reads: PublicReadsDep,
    settings: SettingsDep,
    user: SteppedUser,
) -> ClassifierAnalysisRead:
    """Its worst classes and superclasses by precision on MAD labels, its pair images with the highest
    C-perplexity (with X-perplexity), and the stability of the ranking versus k (paper Fig. 5)."""
    return await public_reads.analysis(steps, reads, user, settings, classifier_id)


@router.post(
    "/competitions/{competition_id}/snapshots",
    status_code=status.HTTP_201_CREATED,
    summary="Freeze the leaderboard (admin)",
    responses=error_responses(401, 403, 404, 409, 422),
)
def create_snapshot(
    body: SnapshotCreate, db_session: SessionDep, admin: AdminUser, competition: CompetitionDep
) -> SnapshotRead:
    """Store the leaderboard as it is now; it is served unchanged at its permalink /leaderboards/{slug}."""
    snapshot = snapshots.freeze_leaderboard(
        db_session=db_session, competition=competition, note=body.note, user=admin
    )
    return snapshots.snapshot_read(snapshot)


@router.get(
    "/competitions/{competition_id}/snapshots",
    summary="List frozen leaderboards",
    responses=error_responses(401, 403, 404, 422),
)
def list_snapshots(db_session: SessionDep, competition: VisibleCompetitionDep) -> list[SnapshotRead]:
    """A competition's snapshots, newest first, with their permalinks."""
    return [
        snapshots.snapshot_read(snapshot)
        for snapshot in snapshots.list_snapshots(db_session=db_session, competition_id=competition.id)
    ]


@router.get(
    "/leaderboards/{slug}", summary="A frozen leaderboard", responses=error_responses(401, 403, 404, 422)
)
def read_snapshot(slug: str, db_session: SessionDep, user: OptionalUser) -> SnapshotWithLeaderboard:
    """The snapshot with the leaderboard exactly as it was frozen (a members-only competition's to its
    members and admins)."""
    snapshot = snapshots.get_snapshot(db_session=db_session, slug=slug)
    competition = get_competition(db_session=db_session, competition_id=snapshot.competition_id)
    check_visible(db_session=db_session, competition=competition, user=user)
    return snapshots.snapshot_with_leaderboard(snapshot)


EXPORT_RESPONSES: dict[int | str, dict[str, Any]] = {
    200: {"content": {media_type: {} for media_type in exports.MEDIA_TYPES.values()}}
}
FormatQuery = Annotated[exports.ExportFormat, Query(description=FORMAT_DESCRIPTION)]
EXPORTS = {
    "subsets": (
        "Export pair subsets with predictions and outcomes (admin)",
        """Every pair's images in selection order with role (selected, reserve, discarded), both predictions,
the decided outcomes of both questions and when the pair was selected: with the classifiers list and
the competition (smoothing, k), enough to recompute the leaderboard (a pair's labels: its selected
rows with both outcomes known), and with the questions export's decision times, its history.""",
    ),
    "predictions": (
        "Export prediction summaries (admin)",
        """Per classifier and image with a prediction: top-1 label index, its probability and the softmax
entropy in bits (C-perplexity of an image = 2^mean entropy). A classifier whose new images are still
being predicted (a shard missing in the middle) is left out until its shards are complete.""",
    ),
    "votes": (
        "Export votes (admin)",
        """Every vote with its question, annotator id, answer, seconds and time; `counted` says whether it
counts towards the majority (not a gold question, annotator's votes not excluded).""",
    ),
    "questions": (
        "Export questions (admin)",
        """Every question (image, class) with its outcome (null while open), decision time, gold answer and
counted yes/no votes.""",
    ),
    "adjudications": (
        "Export adjudications (admin)",
        """Every admin verdict on a split question or on a discarded or not-natural-flagged image: kind,
verdict (confirmed, overturned), the panel's outcome and the one that stands (for an image: whether it is
discarded), the reason, who decided and when.""",
    ),
}
"""Each export table: the summary and description of its endpoint."""


def _add_export_endpoint(table: str, summary: str, description: str) -> None:
    """GET /competitions/{competition_id}/exports/{table} (admin): the table streamed in the format asked."""

    def export(
        request: Request,
        sessions: ExportSessions,
        settings: SettingsDep,
        _admin: AdminUser,
        competition: CompetitionDep,
        format: FormatQuery = "csv",
    ) -> StreamingResponse:
        source = exports.ExportSource(sessions, competition, settings)
        return StreamingResponse(
            through_database_gate(request, exports.encode(exports.TABLES[table], source, format)),
            media_type=exports.MEDIA_TYPES[format],
            headers={"Content-Disposition": f'attachment; filename="{competition.name}-{table}.{format}"'},
        )

    router.add_api_route(
        f"/competitions/{{competition_id}}/exports/{table}",
        export,
        methods=["GET"],
        name=f"export_{table}",
        response_class=StreamingResponse,
        responses={**EXPORT_RESPONSES, **error_responses(401, 403, 404, 422)},
        summary=summary,
        description=description,
    )


for _table, (_summary, _description) in EXPORTS.items():
    _add_export_endpoint(_table, _summary, _description)


@router.get(
    "/competitions/{competition_id}/quality",
    summary="Agreement and reliability of the votes, and the ranking from Dawid–Skene labels (admin)",
    responses=error_responses(401, 403, 404, 422),
)
def read_quality(_admin: AdminUser, competition: CompetitionDep, db_session: SessionDep) -> QualityRead:
    """Krippendorff's α (nominal) over the competition's questions, and per annotator against the majority
    of the others' answers; Dawid–Skene estimates of each annotator's sensitivity, specificity and accuracy;
    the MAD (Perron) ranking from the panel's majority outcomes beside the one from Dawid–Skene labels, with
    the SRCC between them. Counted votes on questions that are not gold."""
    return competition_quality(db_session=db_session, competition=competition)
