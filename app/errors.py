"""Typed errors raised by services; app.web.errors maps them to HTTP responses in one place."""

from collections.abc import Iterator
from contextlib import contextmanager


class MadError(Exception):
    """Base of every expected error; the message is shown to the user as is."""

    status_code = 400
    code = "bad_request"

    def __init__(self, message: str, **values: object):
        """The message as is, or a template (marked with app.i18n.N_) whose {names} `values` fill: the API
        answers in English, a page in the reader's language (app.web.error_pages.error_in_language)."""
        self.template, self.values = message, values
        self.message = message.format(**values) if values else message
        super().__init__(self.message)


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
