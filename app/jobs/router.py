"""The worker protocol (claim, heartbeat, results, failure) and job progress for admins."""

import io
import zipfile
from typing import Annotated

import numpy as np
from fastapi import APIRouter, File, Form, Query, Request, UploadFile

from app.classifiers.models import Classifier
from app.classifiers.prediction_store import Predictions
from app.competitions.models import Competition
from app.competitions.service import get_competition
from app.core.selection import PairSelection
from app.db import SessionDep
from app.errors import InvalidInput, PayloadTooLarge
from app.jobs import service
from app.jobs.models import Job, JobKind, JobStatus
from app.jobs.schemas import (
    ClaimedJob,
    ClaimRequest,
    ClaimResponse,
    CompetitionProgress,
    FailureReport,
    HeartbeatRequest,
    ImageRef,
    JobRead,
    LeaseState,
    PredictTask,
    SelectionResult,
    SelectTask,
)
from app.users.auth import AdminUser, WorkerUser

router = APIRouter(prefix="/api/v1", tags=["jobs"])

BYTES_PER_PREDICTION_ROW = 64
NPZ_OVERHEAD_BYTES = 64 * 1024


def _claimed(db_session, job: Job) -> ClaimedJob:
    """The lease and the task description a worker needs to run one job."""
    competition = db_session.get(Competition, job.competition_id)
    claimed = ClaimedJob(
        id=job.id,
        kind=job.kind,
        competition_id=job.competition_id,
        lease_token=job.lease_token,
        lease_expires_at=job.lease_expires_at,
    )
    if job.kind == JobKind.predict:
        classifier = db_session.get(Classifier, job.classifier_id)
        images = service.shard_images(
            db_session=db_session, competition_id=job.competition_id, start=job.shard_start, end=job.shard_end
        )
        claimed.predict = PredictTask(
            classifier_id=classifier.id,
            classifier_name=classifier.name,
            source=classifier.source,
            architecture=classifier.architecture,
            pretrained_tag=classifier.pretrained_tag,
            weights_sha256=classifier.weights_sha256,
            weights_format=classifier.weights_format,
            data_config=classifier.data_config,
            num_classes=len(competition.class_keys),
            shard_start=job.shard_start,
            shard_end=job.shard_end,
            images=[ImageRef(ordinal=ordinal, sha256=sha256) for ordinal, sha256 in images],
        )
    else:
        claimed.select = SelectTask(
            classifier_a_id=job.classifier_id,
            classifier_b_id=job.other_classifier_id,
            num_images=service.competition_image_count(db_session=db_session, competition_id=competition.id),
            k=competition.k,
            reserve_size=competition.k,
            confidence_threshold=competition.confidence_threshold,
            max_per_label=competition.max_per_label,
            taxonomy=competition.taxonomy,
            taxonomy_source=competition.taxonomy_source,
            excluded_ordinals=service.excluded_ordinals(db_session=db_session, competition_id=competition.id),
        )
    return claimed


@router.post("/jobs/claim", summary="Lease the next job (worker)")
def claim_jobs(
    body: ClaimRequest, request: Request, db_session: SessionDep, _worker: WorkerUser
) -> ClaimResponse:
    """The oldest queued job (or one whose lease expired), with same-shard predict jobs; [] when none."""
    settings = request.app.state.settings
    jobs = service.claim(db_session=db_session, worker=body.worker, lease_seconds=settings.job_lease_s)
    return ClaimResponse(
        lease_seconds=settings.job_lease_s,
        jobs=[_claimed(db_session, job) for job in jobs],
        unfinished=service.unfinished_count(db_session=db_session),
    )


@router.post("/jobs/heartbeat", summary="Extend leases and report progress (worker)")
def heartbeat(
    body: HeartbeatRequest, request: Request, db_session: SessionDep, _worker: WorkerUser
) -> list[LeaseState]:
    """Extend every lease still held; held=false means another worker took the job over: stop it."""
    held = service.heartbeat(
        db_session=db_session,
        leases=[(lease.job_id, lease.lease_token, lease.progress_done) for lease in body.leases],
        lease_seconds=request.app.state.settings.job_lease_s,
    )
    return [LeaseState(job_id=job_id, held=is_held) for job_id, is_held in held.items()]


def _read_predictions_npz(upload: UploadFile, max_bytes: int) -> Predictions:
    """Prediction arrays from an uploaded .npz (no pickles), checked against the layout."""
    data = upload.file.read(max_bytes + 1)
    if len(data) > max_bytes:
        raise PayloadTooLarge(f"a predictions shard is at most {max_bytes:,} bytes")
    try:
        with np.load(io.BytesIO(data), allow_pickle=False) as arrays:
            return Predictions(**{name: arrays[name] for name in Predictions.empty(0).arrays()})
    except (ValueError, KeyError, OSError, EOFError, zipfile.BadZipFile) as error:
        reason = str(error) or type(error).__name__
        raise InvalidInput(f"predictions upload is not a valid shard .npz: {reason}") from None


@router.post("/jobs/{job_id}/predictions", summary="Finish a predict job with its shard's arrays (worker)")
def complete_predict(
    job_id: int,
    lease_token: Annotated[str, Form()],
    predictions: Annotated[
        UploadFile, File(description="npz with top1, prob, entropy_bits, top5, top5_prob.")
    ],
    request: Request,
    db_session: SessionDep,
    _worker: WorkerUser,
) -> JobRead:
    """Store the shard (atomically) and finish the job; 409 when the lease was lost. Repeating is harmless."""
    settings = request.app.state.settings
    max_bytes = settings.predict_shard_size * BYTES_PER_PREDICTION_ROW + NPZ_OVERHEAD_BYTES
    job = service.complete_predict(
        db_session=db_session,
        settings=settings,
        job_id=job_id,
        lease_token=lease_token,
        predictions=_read_predictions_npz(predictions, max_bytes),
    )
    return JobRead.model_validate(job)


@router.post("/jobs/{job_id}/selection", summary="Finish a select job with the pair's subset (worker)")
def complete_select(
    job_id: int, body: SelectionResult, db_session: SessionDep, _worker: WorkerUser
) -> JobRead:
    """Store S_ij and its reserve and finish the job; 409 when the lease was lost. Repeating is harmless."""
    selection = PairSelection(
        ordinals=np.asarray(body.ordinals, dtype=np.int64),
        distances=np.asarray(body.distances),
        labels_i=np.asarray(body.labels_a),
        labels_j=np.asarray(body.labels_b),
        probs_i=np.asarray(body.probs_a),
        probs_j=np.asarray(body.probs_b),
        n_selected=body.n_selected,
    )
    job = service.complete_select(
        db_session=db_session, job_id=job_id, lease_token=body.lease_token, selection=selection
    )
    return JobRead.model_validate(job)


@router.post("/jobs/{job_id}/fail", summary="Report a failed job (worker)")
def fail_job(job_id: int, body: FailureReport, db_session: SessionDep, _worker: WorkerUser) -> JobRead:
    """Requeue the job, or fail it (and its classifier) when permanent or out of attempts; keeps the error."""
    job = service.fail(
        db_session=db_session,
        job_id=job_id,
        lease_token=body.lease_token,
        error=body.error,
        permanent=body.permanent,
    )
    return JobRead.model_validate(job)


@router.get("/jobs", summary="List jobs (admin)")
def list_jobs(
    db_session: SessionDep,
    _admin: AdminUser,
    competition_id: int | None = None,
    status: JobStatus | None = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
) -> list[JobRead]:
    """Newest first, optionally of one competition and one status, with errors and leases."""
    jobs = service.list_jobs(db_session=db_session, competition_id=competition_id, status=status, limit=limit)
    return [JobRead.model_validate(job) for job in jobs]


@router.get("/competitions/{competition_id}/progress", summary="Prediction and selection progress (admin)")
def competition_progress(
    competition_id: int, db_session: SessionDep, _admin: AdminUser
) -> CompetitionProgress:
    """Images predicted per classifier, pairs selected of all pairs, jobs by status."""
    get_competition(db_session=db_session, competition_id=competition_id)
    return CompetitionProgress(
        **service.competition_progress(db_session=db_session, competition_id=competition_id)
    )
