"""The worker process: claim a job, run it (predict a shard, or select a pair), report it; repeat.

Leases are kept alive by a heartbeat thread; a lease lost to another worker stops the work on that job
and its result is not reported. A classifier that cannot be loaded fails its job permanently (the
classifier is then marked failed with the reason); any other error is reported and the job retried. A
shard shared by several classifiers that fails is run again for each alone, so only the one at fault fails.
"""

import os
import socket
import threading
import traceback
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import numpy as np
import torch

from app.classifiers.enums import ClassifierSource
from app.classifiers.timm_source import ClassifierSourceError, load_pretrained_tag, load_weights_file
from app.core.selection import diagnose_pair, select_pair
from app.core.taxonomy_sources import cached_taxonomy
from app.jobs.enums import JobKind
from app.jobs.schemas import ClaimedJob, ClaimResponse, PredictTask
from workers.client import LeaseLost, ServiceClient, ServiceUnavailable
from workers.image_readers import choose_reader
from workers.inference import InferenceEngine

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


class LeaseKeeper:
    """Heartbeats the leases of the jobs in hand from a background thread, recording progress and losses."""

    def __init__(self, client: ServiceClient, leases: dict[int, str], interval_s: float):
        self.client = client
        self.leases = dict(leases)
        self.interval_s = interval_s
        self.progress_done = 0
        self.lost: set[int] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._beat, name="lease-keeper", daemon=True)

    def __enter__(self) -> "LeaseKeeper":
        self._thread.start()
        return self

    def __exit__(self, *exc_info) -> None:
        self._stop.set()
        self._thread.join()

    def _beat(self) -> None:
        """Every interval, extend the leases still held; a refused one is recorded as lost."""
        while not self._stop.wait(self.interval_s):
            held_leases = [(j, t, self.progress_done) for j, t in self.leases.items() if j not in self.lost]
            try:
                held = self.client.heartbeat(held_leases)
            except Exception:  # a missed beat is retried next interval; the lease has slack
                continue
            self.lost |= {job_id for job_id, is_held in held.items() if not is_held}

    def all_lost(self) -> bool:
        """True when every lease in hand was taken over."""
        return self.lost >= set(self.leases)


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
    storage_url: str = ""
    """Where the service keeps its blobs, from the latest claim."""
    jobs_done: int = 0

    def run(self, *, exit_when_idle: bool, poll_s: float = 2.0, stop: threading.Event | None = None) -> int:
        """Claim and run jobs, returning how many finished; stop on `stop` or, if asked, when all are done."""
        stop = stop or threading.Event()
        while not stop.is_set():
            try:
                claim = self.client.claim(self.name)
            except TRANSIENT_ERRORS as error:  # the service is restarting or lost its database: wait for it
                self.report(f"service unavailable, retrying ({type(error).__name__})", 0, 1)
                stop.wait(poll_s)
                continue
            if not claim.jobs:
                if exit_when_idle and claim.unfinished == 0:
                    break
                stop.wait(poll_s)
                continue
            self.run_claim(claim)
        return self.jobs_done

    def run_claim(self, claim: ClaimResponse) -> None:
        """Run the jobs of one claim under heartbeats."""
        jobs = claim.jobs
        self.storage_url = claim.storage_url
        leases = {job.id: job.lease_token for job in jobs}
        with LeaseKeeper(self.heartbeat_client, leases, interval_s=claim.lease_seconds / 3) as keeper:
            try:
                if jobs[0].kind == JobKind.predict:
                    self._predict(jobs, keeper)
                else:
                    self._select(jobs[0], keeper)
            except LeaseLost:
                return
            except Exception:
                if jobs[0].kind == JobKind.predict and len(jobs) > 1:
                    self._predict_each_alone(jobs, keeper)
                else:
                    self._fail_held(jobs, keeper, traceback.format_exc(limit=5), permanent=False)

    def _predict_each_alone(self, jobs: list[ClaimedJob], keeper: LeaseKeeper) -> None:
        """After a shard shared by several classifiers failed, run it for each on its own, so that only the
        classifier at fault (say, one whose preprocessing cannot be done) fails its job."""
        self.engine = None
        for job in jobs:
            if job.id in keeper.lost:
                continue
            try:
                self._predict([job], keeper)
            except LeaseLost:
                continue
            except Exception:
                self._fail_held([job], keeper, traceback.format_exc(limit=5), permanent=False)

    def _fail_held(self, jobs: list[ClaimedJob], keeper: LeaseKeeper, error: str, permanent: bool) -> None:
        """Report a failure for each job whose lease is still ours."""
        for job in jobs:
            if job.id not in keeper.lost:
                try:
                    self.client.fail(job.id, job.lease_token, error, permanent)
                except (LeaseLost, *TRANSIENT_ERRORS):  # unreported: the lease runs out, the job is retried
                    pass

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

    def _predict(self, jobs: list[ClaimedJob], keeper: LeaseKeeper) -> None:
        """Predict one shard with every claimed classifier at once (shared decoding), upload each result."""
        tasks = [(job, _predict_task(job)) for job in jobs]
        wanted = {task.classifier_id for _, task in tasks}
        self.models = {cid: model for cid, model in self.models.items() if cid in wanted}
        runnable, models = [], []
        for job, task in sorted(tasks, key=lambda job_task: job_task[1].classifier_id):
            try:
                models.append(self._model(task))
                runnable.append((job, task))
            except ClassifierSourceError as error:
                self._fail_held([job], keeper, str(error), permanent=True)
        if not runnable:
            return
        lease, task = runnable[0]
        ordinals = [image.ordinal for image in task.images]
        if ordinals != list(range(task.shard_start, task.shard_end)):
            raise RuntimeError(f"shard {task.shard_start}-{task.shard_end} lists ordinals out of order")
        reader = choose_reader(
            self.storage_url,
            task.images,
            self.client.base_url,
            self.client.token,
            lease.id,
            lease.lease_token,
        )
        engine = self._engine(tuple(task.classifier_id for _, task in runnable), models)
        names = ", ".join(task.classifier_name for _, task in runnable)
        label = f"predict {task.shard_start}–{task.shard_end} ({names})"

        def progress(done: int, total: int) -> None:
            keeper.progress_done = done
            self.report(label, done, total)
            if keeper.all_lost():
                raise LeaseLost("every lease of this shard was taken over")

        results = engine.predict(ordinals, reader, progress)
        for (job, _), predictions in zip(runnable, results, strict=True):
            if job.id in keeper.lost:
                continue
            try:
                self.client.complete_predict(job.id, job.lease_token, predictions)
                self.jobs_done += 1
            except LeaseLost:
                continue

    def _select(self, job: ClaimedJob, keeper: LeaseKeeper) -> None:
        """Algorithm 1 for one pair over the whole corpus, its reserve and its diagnosis; upload them."""
        task = job.select
        if task is None:
            raise RuntimeError(f"select job {job.id} came without its task")
        label = f"select pair {task.classifier_a_id}×{task.classifier_b_id}"
        self.report(label, 0, 1)
        n_images = task.num_images
        distance = cached_taxonomy(task.taxonomy, task.taxonomy_source).distance_matrix()
        a = self._predictions_of(task.classifier_a_id, n_images)
        b = self._predictions_of(task.classifier_b_id, n_images)
        excluded = np.zeros(n_images, dtype=bool)
        excluded[np.asarray(task.excluded_ordinals, dtype=np.int64)] = True
        predictions = (a["top1"][:n_images], a["prob"][:n_images], b["top1"][:n_images], b["prob"][:n_images])
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
        )
        diagnosis = diagnose_pair(
            *predictions, selected=selection.n_selected, threshold=threshold, rule=rule, excluded=excluded
        )
        if keeper.all_lost():
            raise LeaseLost("the selection was taken over")
        self.client.complete_select(job.id, job.lease_token, selection, diagnosis)
        self.jobs_done += 1
        self.report(label, 1, 1)

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
