"""The HTTP face of errors: every MadError as {"detail": message, "code": code} with its status code, the
database's own errors as the MadErrors they mean, and request validation errors that always render."""

import math
from collections.abc import Awaitable, Callable
from typing import Any

from fastapi import FastAPI, Request
from fastapi.encoders import jsonable_encoder
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel, Field
from sqlalchemy.exc import DataError, IntegrityError, OperationalError
from sqlalchemy.exc import TimeoutError as PoolTimeout

from app.errors import Conflict, InvalidInput, MadError, NotAuthenticated, ServiceUnavailable

ERROR_DESCRIPTIONS = {
    401: "Not signed in, or the API token is invalid or revoked",
    403: "The caller's role may not do this, or a signed-in browser's request lacks its CSRF token",
    404: "What the path names does not exist",
    409: "The request clashes with the current state (the detail says how)",
    413: "The upload is too large",
    422: "Fields that do not fit the schema (listed in detail), or values the service refuses",
    503: "The database or the disk cannot take the request now: try again shortly",
}


class ErrorRead(BaseModel):
    """An error: what went wrong, for people, and a code for scripts."""

    detail: str = Field(examples=["no competition with id 7"])
    code: str = Field(examples=["not_found"])


class FieldError(BaseModel):
    """One field a request got wrong, as FastAPI reports it."""

    loc: list[str | int]
    msg: str
    type: str


class FieldErrorsRead(BaseModel):
    """A request whose fields do not fit the schema: each field at fault."""

    detail: list[FieldError]


def error_responses(*status_codes: int) -> dict[int | str, dict[str, Any]]:
    """The `responses=` of an operation answering with these error statuses, each as ErrorRead (422 also
    as FieldErrorsRead)."""
    return {
        status: {
            "model": ErrorRead | FieldErrorsRead if status == 422 else ErrorRead,
            "description": ERROR_DESCRIPTIONS[status],
        }
        for status in status_codes
    }


async def _mad_error_response(request: Request, error: MadError) -> JSONResponse:
    """Render a MadError as {"detail": message, "code": code} with its status code."""
    headers = {"WWW-Authenticate": "Bearer"} if isinstance(error, NotAuthenticated) else None
    return JSONResponse(
        {"detail": error.message, "code": error.code}, status_code=error.status_code, headers=headers
    )


async def _data_error_response(request: Request, error: DataError) -> JSONResponse:
    """A value the database refuses (e.g. an id beyond a 32-bit column on Postgres) is the request's fault:
    answered as InvalidInput (the request's session has rolled back by now)."""
    reason = str(error.orig).splitlines()[0] if error.orig is not None else "invalid value"
    return await _mad_error_response(
        request, InvalidInput(f"a value in the request does not fit the database: {reason}")
    )


async def _integrity_error_response(request: Request, error: IntegrityError) -> JSONResponse:
    """A constraint broken by a concurrent change (e.g. two requests creating one username at once; each
    checked first and found it free): 409, as if the request had come second (its session has rolled back)."""
    reason = " ".join(str(error.orig).splitlines()[:2]) if error.orig is not None else "constraint violated"
    message = f"the request conflicts with a change made at the same time ({reason}); reload and try again"
    return await _mad_error_response(request, Conflict(message))


async def _database_unavailable_response(
    request: Request, error: OperationalError | PoolTimeout
) -> JSONResponse:
    """A lost database connection (Postgres restarted, connections terminated) or a database too busy to
    answer: 503, so clients retry; the pool replaces closed connections at checkout (app.db.engine)."""
    response = await _mad_error_response(
        request, ServiceUnavailable("the database did not answer (connection lost or busy); try again")
    )
    response.headers["Retry-After"] = "1"
    return response


def json_safe(value: Any) -> Any:
    """The value with what JSON cannot hold made printable: NaN and ±Infinity as the strings "NaN",
    "Infinity" and "-Infinity", bytes decoded with backslash escapes for what is not UTF-8."""
    if isinstance(value, float) and not math.isfinite(value):
        return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    if isinstance(value, bytes | bytearray):
        return bytes(value).decode("utf-8", errors="backslashreplace")
    if isinstance(value, dict):
        return {json_safe(key): json_safe(item) for key, item in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [json_safe(item) for item in value]
    return value


async def _validation_error_response(request: Request, error: RequestValidationError) -> JSONResponse:
    """FastAPI's 422 listing each invalid field, which echoes the input: a NaN, an Infinity or bytes that are
    not UTF-8 in it are written as text instead of failing the response (JSON has no NaN)."""
    return JSONResponse({"detail": jsonable_encoder(json_safe(error.errors()))}, status_code=422)


def install_error_handlers(app: FastAPI) -> None:
    """Map every MadError subclass to its status code, request validation errors to a 422 that never fails
    to render, the database's DataError to InvalidInput, its IntegrityError to Conflict, and its
    OperationalError and pool timeout to ServiceUnavailable."""
    handlers: dict[type[Exception], Callable[[Request, Any], Awaitable[Response]]] = {
        MadError: _mad_error_response,
        RequestValidationError: _validation_error_response,
        DataError: _data_error_response,
        IntegrityError: _integrity_error_response,
        OperationalError: _database_unavailable_response,
        PoolTimeout: _database_unavailable_response,
    }
    for error_class, handler in handlers.items():
        app.add_exception_handler(error_class, handler)
