"""Serving the app with uvicorn: `mad serve`, and on a private localhost port inside this process (embedded
worker, live tests).

Both close a connection that has not sent a whole request head within MAD_HEADER_TIMEOUT_S (uvicorn has no
such timeout: half-sent requests were held open until the file descriptors ran out) and hold at most
MAD_MAX_CONNECTIONS connections per process (uvicorn answers 503 beyond). Their access log never shows the
secrets a URL can carry (RedactSecrets).
"""

import asyncio
import copy
import logging
import os
import re
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

import uvicorn
from fastapi import FastAPI
from uvicorn.supervisors import Multiprocess

from app.settings import Settings

if TYPE_CHECKING:  # auto is httptools' protocol when installed, else h11's; both have the same interface
    from uvicorn.protocols.http.h11_impl import H11Protocol as AutoHTTPProtocol
else:
    from uvicorn.protocols.http.auto import AutoHTTPProtocol

STARTUP_TIMEOUT_S = 30
SECRETS_IN_URLS = re.compile(r"(/invitations/|[?&]lease_token=)[^/?&#\s]+|(/join/)\S+")
"""An invitation link's token (the page's path), a lease token in a query (older workers sent it there;
ours send the X-Lease-Token header), and a crowd study's link: its token and its whole query, which holds
the participant's platform ids (personal data) under parameter names of the admin's choosing."""


class RedactSecrets(logging.Filter):
    """Replace the secrets of SECRETS_IN_URLS in uvicorn's access log lines with [redacted]: a log is read
    by more people, and kept longer, than the links it records."""

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.args, tuple):  # client, method, path with query, HTTP version, status
            record.args = tuple(
                SECRETS_IN_URLS.sub(_redacted, arg) if isinstance(arg, str) else arg for arg in record.args
            )
        return True


def _redacted(secret: re.Match) -> str:
    """What stays of a secret in a URL: the part before it (a path's folder or a query's name)."""
    return (secret.group(1) or secret.group(2)) + "[redacted]"


def log_config() -> dict:
    """uvicorn's logging configuration, with RedactSecrets on its access log."""
    config = copy.deepcopy(uvicorn.config.LOGGING_CONFIG)
    config["filters"] = {"redact_secrets": {"()": RedactSecrets}}
    config["loggers"]["uvicorn.access"]["filters"] = ["redact_secrets"]
    return config


class ServerConfig(uvicorn.Config):
    """uvicorn's config, with how long a request head may take to arrive."""

    def __init__(self, app: FastAPI | str, *, head_timeout_s: float, **options):
        super().__init__(app, **options)
        self.head_timeout_s = head_timeout_s


class HeadTimeoutProtocol(AutoHTTPProtocol):
    """uvicorn's HTTP protocol, closing a connection whose request head is not complete within the config's
    head_timeout_s of its first byte (or of the connection, for the first request)."""

    config: ServerConfig

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._head_deadline: asyncio.TimerHandle | None = None
        self._arm_head_deadline()

    def data_received(self, data: bytes) -> None:
        if self._head_deadline is None and (self.cycle is None or self.cycle.response_complete):
            self._arm_head_deadline()
        super().data_received(data)

    def connection_lost(self, exc: Exception | None) -> None:
        if self._head_deadline is not None:
            self._head_deadline.cancel()
        super().connection_lost(exc)

    def _arm_head_deadline(self) -> None:
        """Close the connection unless a new request's head (a new cycle) has arrived by the deadline."""
        waiting_since = self.cycle

        def expire() -> None:
            self._head_deadline = None
            if self.cycle is waiting_since:
                self.transport.close()

        self._head_deadline = self.loop.call_later(self.config.head_timeout_s, expire)


def server_config(app: FastAPI | str, settings: Settings, **options) -> ServerConfig:
    """A uvicorn config with the head timeout and connection limit of the settings, and secrets kept out
    of its access log."""
    return ServerConfig(
        app,
        head_timeout_s=settings.header_timeout_s,
        http=HeadTimeoutProtocol,
        limit_concurrency=settings.max_connections,
        log_config=log_config(),
        **options,
    )


def serve(settings: Settings, *, host: str, port: int, workers: int) -> None:
    """`mad serve`: the app factory in `workers` processes (as uvicorn.run does), until interrupted."""
    config = server_config(
        "app.main:create_app", settings, factory=True, host=host, port=port, workers=workers
    )
    try:
        if workers > 1:  # the processes' metrics in files that any of them reads (app/web/metrics.py)
            os.environ.setdefault("PROMETHEUS_MULTIPROC_DIR", tempfile.mkdtemp(prefix="mad-metrics-"))
            Multiprocess(config, sockets=[config.bind_socket()]).run()
        else:
            uvicorn.Server(config).run()
    except KeyboardInterrupt:
        pass


@contextmanager
def serve_in_thread(app: FastAPI, host: str = "127.0.0.1", port: int = 0) -> Iterator[str]:
    """Run uvicorn in a background thread on a free port; yields the base URL, stops on exit."""
    settings = app.state.settings
    config = server_config(
        app, settings, host=host, port=port, log_level="warning", timeout_graceful_shutdown=5
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, name="uvicorn", daemon=True)
    thread.start()
    deadline = time.monotonic() + STARTUP_TIMEOUT_S
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError("the embedded server did not start")
        time.sleep(0.02)
    bound_port = server.servers[0].sockets[0].getsockname()[1]
    try:
        yield f"http://{host}:{bound_port}"
    finally:
        server.should_exit = True
        thread.join()
