"""Public result pages: the leaderboard (live or frozen), pair galleries and per-classifier analyses.

Every number shown comes from the leaderboard API responses (the same service calls), so a page can be
checked against /api/v1 and recomputed from the exports. The live pages take those numbers from the
public read cache (app/leaderboard/public_reads.py) in short database steps, like the API.
"""

from babel.support import NullTranslations
from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse
from sqlalchemy.orm import Session

from app.classifiers.service import get_classifier
from app.competitions.members import check_visible
from app.competitions.models import Competition
from app.competitions.service import get_competition
from app.core.threshold_rule import ThresholdRule
from app.db.session import DatabaseStepsDep, SessionDep
from app.errors import NotFound
from app.i18n import N_, in_language
from app.jobs.schemas import PairSelectionRead
from app.jobs.selections import shortfall_in_language
from app.leaderboard import charts, public_reads, snapshots
from app.leaderboard.public_reads import PublicReadsDep
from app.leaderboard.schemas import HistoryRead, LeaderboardRead, PairWithoutLabels, SnapshotRead
from app.leaderboard.settling import ACTIVE_PROVISIONAL_RULE
from app.leaderboard.standings import PROVISIONAL_RULE_TEXT, UNRANKED_REASONS, by_rank, no_rank_in_language
from app.users.auth import OptionalUser, SteppedUser
from app.users.models import Role
from app.web.dependencies import SettingsDep
from app.web.templating import page_translations, render, translate

PROVISIONAL_RULES = (PROVISIONAL_RULE_TEXT, ACTIVE_PROVISIONAL_RULE)
"""The provisional rules a leaderboard states (in English), shown in the reader's language."""

router = APIRouter(include_in_schema=False)


def _gallery_href(competition_id: int, a_id: int, b_id: int) -> str:
    """The page of a pair's gallery (lower id first)."""
    return f"/competitions/{competition_id}/pairs/{min(a_id, b_id)}/{max(a_id, b_id)}"


def _heatmap(board: LeaderboardRead) -> charts.Heatmap | None:
    """The heatmap of A over the ranked classifiers (none below two)."""
    ids = board.matrices.classifier_ids
    if len(ids) < 2:
        return None
    names = {standing.classifier_id: standing.name for standing in board.classifiers}
    return charts.accuracy_heatmap(
        [names[classifier_id] for classifier_id in ids],
        board.matrices.accuracy,
        board.matrices.labelled,
        lambda i, j: _gallery_href(board.competition_id, ids[i], ids[j]),
    )


def _history_chart(history: HistoryRead) -> charts.LineChart | None:
    """MAD rank of each classifier against labelled pair images (none before two points)."""
    if len(history.points) < 2:
        return None
    series = []
    for classifier_id, name in history.classifier_names.items():
        xs, ys = [], []
        for point in history.points:
            xs.append(point.labelled_images)
            ranks = dict(zip(point.classifier_ids, point.mad_ranks, strict=True))
            ys.append(ranks.get(classifier_id))
        series.append(charts.Series(name, xs, ys))
    m = max(len(point.classifier_ids) for point in history.points)
    return charts.line_chart(series, (1, m), range(1, m + 1), descending=True)


def _waiting_text(pair: PairWithoutLabels, words: NullTranslations) -> str:
    """What a pair without labels waits for, in words: '2 more annotators needed'."""
    if not pair.selected:
        return words.gettext("its images are not selected yet (a worker's job)")
    if pair.annotators_needed is None:
        return words.gettext("no image to ask about")
    count = pair.annotators_needed
    return words.ngettext("{count} more annotator needed", "{count} more annotators needed", count).format(
        count=count
    )


def _short_text(pair: PairSelectionRead, why: str | None, words: NullTranslations) -> str:
    """A pair that selected fewer than k images, in words: '0 of 30 selected: why'."""
    template = words.gettext("{selected} of {k} selected: {why}")
    return template.format(selected=pair.selected, k=pair.k, why=why)


def _below_threshold(
    board: LeaderboardRead, competition: Competition, i: int, j: int
) -> tuple[int, int] | None:
    """(images below T, images selected) of pair (i, j), shown where the rule is `fill` or some fell below
    T; None otherwise, and in snapshots frozen before the counts were recorded."""
    matrices = board.matrices
    if not matrices.below_threshold:
        return None
    below = matrices.below_threshold[i][j]
    shown = below or competition.threshold_rule == ThresholdRule.fill
    return (below, matrices.selected[i][j]) if shown else None


def decided_by_text(panel_size: int | None, words: NullTranslations) -> str:
    """How a question is decided, in words: 'one answer decides a question (a panel of 1)'."""
    if panel_size is None:
        return ""
    if panel_size == 1:
        return words.gettext("one answer decides a question (a panel of 1)")
    template = words.gettext("a question is decided once {needed} of a panel of {size} annotators agree")
    return template.format(needed=panel_size // 2 + 1, size=panel_size)


def _visible_competition(db_session: Session, competition_id: int, user) -> Competition:
    """The competition if the caller may see it (members.check_visible), else 404, 401 or 403."""
    competition = get_competition(db_session=db_session, competition_id=competition_id)
    return check_visible(db_session=db_session, competition=competition, user=user)


def _leaderboard_page(
    request: Request,
    user,
    competition: Competition,
    board: LeaderboardRead,
    history: HistoryRead | None,
    snapshot: SnapshotRead | None,
    snapshot_list: list[SnapshotRead],
):
    """Render the leaderboard page, live (with its history) or frozen (a snapshot)."""
    names = {standing.classifier_id: standing.name for standing in board.classifiers}
    ids = board.matrices.classifier_ids
    words = page_translations(request, user)
    waiting = {
        (p.classifier_a_id, p.classifier_b_id): _waiting_text(p, words) for p in board.pairs_without_labels
    }
    short_pairs = [(p, shortfall_in_language(competition, p, words)) for p in board.short_pairs]
    short = {(p.classifier_a_id, p.classifier_b_id): _short_text(p, why, words) for p, why in short_pairs}
    pairs = [
        (
            names[ids[i]],
            names[ids[j]],
            board.matrices.labelled[i][j],
            _gallery_href(competition.id, ids[i], ids[j]),
            waiting.get((ids[i], ids[j]), ""),
            short.get((ids[i], ids[j]), ""),
            _below_threshold(board, competition, i, j),
        )
        for i in range(len(ids))
        for j in range(i + 1, len(ids))
    ]
    return render(
        request,
        "leaderboard.html",
        user=user,
        is_admin=user is not None and user.role == Role.admin,
        competition=competition,
        board=board,
        by_rank=by_rank(board),
        no_rank={s.classifier_id: no_rank_in_language(board, s, words) for s in board.classifiers},
        short_pairs=short_pairs,
        names=names,
        not_compared=[
            entry.model_copy(update={"reason": in_language(entry.reason, UNRANKED_REASONS, words)})
            for entry in board.unranked
            if entry.classifier_id not in names
        ],
        pairs=pairs,
        decided_by=decided_by_text(board.panel_size, words),
        provisional_rule=in_language(board.provisional_rule, PROVISIONAL_RULES, words),
        heatmap=_heatmap(board),
        history_chart=None if history is None else _history_chart(history),
        snapshot=snapshot,
        snapshots=snapshot_list,
    )


@router.get("/competitions/{competition_id}/leaderboard", response_class=HTMLResponse)
async def leaderboard_page(
    competition_id: int, request: Request, steps: DatabaseStepsDep, reads: PublicReadsDep, user: SteppedUser
):
    """The live leaderboard: Table 1, the heatmap of A, case shares, history, galleries, snapshots."""

    def competition_and_snapshots(db_session: Session) -> tuple[Competition, list[SnapshotRead]]:
        competition = _visible_competition(db_session, competition_id, user)
        frozen = snapshots.list_snapshots(db_session=db_session, competition_id=competition_id)
        return competition, [snapshots.snapshot_read(snapshot) for snapshot in frozen]

    competition, snapshot_list = await steps.run(competition_and_snapshots)
    board = await public_reads.leaderboard(steps, reads, user, competition_id)
    history = await public_reads.history(steps, reads, user, competition_id)
    return _leaderboard_page(request, user, competition, board, history, None, snapshot_list)


@router.get("/leaderboards/{slug}", response_class=HTMLResponse)
def snapshot_page(slug: str, request: Request, db_session: SessionDep, user: OptionalUser):
    """A frozen leaderboard at its permalink, exactly as it was stored."""
    frozen = snapshots.snapshot_with_leaderboard(snapshots.get_snapshot(db_session=db_session, slug=slug))
    competition = _visible_competition(db_session, frozen.competition_id, user)
    return _leaderboard_page(request, user, competition, frozen.leaderboard, None, frozen, [])


@router.get("/competitions/{competition_id}/pairs/{a_id}/{b_id}", response_class=HTMLResponse)
async def gallery_page(
    competition_id: int,
    a_id: int,
    b_id: int,
    request: Request,
    steps: DatabaseStepsDep,
    reads: PublicReadsDep,
    user: SteppedUser,
):
    """A pair's selected images with both predictions, right or wrong once decided (paper Fig. 1c)."""
    competition = await steps.run(lambda db_session: _visible_competition(db_session, competition_id, user))
    gallery = await public_reads.gallery(steps, reads, user, competition_id, a_id, b_id)
    return render(
        request,
        "gallery.html",
        user=user,
        competition=competition,
        gallery=gallery,
        shortfall=shortfall_in_language(competition, gallery.selection, page_translations(request, user)),
    )


@router.get("/competitions/{competition_id}/classifiers/{classifier_id}", response_class=HTMLResponse)
async def classifier_page(
    competition_id: int,
    classifier_id: int,
    request: Request,
    steps: DatabaseStepsDep,
    reads: PublicReadsDep,
    settings: SettingsDep,
    user: SteppedUser,
):
    """Where a classifier fails: worst classes and superclasses, perplexing images, stability versus k."""

    def competition_of_classifier(db_session: Session) -> Competition:
        competition = _visible_competition(db_session, competition_id, user)
        classifier = get_classifier(db_session=db_session, classifier_id=classifier_id)
        if classifier.competition_id != competition.id:
            raise NotFound(f"classifier {classifier_id} is not in competition {competition.name!r}")
        return competition

    competition = await steps.run(competition_of_classifier)
    analysis = await public_reads.analysis(steps, reads, user, settings, classifier_id)
    board = await public_reads.leaderboard(steps, reads, user, competition_id)
    stability = analysis.stability
    standing = next((s for s in board.classifiers if s.classifier_id == classifier_id), None)
    return render(
        request,
        "classifier.html",
        user=user,
        competition=competition,
        analysis=analysis,
        standing=standing,
        no_rank=None
        if standing is None
        else no_rank_in_language(board, standing, page_translations(request, user)),
        opponents=[
            (standing.name, _gallery_href(competition_id, classifier_id, standing.classifier_id))
            for standing in board.classifiers
            if standing.classifier_id != classifier_id
        ],
        stability_chart=charts.line_chart(
            [
                charts.Series(
                    translate(request, N_("SRCC with the top-k ranking"), user),
                    stability.k_prime,
                    stability.srcc,
                )
            ],
            (min([0.0, *(v for v in stability.srcc if v is not None)]), 1.0),
            (0, 0.5, 0.9, 1),
        )
        if stability.k_prime
        else None,
    )
