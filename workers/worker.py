"""The worker process: claim a job, run it (predict a shard, or select a pair), report it; repeat.

No shard waits on the service: while one is predicted, the worker claims its next job on a thread of its own
(the service I/O thread) and, when that is a shard for the same classifiers, queues it on the engine's loader
processes, which start reading it before the current shard ends; a shard's predictions are uploaded from that
thread while the next shard runs. Leases are kept alive by a heartbeat thread (workers/leases.py); a lease
lost to another worker stops the work on that job and its result is not reported. A classifier that cannot
be loaded fails its job permanently (the classifier is then marked failed with the reason); any other error
is reported and the job retried. A shard shared by several classifiers that fails is run again for each
alone, so only the one at fault fails.
"""

import os
import socket
import threading
import traceback
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import numpy as np
import torch

from app.classifiers.enums import ClassifierSource
from app.classifiers.timm_source import ClassifierSourceError, load_pretrained_tag, load_weights_file
from app.core.selection import Quantiles, diagnose_pair, diagnosis_quantiles, select_pair
from app.core.taxonomy_sources import cached_taxonomy
from app.jobs.enums import JobKind
from app.jobs.schemas import ClaimedJob, ClaimResponse, PredictTask, SelectTask
from workers.client import LeaseLost, ServiceClient, ServiceUnavailable
from workers.feed import FeedShard, ReadBytes
from workers.image_readers import choose_reader
from workers.inference import InferenceEngine, ShardOutputs
from workers.leases import LeaseKeeper

SELECTION_FIELDS = ("top1", "prob")
TRANSIENT_ERRORS = (httpx.TransportError, ServiceUnavailable)
"""Failures that pass: the service is down, restarting, or cannot reach its database for a moment."""
CACHED_PREDICTIONS = 32

Report = Callable[[str, int, int], None]


def default_worker_name() -> str:
    """host:pid, shown in job listings."""
    return f"{socket.gethostname()}:{os.getpid()}"


@dataclass
class WorkerOptions:
    """How this worker runs models."""

    device: str = "auto"
    batch_size: int = 64
    loader_workers: int | None = None
    compile: bool = False
    cache_dir: Path = Path("worker-cache")

    def torch_device(self) -> str:
        """cuda when asked for or available under 'auto', else cpu."""
        if self.device == "auto":
            return "cuda" if torch.cuda.is_available() else "cpu"
        return self.device


@dataclass(eq=False)
class Ahead:
    """The next claim, made on the service I/O thread while a shard runs, with the reader of its shard."""

    claimed: Future[tuple[ClaimResponse, ReadBytes | None]]
    looked_at: bool = False


@dataclass(eq=False)
class QueuedShard:
    """A shard claimed ahead and queued on an engine's loader processes, for these jobs."""

    engine: InferenceEngine
    job_ids: tuple[int, ...]
    shard: FeedShard


@dataclass
class Worker:
    """Runs jobs from one service until stopped (or idle, when asked to exit then)."""

    client: ServiceClient
    heartbeat_client: ServiceClient
    name: str
    options: WorkerOptions
    report: Report = lambda text, done, total: None
    models: dict[int, torch.nn.Module] = field(default_factory=dict)
    engine: InferenceEngine | None = None
    engine_classifiers: tuple[int, ...] = ()
    predictions: OrderedDict = field(default_factory=OrderedDict)
    quantiles: OrderedDict = field(default_factory=OrderedDict)
    """Each classifier's diagnosis_quantiles by (classifier, images, T, excluded ordinals), kept like
    `predictions`: a partition of the corpus per classifier, not one per pair."""
    storage_url: str = ""
    """Where the service keeps its blobs, from the latest claim."""
    jobs_done: int = 0
    io_client: ServiceClient = field(init=False)
    """The service I/O thread's own client (claims ahead, uploads), like `client`."""
    keeper: LeaseKeeper = field(init=False)
    io: ThreadPoolExecutor = field(init=False)
    stop: threading.Event = field(init=False, default_factory=threading.Event)
    ahead: Ahead | None = field(init=False, default=None)
    queued: QueuedShard | None = field(init=False, default=None)
    uploads: list[Future] = field(init=False, default_factory=list)
    counting: threading.Lock = field(init=False, default_factory=threading.Lock)

    def __post_init__(self) -> None:
        self.io_client = ServiceClient(self.client.base_url, self.client.token)

    def run(self, *, exit_when_idle: bool, poll_s: float = 2.0, stop: threading.Event | None = None) -> int:
        """Claim and run jobs, returning how many finished; stop on `stop` or, if asked, when all are done."""
        self.stop = stop or threading.Event()
        with (
            LeaseKeeper(self.heartbeat_client) as self.keeper,
            ThreadPoolExecutor(1, thread_name_prefix="service-io") as self.io,
        ):
            try:
                while (claim := self._next_claim(exit_when_idle, poll_s)) is not None:
                    self.run_claim(claim)
            finally:
                self._drain()
                self._drop_queued()
                self.ahead = None  # its leases, if any, run out: the jobs are taken over
        return self.jobs_done

    def _next_claim(self, exit_when_idle: bool, poll_s: float) -> ClaimResponse | None:
        """The claim made ahead when it has jobs; else, once this worker's uploads are done (so that the
        service counts unfinished jobs right), a claim made now; None when stopped or idle and asked to
        exit then."""
        while not self.stop.is_set():
            claim = self._take_ahead()
            if claim is not None and claim.jobs:
                return claim
            self._drain()
            try:
                claim = self.client.claim(self.name)
            except TRANSIENT_ERRORS as error:  # the service is restarting or lost its database: wait for it
                self.report(f"service unavailable, retrying ({type(error).__name__})", 0, 1)
                self.stop.wait(poll_s)
                continue
            if claim.jobs:
                self.keeper.hold(claim.jobs, claim.lease_seconds)
                return claim
            if exit_when_idle and claim.unfinished == 0:
                return None
            self.stop.wait(poll_s)
        return None

    def run_claim(self, claim: ClaimResponse) -> None:
        """Run the jobs of one claim, whose leases are held; a predict shard's upload is left queued on the
        service I/O thread."""
        jobs = claim.jobs
        self.storage_url = claim.storage_url
        try:
            if jobs[0].kind == JobKind.predict:
                self._predict(jobs)
            else:
                self._select(jobs[0])
                self.keeper.release(jobs)
        except LeaseLost:
            self.keeper.release(jobs)
        except Exception:
            if jobs[0].kind == JobKind.predict and len(jobs) > 1:
                self._predict_each_alone(jobs)
            else:
                self._fail_held(jobs, traceback.format_exc(limit=5), permanent=False)

    def _predict_each_alone(self, jobs: list[ClaimedJob]) -> None:
        """After a shard shared by several classifiers failed, run it for each on its own, so that only the
        classifier at fault (say, one whose preprocessing cannot be done) fails its job."""
        self.engine = None
        for job in jobs:
            if job.id in self.keeper.lost:
                self.keeper.release([job])
                continue
            try:
                self._predict([job])
            except LeaseLost:
                self.keeper.release([job])
            except Exception:
                self._fail_held([job], traceback.format_exc(limit=5), permanent=False)

    def _fail_held(
        self, jobs: list[ClaimedJob], error: str, permanent: bool, client: ServiceClient | None = None
    ) -> None:
        """Report a failure for each job whose lease is still ours, and stop holding them."""
        for job in jobs:
            if job.id not in self.keeper.lost:
                try:
                    (client or self.client).fail(job.id, job.lease_token, error, permanent)
                except (LeaseLost, *TRANSIENT_ERRORS):  # unreported: the lease runs out, the job is retried
                    pass
        self.keeper.release(jobs)

    def _model(self, task: PredictTask) -> torch.nn.Module:
        """The classifier's timm model, loaded once and kept while its shards keep coming."""
        classifier_id = task.classifier_id
        if classifier_id not in self.models:
            if task.source == ClassifierSource.timm_weights:
                path = self.client.weights_file(
                    classifier_id,
                    _given(task, task.weights_sha256, "weights file"),
                    _given(task, task.weights_format, "weights format"),
                    self.options.cache_dir,
                )
                architecture = _given(task, task.architecture, "architecture")
                model = load_weights_file(architecture, path, task.num_classes, task.data_config)
            else:
                model = load_pretrained_tag(
                    _given(task, task.pretrained_tag, "pretrained tag"),
                    task.num_classes,
                    cache_dir=self.options.cache_dir / "hub",
                )
            self.models[classifier_id] = model
        return self.models[classifier_id]

    def _engine(self, classifier_ids: tuple[int, ...], models: list[torch.nn.Module]) -> InferenceEngine:
        """The engine running these classifiers' models, kept across claims while the set stays the same."""
        if self.engine is None or self.engine_classifiers != classifier_ids:
            self.engine = None  # let the previous engine's models and compiled graphs go first
            self.engine = InferenceEngine(
                models,
                device=self.options.torch_device(),
                batch_size=self.options.batch_size,
                num_workers=self.options.loader_workers,
                compile=self.options.compile,
            )
            self.engine_classifiers = classifier_ids
        return self.engine

    def _predict(self, jobs: list[ClaimedJob]) -> None:
        """Predict one shard with every claimed classifier at once (shared decoding); queue the uploads."""
        tasks = [(job, _predict_task(job)) for job in jobs]
        wanted = {task.classifier_id for _, task in tasks}
        self.models = {cid: model for cid, model in self.models.items() if cid in wanted}
        runnable, models = [], []
        for job, task in sorted(tasks, key=lambda job_task: job_task[1].classifier_id):
            try:
                models.append(self._model(task))
                runnable.append((job, task))
            except ClassifierSourceError as error:
                self._fail_held([job], str(error), permanent=True)
        if not runnable:
            return
        held = [job for job, _ in runnable]
        lease, task = runnable[0]
        classifier_ids = tuple(task.classifier_id for _, task in runnable)
        engine = self._engine(classifier_ids, models)
        shard = self._queued_shard(engine, held) or engine.submit(
            _shard_ordinals(task), self._reader(self.storage_url, lease, self.client)
        )
        names = ", ".join(task.classifier_name for _, task in runnable)
        label = f"predict {task.shard_start}–{task.shard_end} ({names})"

        def progress(done: int, total: int) -> None:
            self.keeper.report_progress(held, done)
            self.report(label, done, total)
            if self.keeper.all_lost(held):
                raise LeaseLost("every lease of this shard was taken over")
            self._look_ahead(engine, classifier_ids)

        outputs = engine.run(shard, progress)
        self.uploads.append(self.io.submit(self._upload, held, outputs))

    def _upload(self, jobs: list[ClaimedJob], outputs: ShardOutputs) -> None:
        """On the service I/O thread: each job's predictions, once the device has them, uploaded under its
        lease (a refused upload is reported as the job's failure, to be retried); then the jobs are let go."""
        try:
            results = outputs.predictions()
        except Exception:
            self._fail_held(jobs, traceback.format_exc(limit=5), permanent=False, client=self.io_client)
            return
        for job, predictions in zip(jobs, results, strict=True):
            if job.id in self.keeper.lost:
                continue
            try:
                self.io_client.complete_predict(job.id, job.lease_token, predictions)
            except LeaseLost:
                continue
            except Exception:
                self._fail_held([job], traceback.format_exc(limit=5), permanent=False, client=self.io_client)
                continue
            with self.counting:
                self.jobs_done += 1
        self.keeper.release(jobs)

    def _look_ahead(self, engine: InferenceEngine, classifier_ids: tuple[int, ...]) -> None:
        """While a shard runs: claim the next job on the service I/O thread; once it is claimed, and if it is
        a shard for the same classifiers, queue it on the engine behind the current one."""
        if self.stop.is_set():
            return
        if self.ahead is None:
            self.ahead = Ahead(self.io.submit(self._claim_ahead))
            return
        if self.ahead.looked_at or not self.ahead.claimed.done() or self.ahead.claimed.exception():
            return
        self.ahead.looked_at = True
        claim, reader = self.ahead.claimed.result()
        if reader is None or _classifier_ids(claim.jobs) != classifier_ids:
            return
        try:
            ordinals = _shard_ordinals(_predict_task(claim.jobs[0]))
        except RuntimeError:  # the claim fails with this error when it runs
            return
        self.queued = QueuedShard(engine, _job_ids(claim.jobs), engine.submit(ordinals, reader))

    def _claim_ahead(self) -> tuple[ClaimResponse, ReadBytes | None]:
        """On the service I/O thread: claim, hold the leases, and for a predict shard choose its reader."""
        claim = self.io_client.claim(self.name)
        if not claim.jobs:
            return claim, None
        self.keeper.hold(claim.jobs, claim.lease_seconds)
        first = claim.jobs[0]
        if first.kind != JobKind.predict:
            return claim, None
        return claim, self._reader(claim.storage_url, first, self.io_client)

    def _take_ahead(self) -> ClaimResponse | None:
        """The claim made ahead, if any (None if it failed: a claim made now will say why)."""
        ahead, self.ahead = self.ahead, None
        if ahead is None or ahead.claimed.exception() is not None:
            return None
        return ahead.claimed.result()[0]

    def _queued_shard(self, engine: InferenceEngine, jobs: list[ClaimedJob]) -> FeedShard | None:
        """The shard queued ahead for these jobs on this engine; a shard queued for others is dropped."""
        queued, self.queued = self.queued, None
        if queued is not None and queued.engine is engine and queued.job_ids == _job_ids(jobs):
            return queued.shard
        if queued is not None:
            queued.engine.cancel(queued.shard)
        return None

    def _drop_queued(self) -> None:
        """Let go of a shard queued ahead that will not run."""
        if self.queued is not None:
            self.queued.engine.cancel(self.queued.shard)
            self.queued = None

    def _drain(self) -> None:
        """Wait for the uploads in flight."""
        for upload in self.uploads:
            upload.result()
        self.uploads.clear()

    def _reader(self, storage_url: str, job: ClaimedJob, client: ServiceClient) -> ReadBytes:
        """How the loader processes read this job's shard."""
        task = _predict_task(job)
        return choose_reader(storage_url, task.images, client.base_url, client.token, job.id, job.lease_token)

    def _select(self, job: ClaimedJob) -> None:
        """Algorithm 1 for one pair over the whole corpus, its reserve and its diagnosis; upload them."""
        task = job.select
        if task is None:
            raise RuntimeError(f"select job {job.id} came without its task")
        label = f"select pair {task.classifier_a_name} × {task.classifier_b_name}"
        self.report(label, 0, 1)
        n_images = task.num_images
        distance = cached_taxonomy(task.taxonomy, task.taxonomy_source).distance_matrix()
        a = self._predictions_of(task.classifier_a_id, n_images)
        b = self._predictions_of(task.classifier_b_id, n_images)
        excluded = np.zeros(n_images, dtype=bool)
        excluded[np.asarray(task.excluded_ordinals, dtype=np.int64)] = True
        predictions = (a["top1"][:n_images], a["prob"][:n_images], b["top1"][:n_images], b["prob"][:n_images])
        quantiles = (
            self._quantiles_of(task.classifier_a_id, *predictions[:2], task, excluded),
            self._quantiles_of(task.classifier_b_id, *predictions[2:], task, excluded),
        )
        threshold, rule = task.confidence_threshold, task.threshold_rule
        selection = select_pair(
            *predictions,
            distance,
            k=task.k,
            threshold=threshold,
            max_per_label=task.max_per_label,
            reserve_size=task.reserve_size,
            excluded=excluded,
            rule=rule,
            quantiles=quantiles,
        )
        diagnosis = diagnose_pair(
            *predictions,
            selected=selection.n_selected,
            threshold=threshold,
            rule=rule,
            excluded=excluded,
            quantiles=quantiles,
        )
        if self.keeper.all_lost([job]):
            raise LeaseLost("the selection was taken over")
        self.client.complete_select(job.id, job.lease_token, selection, diagnosis)
        with self.counting:
            self.jobs_done += 1
        self.report(label, 1, 1)

    def _quantiles_of(
        self,
        classifier_id: int,
        labels: np.ndarray,
        probs: np.ndarray,
        task: SelectTask,
        excluded: np.ndarray,
    ) -> Quantiles:
        """A classifier's diagnosis_quantiles over the task's corpus, computed once (again if the corpus, T or
        the excluded images changed)."""
        key = (classifier_id, task.num_images, task.confidence_threshold, tuple(task.excluded_ordinals))
        found = self.quantiles.get(key)
        if found is None:
            found = self.quantiles[key] = diagnosis_quantiles(
                labels, probs, task.confidence_threshold, excluded
            )
            while len(self.quantiles) > CACHED_PREDICTIONS:
                self.quantiles.popitem(last=False)
        self.quantiles.move_to_end(key)
        return found

    def _predictions_of(self, classifier_id: int, n_images: int) -> dict[str, np.ndarray]:
        """A classifier's top-1 labels and probabilities, downloaded once (again if the corpus grew)."""
        cached = self.predictions.get(classifier_id)
        if cached is None or len(cached["top1"]) < n_images:
            cached = self.client.predictions(classifier_id, SELECTION_FIELDS)
            self.predictions[classifier_id] = cached
            while len(self.predictions) > CACHED_PREDICTIONS:
                self.predictions.popitem(last=False)
        self.predictions.move_to_end(classifier_id)
        return cached


def _given(task: PredictTask, value: str | None, what: str) -> str:
    """A field the task's source needs; without it the classifier cannot be loaded."""
    if value is None:
        raise ClassifierSourceError(
            f"classifier {task.classifier_name!r} ({task.source.value}) has no {what}"
        )
    return value


def _predict_task(job: ClaimedJob) -> PredictTask:
    """The predict task a predict job comes with."""
    if job.predict is None:
        raise RuntimeError(f"predict job {job.id} came without its task")
    return job.predict


def _shard_ordinals(task: PredictTask) -> list[int]:
    """The ordinals of a task's images, which must be its shard's range in order."""
    ordinals = [image.ordinal for image in task.images]
    if ordinals != list(range(task.shard_start, task.shard_end)):
        raise RuntimeError(f"shard {task.shard_start}-{task.shard_end} lists ordinals out of order")
    return ordinals


def _classifier_ids(jobs: list[ClaimedJob]) -> tuple[int, ...]:
    """The classifiers of a predict claim's jobs, in order."""
    return tuple(sorted(_predict_task(job).classifier_id for job in jobs))


def _job_ids(jobs: list[ClaimedJob]) -> tuple[int, ...]:
    """Job ids in order."""
    return tuple(sorted(job.id for job in jobs))


def run_worker(
    *,
    url: str,
    token: str,
    options: WorkerOptions,
    exit_when_idle: bool,
    report: Report,
    name: str | None = None,
    stop: threading.Event | None = None,
) -> int:
    """Run one worker against the service at `url`; returns the number of jobs it finished."""
    client, heartbeat_client = ServiceClient(url, token), ServiceClient(url, token)
    worker = Worker(client, heartbeat_client, name or default_worker_name(), options, report)
    try:
        return worker.run(exit_when_idle=exit_when_idle, stop=stop)
    finally:
        client.close()
        heartbeat_client.close()
        worker.io_client.close()
