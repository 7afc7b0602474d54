"""Bodies before callers: a request's body is refused before it is read when it is too large for its route
or its caller may not send it, so that an anonymous 1 GB POST costs the server nothing.

- Every route has a body limit: uploads (images, classifiers, prediction shards) MAD_MAX_UPLOAD_BYTES,
  a translation file MAD_MAX_TRANSLATION_BYTES (and its form's FORM_OVERHEAD_BYTES), a competition (its
  taxonomy file) MAX_COMPETITION_BYTES, any other request MAD_MAX_JSON_BYTES. A declared
  Content-Length over it is answered 413 at once; a body without one is counted as it arrives and answered
  413 as soon as it passes the limit (nothing beyond is read).
- A state-changing request without any credentials (no bearer token, no signed-in session) is answered
  401 before its body is read, except the sign-in, sign-out, language, invitation and study consent forms.
- A body over SMALL_BODY_BYTES (or of unknown length) is read only for an active admin or worker: their
  credentials are checked first (a short database step), so a made-up token cannot make the server read
  or spool gigabytes before its 401.
"""

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sqlalchemy.orm import Session
from starlette.requests import Request
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.db.session import database_steps

SMALL_BODY_BYTES = 64 * 1024
"""Bodies up to this size are read before the endpoint checks the caller (a labelling answer is ~100 B)."""
MAX_COMPETITION_BYTES = 8 * 1024**2
"""A competition's JSON, with a custom taxonomy of up to 5,000,000 characters."""
UPLOAD_ROUTES = (
    re.compile(r"/api/v1/competitions/[^/]+/(images|classifiers)"),
    re.compile(r"/api/v1/jobs/[^/]+/predictions"),
)
TRANSLATION_ROUTE = re.compile(r"/api/v1/competitions/[^/]+/translations")
FORM_OVERHEAD_BYTES = 64 * 1024
"""Room for a multipart form's boundary and part headers around the file it carries."""
COMPETITION_ROUTE = "/api/v1/competitions"
OPEN_FORMS = re.compile(r"/login(/sso/[^/]+)?|/logout|/language|/invitations/[^/]+|/join/[^/]+")
"""State-changing routes anyone may post to (their CSRF token is checked by the route)."""
BODY_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})

LargeBodySender = Callable[[Session, str | None, dict[str, Any]], bool | None]
"""(database session, bearer token, session cookie) -> whether the active account behind them may send a
large body (an admin or a worker); None when there is none (app.users.auth.may_send_large_bodies)."""


@dataclass(frozen=True)
class BodyLimits:
    """The body limits of the settings: uploads, translation files and everything else (JSON, forms)."""

    max_upload_bytes: int
    max_json_bytes: int
    max_translation_bytes: int

    def for_path(self, path: str) -> int:
        """The largest body the route at `path` accepts."""
        if any(route.fullmatch(path) for route in UPLOAD_ROUTES):
            return self.max_upload_bytes
        if TRANSLATION_ROUTE.fullmatch(path):
            return self.max_translation_bytes + FORM_OVERHEAD_BYTES
        if path == COMPETITION_ROUTE:
            return MAX_COMPETITION_BYTES
        return self.max_json_bytes


class BodyTooLarge(Exception):
    """Raised inside the app's receive when a body passes its limit."""


class BodyGuard:
    """ASGI middleware applying the module's rules; it sits inside the session middleware (it reads the
    session cookie) and adds no work to bodies of known small size from callers with credentials."""

    def __init__(self, app: ASGIApp, limits: BodyLimits, large_body_sender: LargeBodySender):
        self.app = app
        self.limits = limits
        self.large_body_sender = large_body_sender

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] not in BODY_METHODS:
            await self.app(scope, receive, send)
            return
        limit = self.limits.for_path(scope["path"])
        declared = _content_length(scope)
        if declared is not None and declared > limit:
            await _refuse(send, 413, "too_large", f"this request's body is limited to {limit:,} bytes")
            return
        if not OPEN_FORMS.fullmatch(scope["path"]):
            refusal = await self._caller_refusal(scope, declared)
            if refusal is not None:
                await _refuse(send, *refusal)
                return
        await self._counted(scope, receive, send, limit)

    async def _caller_refusal(self, scope: Scope, declared: int | None) -> tuple[int, str, str] | None:
        """(status, code, message) when the caller may not send this body; None when they may."""
        request = Request(scope)
        token = _bearer_token(scope)
        session = scope.get("session") or {}
        if token is None and session.get("user_id") is None:
            return 401, "not_authenticated", "sign in or send an API token (Authorization: Bearer mad_…)"
        if declared is not None and declared <= SMALL_BODY_BYTES:
            return None
        steps = request.app.dependency_overrides.get(database_steps, database_steps)
        runner = steps(request) if steps is database_steps else steps()
        allowed = await runner.run(lambda db: self.large_body_sender(db, token, session))
        if allowed is None:
            return 401, "not_authenticated", "invalid or revoked credentials"
        if not allowed:
            return 403, "forbidden", f"bodies over {SMALL_BODY_BYTES:,} bytes are for admins and workers"
        return None

    async def _counted(self, scope: Scope, receive: Receive, send: Send, limit: int) -> None:
        """Run the app with a receive that stops at `limit` bytes; then answer 413 instead of its answer."""
        received = 0
        over = False
        started = False

        async def counting_receive() -> Message:
            nonlocal received, over
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > limit:
                    over = True
                    raise BodyTooLarge
            return message

        async def guarded_send(message: Message) -> None:
            nonlocal started
            if over:
                return
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, counting_receive, guarded_send)
        except BodyTooLarge:
            pass
        if over and not started:
            await _refuse(send, 413, "too_large", f"this request's body is limited to {limit:,} bytes")


def _content_length(scope: Scope) -> int | None:
    """The declared Content-Length; 0 for a request with neither it nor Transfer-Encoding (no body, RFC 9112
    Sec. 6.3: a DELETE, say); None for a chunked body or a length that is not a number."""
    headers = dict(scope["headers"])
    if b"content-length" in headers:
        value = headers[b"content-length"]
        return int(value) if value.isdigit() else None
    return None if b"transfer-encoding" in headers else 0


def _bearer_token(scope: Scope) -> str | None:
    """The token of an `Authorization: Bearer …` header."""
    for name, value in scope["headers"]:
        if name == b"authorization":
            scheme, _, token = value.decode("latin-1").partition(" ")
            if scheme.lower() == "bearer" and token.strip():
                return token.strip()
    return None


async def _refuse(send: Send, status: int, code: str, message: str) -> None:
    """Answer {"detail", "code"} with `status`, as the API's errors are, and close the connection (the
    unread body is never read)."""
    body = json.dumps({"detail": message, "code": code}).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    headers.append((b"connection", b"close"))
    if status == 401:
        headers.append((b"www-authenticate", b"Bearer"))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
