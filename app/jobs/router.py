"""The worker protocol (claim, heartbeat, results, failure) and job progress for admins."""

import io
from typing import Annotated

import numpy as np
from fastapi import APIRouter, File, Form, Header, Query, UploadFile
from fastapi.responses import StreamingResponse

from app.classifiers.models import Classifier
from app.classifiers.npz import load_npz
from app.classifiers.prediction_store import Predictions
from app.competitions.dependencies import CompetitionDep
from app.competitions.models import Competition
from app.core.selection import PairDiagnosis, PairSelection
from app.db.session import SessionDep
from app.errors import InvalidInput, PayloadTooLarge
from app.images.service import competition_image_count
from app.jobs import progress, service
from app.jobs.archives import archive_bytes, shard_archive
from app.jobs.enums import JobKind, JobStatus
from app.jobs.models import Job
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
from app.web.dependencies import SettingsDep
from app.web.errors import error_responses

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
        classifier = db_session.get_one(Classifier, job.classifier_id)
        shard_start, shard_end = job.shard
        images = service.shard_images(
            db_session=db_session, competition_id=job.competition_id, start=shard_start, end=shard_end
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
            shard_start=shard_start,
            shard_end=shard_end,
            images=[
                ImageRef(ordinal=image.ordinal, sha256=image.sha256, format=image.format) for image in images
            ],
        )
    else:
        claimed.select = SelectTask(
            classifier_a_id=job.classifier_id,
            classifier_a_name=db_session.get_one(Classifier, job.classifier_id).name,
            classifier_b_id=job.classifier_b_id,
            classifier_b_name=db_session.get_one(Classifier, job.classifier_b_id).name,
            num_images=competition_image_count(db_session=db_session, competition_id=competition.id),
            k=competition.k,
            reserve_size=competition.k,
            confidence_threshold=competition.confidence_threshold,
            threshold_rule=competition.threshold_rule,
            max_per_label=competition.max_per_label,
            taxonomy=competition.taxonomy,
            taxonomy_source=competition.taxonomy_source,
            excluded_ordinals=service.excluded_ordinals(db_session=db_session, competition_id=competition.id),
        )
    return claimed


@router.post("/jobs/claim", summary="Lease the next job (worker)", responses=error_responses(401, 403, 422))
def claim_jobs(
    body: ClaimRequest, db_session: SessionDep, settings: SettingsDep, _worker: WorkerUser
) -> ClaimResponse:
    """The oldest queued job (or one whose lease expired), with same-shard predict jobs; [] when none."""
    jobs = service.claim(db_session=db_session, worker=body.worker, lease_seconds=settings.job_lease_s)
    return ClaimResponse(
        lease_seconds=settings.job_lease_s,
        jobs=[_claimed(db_session, job) for job in jobs],
        unfinished=service.unfinished_count(db_session=db_session),
        storage_url=settings.blob_store.url,
    )


@router.get(
    "/jobs/{job_id}/images.tar",
    response_class=StreamingResponse,
    responses={
        200: {"content": {"application/x-tar": {}}, "description": "Members <ordinal>.<ext>, in order."},
        **error_responses(401, 403, 404, 409, 422),
    },
    summary="A predict shard's images as one streamed tar archive (worker)",
)
def shard_images_archive(
    job_id: int,
    db_session: SessionDep,
    settings: SettingsDep,
    _worker: WorkerUser,
    x_lease_token: Annotated[
        str | None, Header(min_length=1, max_length=64, description="The lease token of the job's claim.")
    ] = None,
    lease_token: Annotated[
        str | None,
        Query(
            min_length=1,
            max_length=64,
            deprecated=True,
            description="The lease token, as older workers send it (X-Lease-Token keeps it out of URLs).",
        ),
    ] = None,
    start: Annotated[
        int | None, Query(ge=0, description="First ordinal; the shard's start if omitted.")
    ] = None,
    end: Annotated[
        int | None, Query(ge=0, description="Past the last ordinal; the shard's end if omitted.")
    ] = None,
) -> StreamingResponse:
    """The images of ordinals [start, end) of the job's shard, for the worker holding its lease: a worker
    that cannot read the blob store itself asks for its images a batch at a time here, not one by one."""
    held = x_lease_token or lease_token
    if held is None:
        raise InvalidInput("send the job's lease token in the X-Lease-Token header")
    job = service.leased_predict_job(db_session=db_session, job_id=job_id, lease_token=held)
    shard_start, shard_end = job.shard
    start = shard_start if start is None else start
    end = shard_end if end is None else end
    if not shard_start <= start <= end <= shard_end:
        raise InvalidInput(f"ordinals {start}..{end} are outside shard {shard_start}..{shard_end}")
    images = service.shard_images(
        db_session=db_session, competition_id=job.competition_id, start=start, end=end
    )
    return StreamingResponse(
        shard_archive(settings.blob_store, images),
        media_type="application/x-tar",
        headers={"Content-Length": str(archive_bytes(images))},
    )


@router.post(
    "/jobs/heartbeat",
    summary="Extend leases and report progress (worker)",
    responses=error_responses(401, 403, 422),
)
def heartbeat(
    body: HeartbeatRequest, db_session: SessionDep, settings: SettingsDep, _worker: WorkerUser
) -> list[LeaseState]:
    """Extend every lease still held; held=false means another worker took the job over: stop it."""
    held = service.heartbeat(
        db_session=db_session,
        leases=[(lease.job_id, lease.lease_token, lease.progress_done) for lease in body.leases],
        lease_seconds=settings.job_lease_s,
    )
    return [LeaseState(job_id=job_id, held=is_held) for job_id, is_held in held.items()]


def _read_predictions_npz(upload: UploadFile, max_bytes: int, max_rows: int) -> Predictions:
    """Prediction arrays from an uploaded .npz (no pickles, none inflating beyond max_rows rows), checked
    against the layout."""
    data = upload.file.read(max_bytes + 1)
    if len(data) > max_bytes:
        raise PayloadTooLarge(f"a predictions shard is at most {max_bytes:,} bytes")
    names = tuple(Predictions.empty(0).arrays())
    try:
        arrays = load_npz(io.BytesIO(data), names, max_rows * BYTES_PER_PREDICTION_ROW)
        return Predictions(**{name: arrays[name] for name in names})
    except (ValueError, KeyError) as error:  # NpzError is a ValueError, as are Predictions layout errors
        reason = str(error) or type(error).__name__
        raise InvalidInput(f"predictions upload is not a valid shard .npz: {reason}") from None


@router.post(
    "/jobs/{job_id}/predictions",
    summary="Finish a predict job with its shard's arrays (worker)",
    responses=error_responses(401, 403, 404, 409, 413, 422, 503),
)
def complete_predict(
    job_id: int,
    lease_token: Annotated[str, Form()],
    predictions: Annotated[
        UploadFile, File(description="npz with top1, prob, entropy_bits, top5, top5_prob.")
    ],
    db_session: SessionDep,
    settings: SettingsDep,
    _worker: WorkerUser,
) -> JobRead:
    """Store the shard (atomically) and finish the job; 409 when the lease was lost. Repeating is harmless."""
    max_bytes = settings.predict_shard_size * BYTES_PER_PREDICTION_ROW + NPZ_OVERHEAD_BYTES
    job = service.complete_predict(
        db_session=db_session,
        settings=settings,
        job_id=job_id,
        lease_token=lease_token,
        predictions=_read_predictions_npz(predictions, max_bytes, settings.predict_shard_size),
    )
    return JobRead.model_validate(job)


@router.post(
    "/jobs/{job_id}/selection",
    summary="Finish a select job with the pair's subset (worker)",
    responses=error_responses(401, 403, 404, 409, 422),
)
def complete_select(
    job_id: int, body: SelectionResult, db_session: SessionDep, _worker: WorkerUser
) -> JobRead:
    """Store S_ij, its reserve and its threshold diagnosis and finish the job; 409 when the lease was lost.
    Repeating is harmless. Under active sampling the competition's last select job reruns the policy."""
    selection = PairSelection(
        ordinals=np.asarray(body.ordinals, dtype=np.int64),
        distances=np.asarray(body.distances),
        labels_i=np.asarray(body.labels_a),
        labels_j=np.asarray(body.labels_b),
        probs_i=np.asarray(body.probs_a),
        probs_j=np.asarray(body.probs_b),
        n_selected=body.n_selected,
        passed=~np.asarray(body.below_threshold or [False] * len(body.ordinals), dtype=bool),
    )
    job = service.complete_select(
        db_session=db_session,
        job_id=job_id,
        lease_token=body.lease_token,
        selection=selection,
        diagnosis=PairDiagnosis.from_dict(body.diagnosis.model_dump()),
    )
    db_session.commit()
    service.rerun_policy_once_selected(db_session=db_session, competition_id=job.competition_id)
    return JobRead.model_validate(job)


@router.post(
    "/jobs/{job_id}/fail",
    summary="Report a failed job (worker)",
    responses=error_responses(401, 403, 404, 409, 422),
)
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


@router.get("/jobs", summary="List jobs (admin)", responses=error_responses(401, 403, 422))
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


@router.get(
    "/competitions/{competition_id}/progress",
    summary="Prediction and selection progress (admin)",
    responses=error_responses(401, 403, 404, 422),
)
def competition_progress(
    db_session: SessionDep, settings: SettingsDep, _admin: AdminUser, competition: CompetitionDep
) -> CompetitionProgress:
    """Images predicted per classifier, pairs selected of all pairs, jobs by status, and the workers seen
    lately, with a warning when none has been seen for a job lease."""
    return CompetitionProgress(
        **progress.competition_progress(
            db_session=db_session, competition_id=competition.id, lost_after_s=settings.job_lease_s
        )
    )
