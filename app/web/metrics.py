"""GET /metrics in Prometheus text format, for the bearer of MAD_METRICS_TOKEN (off, 404, without one).

Per process: HTTP requests and their latency per route template (never the raw path, so ids and hashes do
not become series), and the counters the domains keep (votes recorded, app/labelling/metrics.py). From the
database at scrape time: the gauges the application gives metrics_router (open questions per competition,
jobs by kind and state, workers holding a lease and the age of the newest heartbeat). Nothing names a user.
Under `mad serve --workers N` the processes write their counts to PROMETHEUS_MULTIPROC_DIR (app/serving.py)
and any of them answers for all.
"""

import hmac
import os
import time
from collections.abc import Callable, Sequence
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
from prometheus_client.metrics_core import Metric
from sqlalchemy.orm import Session

from app.db.session import DatabaseStepsDep
from app.errors import NotAuthenticated, NotFound
from app.web.dependencies import SettingsDep
from app.web.errors import error_responses

REQUESTS = Counter("mad_http_requests", "HTTP requests answered", ["method", "route", "status"])
LATENCY = Histogram(
    "mad_http_request_duration_seconds", "Time to answer an HTTP request", ["method", "route"]
)
Gauges = Callable[[Session], Sequence[Metric]]
"""Metrics read from the database for one scrape (app.labelling.metrics, app.jobs.activity)."""


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


class ReadGauges:
    """A collector of the metrics read for one scrape."""

    def __init__(self, metrics: list[Metric]):
        self.metrics = metrics

    def collect(self) -> list[Metric]:
        """The metrics, as prometheus_client asks a collector for them."""
        return self.metrics


def process_metrics() -> bytes:
    """This process's counters, or every server process's under PROMETHEUS_MULTIPROC_DIR."""
    if "PROMETHEUS_MULTIPROC_DIR" not in os.environ:
        return generate_latest(REGISTRY)
    registry = CollectorRegistry()
    multiprocess.MultiProcessCollector(registry)
    return generate_latest(registry)


def metrics_router(*gauges: Gauges) -> APIRouter:
    """The /metrics endpoint, with the gauges each of `gauges` reads at scrape time."""
    router = APIRouter(tags=["operations"])

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
        read = await steps.run(
            lambda db_session: [metric for gauge in gauges for metric in gauge(db_session)]
        )
        registry = CollectorRegistry()
        registry.register(ReadGauges(read))
        return Response(process_metrics() + generate_latest(registry), media_type=CONTENT_TYPE_LATEST)

    return router
