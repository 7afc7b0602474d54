"""A change of a competition's selection settings (k, T, the threshold rule, the per-label cap): every pair is
selected again by select jobs from the stored predictions, no inference, and every vote on a question the new
selection still asks is kept (docs/architecture.md, Selection)."""

from itertools import combinations
from math import comb

import numpy as np
from sqlalchemy import delete, func, select
from sqlalchemy.orm import Session

from app.classifiers.enums import ClassifierStatus
from app.classifiers.models import Classifier
from app.classifiers.service import read_predictions
from app.competitions import service as competitions
from app.competitions.models import Competition, Sampling
from app.competitions.schemas import SELECTION_FIELDS, CompetitionUpdate, ReselectionRead
from app.competitions.service import competition_taxonomy, lock_competition
from app.core.selection import select_all_pairs
from app.errors import Conflict
from app.images.models import CompetitionImage
from app.images.service import competition_image_count
from app.jobs.enums import JobKind, JobStatus
from app.jobs.models import Job
from app.jobs.service import enqueue_selections
from app.labelling.active_sampling import policy
from app.labelling.models import LabelItem, PairImage, PairSubset, Question, Vote
from app.settings import Settings
from app.studies.progress import participant_votes_by_question

Asked = set[tuple[int, int]]
"""Questions as (image id, class index)."""


def update_competition(
    *, db_session: Session, settings: Settings, competition: Competition, update: CompetitionUpdate
) -> ReselectionRead | None:
    """Make the change (nothing on a dry run); what a change of the selection settings keeps and drops, None
    when they stay as they are."""
    change = update.selection_change({name: getattr(competition, name) for name in SELECTION_FIELDS})
    found = None
    if change:
        found = change_selection(
            db_session=db_session,
            settings=settings,
            competition=competition,
            change=change,
            dry_run=update.dry_run,
            confirm=update.confirm,
        )
    if not update.dry_run:
        competitions.update_competition(db_session=db_session, competition=competition, change=update)
    return found


def change_selection(
    *,
    db_session: Session,
    settings: Settings,
    competition: Competition,
    change: dict[str, object],
    dry_run: bool,
    confirm: bool,
) -> ReselectionRead:
    """Say what the change keeps and drops; unless a dry run, make it: drop the questions no longer asked
    (refused with Conflict when that drops votes and `confirm` is not given), clear the pairs' selections and
    queue their select jobs again."""
    lock_competition(db_session=db_session, competition_id=competition.id)
    running = db_session.scalar(
        select(func.count()).where(
            Job.competition_id == competition.id, Job.kind == JobKind.select, Job.status == JobStatus.running
        )
    )
    if running and not dry_run:
        raise Conflict(
            f"{running} select jobs of this competition are running: change the selection after them"
        )
    votes = _votes_by_question(db_session, competition)
    asked = _asked_after(db_session, settings, competition, change) if votes else set()
    kept = sum(count for question, count in votes.items() if question in asked)
    dropped = sum(votes.values()) - kept
    studies = participant_votes_by_question(db_session, competition.id) if dropped else {}
    found = ReselectionRead(
        applied=False,
        votes_kept=kept,
        votes_dropped=dropped,
        study_votes_dropped=sum(count for question, count in studies.items() if question not in asked),
        select_jobs=_pairs_of_ready(db_session, competition),
    )
    if dry_run:
        return found
    if dropped and not confirm:
        raise Conflict(
            f"{dropped_text(found)}: send confirm to make it, or dry_run to see this without changing "
            "anything"
        )
    _clear_selection(db_session, competition, asked)
    for name, value in change.items():
        setattr(competition, name, value)
    db_session.flush()
    jobs = enqueue_selections(
        db_session=db_session, competition_id=competition.id, max_attempts=settings.job_max_attempts
    )
    if competition.sampling == Sampling.active:
        _unsettle(db_session, competition, bool(jobs))
    return found.model_copy(update={"applied": True, "select_jobs": len(jobs)})


def dropped_text(found: ReselectionRead) -> str:
    """What a change keeps and drops, in words: the votes, and those of study participants among them."""
    text = (
        f"this change keeps {found.votes_kept} votes and drops {found.votes_dropped} (on images it no "
        "longer selects)"
    )
    if found.study_votes_dropped:
        text += (
            f"; {found.study_votes_dropped} of the dropped votes are crowd-study participants' work, and "
            "their images answered, active time and bonuses are counted from their votes, so they would "
            "drop too"
        )
    return text


def _pairs_of_ready(db_session: Session, competition: Competition) -> int:
    """The pairs of the competition's ready classifiers: the select jobs a change queues."""
    ready = db_session.scalar(
        select(func.count()).where(
            Classifier.competition_id == competition.id, Classifier.status == ClassifierStatus.ready
        )
    )
    return comb(int(ready or 0), 2)


def _unsettle(db_session: Session, competition: Competition, selecting: bool) -> None:
    """Under active sampling, the policy's state of the old selection is stale: the competition is no longer
    settled while its pairs are selected again (the last select job reruns the policy,
    app/jobs/service.py complete_select), or the policy reruns now when no select job was queued."""
    if selecting:
        competition.settled = False
        db_session.flush()
    else:
        policy.refresh(db_session, competition)


def _votes_by_question(db_session: Session, competition: Competition) -> dict[tuple[int, int], int]:
    """Votes per (image, class) question of the competition, gold questions left out (they stay)."""
    rows = db_session.execute(
        select(Question.image_id, Question.class_index, func.count(Vote.id))
        .join(Vote, Vote.question_id == Question.id)
        .where(Question.competition_id == competition.id, Question.gold_answer.is_(None))
        .group_by(Question.image_id, Question.class_index)
    )
    return {(image_id, class_index): count for image_id, class_index, count in rows}


def _asked_after(
    db_session: Session, settings: Settings, competition: Competition, change: dict[str, object]
) -> Asked:
    """The questions the pairs of ready classifiers ask under the changed settings: per pair, both labels of
    its first k usable images (as store_pair_subset asks them, a reserve image replacing a discarded one),
    from Algorithm 1 over the stored predictions, as the select jobs will compute it."""
    k = int(change.get("k", competition.k))  # type: ignore[call-overload]
    classifiers = db_session.scalars(
        select(Classifier)
        .where(Classifier.competition_id == competition.id, Classifier.status == ClassifierStatus.ready)
        .order_by(Classifier.id)
    ).all()
    if len(classifiers) < 2:
        return set()
    n_images = competition_image_count(db_session=db_session, competition_id=competition.id)
    predictions = [read_predictions(settings=settings, classifier=c, n_images=n_images) for c in classifiers]
    image_ids = np.zeros(n_images, dtype=np.int64)
    excluded = np.zeros(n_images, dtype=bool)
    for ordinal, image_id, out in db_session.execute(
        select(CompetitionImage.ordinal, CompetitionImage.image_id, CompetitionImage.excluded).where(
            CompetitionImage.competition_id == competition.id
        )
    ):
        image_ids[ordinal], excluded[ordinal] = image_id, out
    selections = select_all_pairs(
        np.stack([p.top1 for p in predictions]),
        np.stack([p.prob for p in predictions]),
        competition_taxonomy(competition).distance_matrix(),
        pairs=list(combinations(range(len(classifiers)), 2)),
        k=k,
        threshold=float(change.get("confidence_threshold", competition.confidence_threshold)),  # type: ignore[arg-type]
        max_per_label=int(change.get("max_per_label", competition.max_per_label)),  # type: ignore[call-overload]
        reserve_size=k,
        excluded=excluded,
        rule=change.get("threshold_rule", competition.threshold_rule),  # type: ignore[arg-type]
    )
    discarded = set(
        db_session.scalars(
            select(LabelItem.image_id).where(LabelItem.competition_id == competition.id, LabelItem.discarded)
        )
    )
    asked: Asked = set()
    for selection in selections.values():
        usable = [
            (int(image_ids[ordinal]), int(a), int(b))
            for ordinal, a, b in zip(selection.ordinals, selection.labels_i, selection.labels_j, strict=True)
            if int(image_ids[ordinal]) not in discarded
        ]
        asked.update((image, label) for image, a, b in usable[:k] for label in (a, b))
    return asked


def _clear_selection(db_session: Session, competition: Competition, asked: Asked) -> None:
    """Delete the pairs' selections, their select jobs not running, the questions not in `asked` (gold ones
    stay) with their votes, and the label items left without a question (discarded ones stay, as the image
    stays too difficult)."""
    subsets = select(PairSubset.id).where(PairSubset.competition_id == competition.id)
    db_session.execute(delete(PairImage).where(PairImage.subset_id.in_(subsets)))
    db_session.execute(delete(PairSubset).where(PairSubset.competition_id == competition.id))
    db_session.execute(delete(Job).where(Job.competition_id == competition.id, Job.kind == JobKind.select))
    questions = db_session.execute(
        select(Question.id, Question.image_id, Question.class_index).where(
            Question.competition_id == competition.id, Question.gold_answer.is_(None)
        )
    ).all()
    gone = [row.id for row in questions if (row.image_id, row.class_index) not in asked]
    for start in range(0, len(gone), 10_000):
        chunk = gone[start : start + 10_000]
        db_session.execute(delete(Vote).where(Vote.question_id.in_(chunk)))
        db_session.execute(delete(Question).where(Question.id.in_(chunk)))
    still_asked = select(Question.image_id).where(Question.competition_id == competition.id)
    db_session.execute(
        delete(LabelItem).where(
            LabelItem.competition_id == competition.id,
            ~LabelItem.discarded,
            LabelItem.image_id.notin_(still_asked),
        )
    )
    db_session.flush()
