"""GET /metrics in Prometheus text format, for the bearer of MAD_METRICS_TOKEN (off, 404, without one).

Per process: HTTP requests and their latency per route template (never the raw path, so ids and hashes do
not become series), and votes recorded (votes per minute: `rate(mad_votes_recorded_total[1m]) * 60`).
From the database at scrape time: open questions per competition, jobs by kind and state, workers holding
a lease and the age of the newest heartbeat. Nothing names a user. Under `mad serve --workers N` the
processes write their counts to PROMETHEUS_MULTIPROC_DIR (app/serving.py) and any of them answers for all.
"""

import hmac
import os
import time
from typing import Annotated

from fastapi import APIRouter, Header
from fastapi.responses import Response
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    REGISTRY,
    CollectorRegistry,
    Counter,
    Histogram,
    generate_latest,
    multiprocess,
)
from prometheus_client.core import GaugeMetricFamily
from sqlalchemy.orm import Session

from app.db.session import DatabaseStepsDep
from app.errors import NotAuthenticated, NotFound
from app.jobs.activity import job_counts, worker_activity
from app.labelling.results import open_question_counts
from app.web.dependencies import SettingsDep
from app.web.errors import error_responses

REQUESTS = Counter("mad_http_requests", "HTTP requests answered", ["method", "route", "status"])
LATENCY = Histogram(
    "mad_http_request_duration_seconds", "Time to answer an HTTP request", ["method", "route"]
)
VOTES = Counter("mad_votes_recorded", "Votes recorded (answers stored through the labelling API)")

router = APIRouter(tags=["operations"])


class RequestMetrics:
    """ASGI middleware counting each HTTP request and its latency under its route's template."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        started, status = time.perf_counter(), [500]

        async def send_status(message):
            if message["type"] == "http.response.start":
                status[0] = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_status)
        finally:
            route = getattr(scope.get("route"), "path", "unmatched")
            REQUESTS.labels(scope["method"], route, str(status[0])).inc()
            LATENCY.labels(scope["method"], route).observe(time.perf_counter() - started)


class DatabaseGauges:
    """A collector of values read from the database for one scrape."""

    def __init__(self, db_session: Session):
        self.open_questions = open_question_counts(db_session=db_session)
        self.jobs = job_counts(db_session=db_session)
        self.workers = worker_activity(db_session=db_session)

    def collect(self):
        """The gauges, as prometheus_client asks a collector for them."""
        questions = GaugeMetricFamily(
            "mad_open_questions", "Questions without an outcome", labels=["competition"]
        )
        for competition_id, count in sorted(self.open_questions.items()):
            questions.add_metric([str(competition_id)], count)
        jobs = GaugeMetricFamily("mad_jobs", "Jobs by kind and state", labels=["kind", "state"])
        for (kind, state), count in sorted(self.jobs.items()):
            jobs.add_metric([kind, state], count)
        yield from (questions, jobs)
        yield GaugeMetricFamily(
            "mad_leasing_workers",
            "Workers holding an unexpired job lease",
            value=self.workers.leasing_workers,
        )
        if self.workers.newest_heartbeat_age_s is not None:
            yield GaugeMetricFamily(
                "mad_newest_heartbeat_age_seconds",
                "Seconds since a worker last took or renewed a lease",
                value=self.workers.newest_heartbeat_age_s,
            )


def process_metrics() -> bytes:
    """This process's counters, or every server process's under PROMETHEUS_MULTIPROC_DIR."""
    if "PROMETHEUS_MULTIPROC_DIR" not in os.environ:
        return generate_latest(REGISTRY)
    registry = CollectorRegistry()
    multiprocess.MultiProcessCollector(registry)
    return generate_latest(registry)


@router.get(
    "/metrics",
    summary="Metrics for Prometheus (the bearer of MAD_METRICS_TOKEN)",
    response_class=Response,
    responses={200: {"content": {CONTENT_TYPE_LATEST: {}}}, **error_responses(401, 404)},
)
async def metrics(
    steps: DatabaseStepsDep, settings: SettingsDep, authorization: Annotated[str, Header()] = ""
) -> Response:
    """Requests and latencies per route template, votes recorded, open questions per competition, jobs by
    kind and state, leasing workers and the newest heartbeat's age (module docstring). 404 while
    MAD_METRICS_TOKEN is unset; 401 without `Authorization: Bearer <MAD_METRICS_TOKEN>`."""
    if not settings.metrics_token:
        raise NotFound("metrics are off: set MAD_METRICS_TOKEN and scrape with it as a bearer token")
    if not hmac.compare_digest(authorization.encode(), f"Bearer {settings.metrics_token}".encode()):
        raise NotAuthenticated("send Authorization: Bearer <MAD_METRICS_TOKEN>")
    registry = CollectorRegistry()
    registry.register(await steps.run(DatabaseGauges))
    return Response(process_metrics() + generate_latest(registry), media_type=CONTENT_TYPE_LATEST)
