"""Errors as pages: a browser opening a page that fails gets an HTML page with a way back; the API keeps
its JSON errors ({"detail", "code"}) for every other caller."""

import inspect
import json
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import quote, urlsplit

from fastapi import FastAPI, Request
from fastapi.exceptions import WebSocketRequestValidationError
from starlette.concurrency import run_in_threadpool
from starlette.responses import Response

from app.errors import MadError
from app.i18n import N_
from app.web.templating import page_translations, render, translate

Handler = Callable[[Request, Any], Response | Awaitable[Response]]
SignedInUser = Callable[[Request], Any]
"""The session's active user for the page header, None when anonymous (app.users.auth.signed_in_user)."""

TITLES = {
    400: N_("Bad request"),
    401: N_("Sign in needed"),
    403: N_("Not allowed"),
    404: N_("Not found"),
    405: N_("Not possible here"),
    409: N_("Conflict"),
    413: N_("Too large"),
    422: N_("Something in the address is wrong"),
    429: N_("Too many requests"),
    503: N_("Try again shortly"),
}
SOMETHING_WRONG = N_("Something went wrong")


def wants_html(request: Request) -> bool:
    """A browser asking for a page (Accept: text/html) outside the REST API."""
    return "text/html" in request.headers.get("accept", "") and not request.url.path.startswith("/api/")


NO_PAGE = N_("There is no page at {path}.")


def error_in_language(request: Request, error: MadError, user: Any) -> str:
    """A service's error message in the page's language, where its template (marked with N_) has a
    translation; else as the service wrote it."""
    translated = page_translations(request, user).gettext(error.template)
    return error.message if translated == error.template else translated.format(**error.values)


def error_message(request: Request, detail: object, status_code: int, user: Any) -> str:
    """The JSON error's detail as a sentence: a service's message, or the fields a validation refused."""
    if status_code == 404 and detail == "Not Found":
        return translate(request, NO_PAGE, user, path=request.url.path)
    if isinstance(detail, list):
        detail = "; ".join(
            f"{' '.join(str(part) for part in error.get('loc', ())[1:])}: {error.get('msg', '')}"
            for error in detail
            if isinstance(error, dict)
        )
    text = str(detail).strip()
    return (text[:1].upper() + text[1:]).rstrip(".") + "."


def way_back(request: Request) -> str | None:
    """The page the visitor came from on this site (its Referer), unless it is this very page."""
    referer = urlsplit(request.headers.get("referer", ""))
    if referer.netloc != request.url.netloc or not referer.path.startswith("/"):
        return None
    back = referer.path + (f"?{referer.query}" if referer.query else "")
    return None if back == request.url.path else back


def _as_page(json_handler: Handler, signed_in_user: SignedInUser) -> Handler:
    """Wrap a JSON error handler: browsers asking for a page get error.html with the same status."""

    async def handler(request: Request, error: Exception) -> Response:
        response = json_handler(request, error)
        if inspect.isawaitable(response):
            response = await response
        if not wants_html(request) or response.status_code < 400 or not response.body:
            return response
        detail = json.loads(bytes(response.body)).get("detail", "")
        status_code = response.status_code
        user = None if status_code == 503 else await run_in_threadpool(signed_in_user, request)
        if isinstance(error, MadError):
            detail = error_in_language(request, error, user)
        page = render(
            request,
            "error.html",
            status_code=status_code,
            code=status_code,
            user=user,
            title=translate(request, TITLES.get(status_code, SOMETHING_WRONG), user),
            message=error_message(request, detail, status_code, user),
            back=way_back(request),
            sign_in=f"/login?next={quote(request.url.path)}" if status_code in (401, 403) else None,
        )
        for name in ("Retry-After", "WWW-Authenticate"):
            if name in response.headers:
                page.headers[name] = response.headers[name]
        return page

    return handler


def install_error_pages(app: FastAPI, signed_in_user: SignedInUser) -> None:
    """Make every installed JSON error handler answer browsers' page requests with an HTML page, its header
    showing the user signed_in_user finds."""
    for error_class, json_handler in list(app.exception_handlers.items()):
        if error_class is not WebSocketRequestValidationError:
            app.exception_handlers[error_class] = _as_page(json_handler, signed_in_user)
