"""Typed errors raised by services, mapped to HTTP status codes in one place."""

from collections.abc import Iterator
from contextlib import contextmanager

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from sqlalchemy.exc import DataError, IntegrityError, OperationalError
from sqlalchemy.exc import TimeoutError as PoolTimeout


class MadError(Exception):
    """Base of every expected error; the message is shown to the user as is."""

    status_code = 400
    code = "bad_request"

    def __init__(self, message: str):
        super().__init__(message)
        self.message = message


class InvalidInput(MadError):
    """The request is well-formed but its content is wrong (422)."""

    status_code = 422
    code = "invalid"


class NotFound(MadError):
    """The named thing does not exist (404)."""

    status_code = 404
    code = "not_found"


class Conflict(MadError):
    """The request clashes with the current state, e.g. a duplicate name (409)."""

    status_code = 409
    code = "conflict"


class NotAuthenticated(MadError):
    """No valid credentials were given (401)."""

    status_code = 401
    code = "not_authenticated"


class Forbidden(MadError):
    """The caller is known but may not do this (403)."""

    status_code = 403
    code = "forbidden"


class TooManyRequests(MadError):
    """The caller must slow down (429)."""

    status_code = 429
    code = "too_many_requests"


class PayloadTooLarge(MadError):
    """The upload is over the configured limit (413)."""

    status_code = 413
    code = "too_large"


class ServiceUnavailable(MadError):
    """The service cannot do this now (e.g. its disk is full); the same request may succeed later (503)."""

    status_code = 503
    code = "unavailable"


@contextmanager
def storage_errors(what: str) -> Iterator[None]:
    """Turn an OSError while writing `what` (disk full, quota, I/O error) into ServiceUnavailable."""
    try:
        yield
    except OSError as error:
        reason = error.strerror or str(error)
        raise ServiceUnavailable(f"could not store {what} ({reason}); try again later") from error


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
    answer: 503, so clients retry; the pool replaces closed connections at checkout (app.db)."""
    response = await _mad_error_response(
        request, ServiceUnavailable("the database did not answer (connection lost or busy); try again")
    )
    response.headers["Retry-After"] = "1"
    return response


def install_error_handlers(app: FastAPI) -> None:
    """Map every MadError subclass to its status code, the database's DataError to InvalidInput, its
    IntegrityError to Conflict, and its OperationalError and pool timeout to ServiceUnavailable."""
    app.add_exception_handler(MadError, _mad_error_response)
    app.add_exception_handler(DataError, _data_error_response)
    app.add_exception_handler(IntegrityError, _integrity_error_response)
    app.add_exception_handler(OperationalError, _database_unavailable_response)
    app.add_exception_handler(PoolTimeout, _database_unavailable_response)
