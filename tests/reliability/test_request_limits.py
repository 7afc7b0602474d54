"""Bodies before callers (issue 15 point 1), against a real uvicorn on 127.0.0.1 through raw sockets.

A request is sent as headers only, its body withheld: an answer that arrives all the same was given
without reading the body (an anonymous 1 GB POST, a made-up token, an annotator's upload, a body over its
route's limit). A body without a declared length is counted as it arrives and refused once over the limit.
A connection that never finishes its request head is closed; beyond MAD_MAX_CONNECTIONS, 503.
Every wait is bounded by WAIT_S: a server that reads the body first fails the test by timing out.
"""

import socket
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from app.main import create_app
from app.serving import serve_in_thread
from app.settings import Settings

WAIT_S = 20
UPLOAD_LIMIT = 1_000_000
TRANSLATION_LIMIT = 100_000


@contextmanager
def served(world_settings: Settings, **changes) -> Iterator[tuple[str, int]]:
    """The world's app under uvicorn with some settings changed: (host, port)."""
    app = create_app(Settings(**{**world_settings.model_dump(), **changes}))
    try:
        with serve_in_thread(app) as url:
            host, port = url.removeprefix("http://").split(":")
            yield host, int(port)
    finally:
        app.state.engine.dispose()


def head_only(address, method: str, path: str, headers: dict[str, str]) -> bytes:
    """Send a request head and no body; the first bytes of the answer (b"" when the server closed)."""
    with socket.create_connection(address, timeout=WAIT_S) as connection:
        lines = [f"{method} {path} HTTP/1.1", "Host: 127.0.0.1", *(f"{k}: {v}" for k, v in headers.items())]
        connection.sendall(("\r\n".join(lines) + "\r\n\r\n").encode())
        return connection.recv(4096)


def status_of(answer: bytes) -> int:
    return int(answer.split(b" ", 2)[1])


@pytest.fixture
def server(world, world_settings):
    with served(
        world_settings, max_upload_bytes=UPLOAD_LIMIT, max_translation_bytes=TRANSLATION_LIMIT
    ) as address:
        yield address


def test_unauthenticated_and_oversized_bodies_are_refused_before_they_are_read(server, world):
    images = f"/api/v1/competitions/{world.competition_id}/images"
    answers = f"/api/v1/competitions/{world.competition_id}/labelling/answers"
    translations = f"/api/v1/competitions/{world.competition_id}/translations"
    upload = {"Content-Type": "multipart/form-data; boundary=x", "Content-Length": "900000"}
    cases = [
        ("anonymous 1 GB JSON", "/api/v1/competitions", {"Content-Length": "1000000000"}, 413),
        ("anonymous JSON", "/api/v1/competitions", {"Content-Length": "5000"}, 401),
        ("anonymous upload", images, upload, 401),
        ("made-up token", images, {**upload, "Authorization": "Bearer mad_x"}, 401),
        ("annotator upload", images, {**upload, **world.headers("annotator")}, 403),
        (
            "admin over the limit",
            images,
            {**upload, "Content-Length": "2000000", **world.headers("admin")},
            413,
        ),
        ("JSON over 1 MiB", answers, {"Content-Length": "2000000", **world.headers("annotator")}, 413),
        ("translation file over its limit", translations, {**upload, **world.headers("admin")}, 413),
    ]
    for case, path, headers, status in cases:
        answer = head_only(server, "POST", path, {"Content-Type": "application/json", **headers})
        assert answer, f"{case}: the server closed without answering"
        assert status_of(answer) == status, (case, answer[:300])


def test_a_body_of_unknown_length_is_cut_off_at_the_limit(server, world):
    """An admin's chunked upload: the server answers 413 once the limit has passed, while we still send."""
    path = f"/api/v1/competitions/{world.competition_id}/images"
    head = "\r\n".join(
        [
            f"POST {path} HTTP/1.1",
            "Host: 127.0.0.1",
            "Transfer-Encoding: chunked",
            "Content-Type: multipart/form-data; boundary=x",
            *(f"{k}: {v}" for k, v in world.headers("admin").items()),
        ]
    )
    part = b'--x\r\nContent-Disposition: form-data; name="files"; filename="a.png"\r\n\r\n'
    chunk = b"x" * 65536
    sent = 0
    with socket.create_connection(server, timeout=WAIT_S) as connection:
        connection.sendall(head.encode() + b"\r\n\r\n" + b"%x\r\n" % len(part) + part + b"\r\n")
        try:
            while sent < 20 * UPLOAD_LIMIT:
                connection.sendall(b"%x\r\n" % len(chunk) + chunk + b"\r\n")
                sent += len(chunk)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the server stopped reading and closed: the answer is waiting
        answer = connection.recv(4096)
    assert status_of(answer) == 413, answer[:300]
    assert sent < 20 * UPLOAD_LIMIT


def test_a_connection_that_never_finishes_its_head_is_closed(world, world_settings):
    with served(world_settings, header_timeout_s=1) as address:
        with socket.create_connection(address, timeout=WAIT_S) as connection:
            connection.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ")
            assert connection.recv(100) == b""  # closed by the server, not by WAIT_S
        assert status_of(head_only(address, "GET", "/healthz", {})) == 200


def test_connections_beyond_the_limit_are_answered_503(world, world_settings):
    with served(world_settings, max_connections=4, header_timeout_s=WAIT_S) as address:
        idle = [socket.create_connection(address, timeout=WAIT_S) for _ in range(4)]
        try:
            assert status_of(head_only(address, "GET", "/healthz", {})) == 503
        finally:
            for connection in idle:
                connection.close()
