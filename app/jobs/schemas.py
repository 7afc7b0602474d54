"""Bodies of the worker protocol (claim, heartbeat, results, failure) and job listings."""

from datetime import datetime
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, model_validator

from app.classifiers.enums import ClassifierSource, ClassifierStatus
from app.core.threshold_rule import ThresholdRule
from app.jobs.enums import JobKind, JobStatus


class ClaimRequest(BaseModel):
    """Who is asking for work (shown in job listings)."""

    worker: str = Field(min_length=1, max_length=200, examples=["gpu-box-1:4242"])


class ImageRef(BaseModel):
    """An image of the shard: its ordinal, the hash it is served at (/images/{sha256}) and its format (which
    with the hash names its blob, for a worker that reads the store itself)."""

    ordinal: int
    sha256: str
    format: str


class PredictTask(BaseModel):
    """Predict ordinals [shard_start, shard_end) with one classifier."""

    classifier_id: int
    classifier_name: str
    source: ClassifierSource
    architecture: str | None
    pretrained_tag: str | None
    weights_sha256: str | None
    weights_format: str | None
    data_config: dict | None
    num_classes: int
    shard_start: int
    shard_end: int
    images: list[ImageRef]


class SelectTask(BaseModel):
    """Select the top-k discrepancy images of a pair over ordinals 0..num_images-1 (Algorithm 1)."""

    classifier_a_id: int
    classifier_a_name: str
    classifier_b_id: int
    classifier_b_name: str
    num_images: int
    k: int
    reserve_size: int
    confidence_threshold: float
    threshold_rule: ThresholdRule = Field(
        description="absolute: both top-1 probabilities ≥ T; quantile: each ≥ its classifier's T-quantile."
    )
    max_per_label: int
    taxonomy: str
    taxonomy_source: str | None
    excluded_ordinals: list[int]


class ClaimedJob(BaseModel):
    """A leased job: keep its lease_token for heartbeats, the result and failure reports."""

    id: int
    kind: JobKind
    competition_id: int
    lease_token: str
    lease_expires_at: datetime
    predict: PredictTask | None = None
    select: SelectTask | None = None


class ClaimResponse(BaseModel):
    """Leased jobs (empty when there is no work now), lease length, and jobs still queued or running."""

    lease_seconds: int
    jobs: list[ClaimedJob]
    unfinished: int = Field(description="Queued or running jobs; 0 means a worker may stop waiting.")
    storage_url: str = Field(
        description="Where the service keeps its blobs (file:///path or s3://bucket/prefix, no "
        "credentials): a worker that can read it reads images there, others ask for each shard's images.tar."
    )


class Lease(BaseModel):
    """A lease to extend, with the job's progress so far."""

    job_id: int
    lease_token: str
    progress_done: int = Field(default=0, ge=0)


class HeartbeatRequest(BaseModel):
    """Leases the worker still works on."""

    leases: list[Lease] = Field(max_length=100)


class LeaseState(BaseModel):
    """Whether the worker still holds a job; if not, it must stop working on it."""

    job_id: int
    held: bool


Ordinal = Annotated[int, Field(ge=0, le=2**63 - 1, description="An image's ordinal in the competition.")]
Label = Annotated[int, Field(ge=0, le=2**31 - 1, description="A class index.")]
Distance = Annotated[
    float, Field(ge=0, allow_inf_nan=False, description="WordNet distance of the two labels (Eq. 3).")
]
Probability = Annotated[float, Field(ge=0, le=1, allow_inf_nan=False, description="A top-1 probability.")]


Count = Annotated[int, Field(ge=0, le=2**63 - 1)]


class ThresholdSurvivors(BaseModel):
    """How many of a pair's disagreements pass one threshold."""

    rule: ThresholdRule
    threshold: float = Field(ge=0, le=1, allow_inf_nan=False)
    images: Count


class SelectionDiagnosis(BaseModel):
    """How a pair's selection went (app/core/selection.py, PairDiagnosis), computed by its select job."""

    rule: ThresholdRule = Field(description="The threshold rule the pair was selected under.")
    threshold: float = Field(ge=0, le=1, allow_inf_nan=False, description="Its T.")
    cutoffs: tuple[Probability, Probability] = Field(
        description="The probability each classifier had to reach: T, or its own T-quantile."
    )
    disagreements: Count = Field(
        description="Images both classifiers predict with different labels (excluded images left out)."
    )
    confident: Count = Field(description="Disagreements that pass the threshold: the candidates.")
    most_confident: Probability | None = Field(
        description="The largest min(p_a, p_b) over the disagreements; null without any."
    )
    selected: Count = Field(description="Images selected (at most k; under `fill`, some of them below T).")
    survivors: list[ThresholdSurvivors] = Field(
        max_length=100, description="Disagreements that would pass other thresholds, absolute and quantile."
    )

    @model_validator(mode="after")
    def _consistent(self) -> "SelectionDiagnosis":
        """No count exceeds the disagreements, and the selected images are candidates (under `fill`, any
        disagreement)."""
        counts = [self.confident, *(survivors.images for survivors in self.survivors)]
        candidates = self.disagreements if self.rule == ThresholdRule.fill else self.confident
        if max(counts) > self.disagreements or self.selected > candidates:
            raise ValueError("a diagnosis counts at most its disagreements, and selects among its candidates")
        return self


class SelectionResult(BaseModel):
    """A pair's accepted images in greedy order: the first n_selected are S_ij, the rest the reserve."""

    lease_token: str
    n_selected: int = Field(ge=0)
    diagnosis: SelectionDiagnosis
    ordinals: list[Ordinal]
    distances: list[Distance]
    labels_a: list[Label]
    labels_b: list[Label]
    probs_a: list[Probability]
    probs_b: list[Probability]
    below_threshold: list[bool] | None = Field(
        default=None,
        description="Per image, whether a `fill` selection took it below T; null: every image passed T.",
    )

    @model_validator(mode="after")
    def _same_lengths(self) -> "SelectionResult":
        """Every column has one value per image."""
        lengths = {len(self.ordinals), len(self.distances), len(self.labels_a), len(self.labels_b)}
        lengths |= {len(self.probs_a), len(self.probs_b)}
        lengths |= set() if self.below_threshold is None else {len(self.below_threshold)}
        if len(lengths) != 1 or self.n_selected > len(self.ordinals):
            raise ValueError("ordinals, distances, labels and probs must have equal lengths ≥ n_selected")
        if self.diagnosis.selected != self.n_selected:
            raise ValueError("the diagnosis must count the n_selected images selected")
        return self


class FailureReport(BaseModel):
    """Why a job failed; permanent failures (bad weights, wrong class count) are not retried."""

    lease_token: str
    error: str = Field(min_length=1, max_length=10_000)
    permanent: bool = False


class JobRead(BaseModel):
    """A job with its lease and progress."""

    model_config = ConfigDict(from_attributes=True)

    id: int
    competition_id: int
    kind: JobKind
    key: str
    classifier_id: int
    other_classifier_id: int | None
    shard_start: int | None
    shard_end: int | None
    status: JobStatus
    attempts: int
    max_attempts: int
    lease_owner: str | None
    lease_expires_at: datetime | None
    progress_done: int
    progress_total: int
    error: str | None
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None


class ClassifierProgress(BaseModel):
    """How far one classifier's predictions are, and how many of its pairs selected no image."""

    classifier_id: int
    name: str
    status: ClassifierStatus
    images_predicted: int
    images_total: int
    error: str | None
    pairs_selected: int = Field(description="Its pairs whose selection is stored.")
    pairs_empty: int = Field(description="Of those, the pairs that selected no image (pairs says why).")


class PairSelectionRead(BaseModel):
    """A pair's stored selection: images selected of k, its reserve, its diagnosis and, if short, why."""

    classifier_a_id: int
    classifier_a: str
    classifier_b_id: int
    classifier_b: str
    selected: int = Field(description="Images selected for labelling (at most k).")
    k: int
    reserve: int = Field(description="Images in reserve, to replace discarded ones.")
    below_threshold: int = Field(
        default=0,
        description="Of the images being labelled, those a `fill` selection took below T (0 under the "
        "absolute and quantile rules).",
    )
    diagnosis: SelectionDiagnosis | None = Field(
        description="The threshold diagnosis; null for pairs selected before it was kept."
    )
    shortfall: str | None = Field(
        description="Why the pair selected fewer than k images, in words; null when it selected k."
    )


class WorkerSeen(BaseModel):
    """A worker by the name it gives, and when it last asked for work or sent a heartbeat."""

    worker: str
    last_seen_at: datetime
    seen_ago: str = Field(examples=["12 s", "4 min"], description="How long ago, roughly.")


class CompetitionProgress(BaseModel):
    """Predictions per classifier, pairs selected, jobs by status, and the workers seen lately."""

    competition_id: int
    images: int
    classifiers: list[ClassifierProgress]
    pairs_selected: int
    pairs_total: int
    pairs_empty: int = Field(description="Selected pairs with no image.")
    pairs_short: int = Field(description="Selected pairs with some images but fewer than k.")
    pairs: list[PairSelectionRead] = Field(
        description="Every stored pair of active classifiers, with its diagnosis and, if short of k, why."
    )
    jobs_by_status: dict[str, int]
    workers: list[WorkerSeen] = Field(description="The workers seen most recently first (at most 10).")
    worker_warning: str | None = Field(
        description="Set when no worker has been seen for a job lease (MAD_JOB_LEASE_S): since when, and how "
        "many of the competition's jobs wait."
    )
