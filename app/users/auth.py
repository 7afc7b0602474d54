"""Who is calling: a bearer token (REST clients, workers) or a signed session cookie (browser pages).

Cookie-authenticated requests that change state must carry the session's CSRF token, in the
X-CSRF-Token header (JavaScript, htmx) or a csrf_token form field (plain forms).
"""

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any, Protocol, TypeVar
from urllib.parse import quote

from fastapi import Depends, Request
from fastapi.responses import RedirectResponse
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from sqlalchemy.orm import Session

from app.db.session import DatabaseStepsDep, SessionDep
from app.errors import Forbidden, NotAuthenticated
from app.security import new_csrf_token, same_secret
from app.users import service
from app.users.models import Role, User

SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
CSRF_HEADER = "X-CSRF-Token"
CSRF_FIELD = "csrf_token"
SESSION_GENERATION = "generation"
NOT_IN_A_NEXT_PATH = re.compile(r"[\\\x00-\x1f\x7f]|%(2f|5c)", re.IGNORECASE)
"""What a page to go to after sign-in may not hold (safe_next)."""
"""The session cookie's key for the user's session generation it was issued in (User.session_generation)."""


class HasRole(Protocol):
    """An account as far as access checks go (a User, or the labelling hot path's lighter row)."""

    @property
    def role(self) -> Role: ...


UserWithRole = TypeVar("UserWithRole", bound=HasRole)

bearer_scheme = HTTPBearer(
    auto_error=False, description="An API token made with `mad users token add USERNAME`."
)


async def check_csrf(request: Request) -> None:
    """Refuse a state-changing request whose CSRF token (header or form field) does not match the session's.

    Form-posting pages declare this dependency (it reads the form, so it is async and touches no database);
    JSON requests authenticated by the cookie are checked in `identify` through the header.
    """
    if request.method in SAFE_METHODS:
        return
    sent: object = request.headers.get(CSRF_HEADER)
    if sent is None and request.headers.get("content-type", "").startswith(
        ("application/x-www-form-urlencoded", "multipart/form-data")
    ):
        sent = (await request.form()).get(CSRF_FIELD)
    if not same_secret(request.session.get("csrf"), sent if isinstance(sent, str) else None):
        raise Forbidden("missing or wrong CSRF token: reload the page and try again")
    request.state.csrf_checked = True


def _require_csrf_header(request: Request) -> None:
    """A cookie-authenticated state change needs the X-CSRF-Token header (or a page's check_csrf)."""
    if request.method in SAFE_METHODS or getattr(request.state, "csrf_checked", False):
        return
    if not same_secret(request.session.get("csrf"), request.headers.get(CSRF_HEADER)):
        raise Forbidden("missing or wrong CSRF token: reload the page and try again")


@dataclass(frozen=True)
class Credentials:
    """Who a request says it is, read without the database: an API token, or the signed-in user's id from
    the session cookie (neither when anonymous)."""

    token: str | None = None
    session_user_id: int | None = None
    session_generation: int | None = None


async def request_credentials(
    request: Request,
    bearer: Annotated[HTTPAuthorizationCredentials | None, Depends(bearer_scheme)],
) -> Credentials:
    """The request's credentials, a bearer token first (async: it reads only headers and the cookie)."""
    if bearer is not None:
        return Credentials(token=bearer.credentials)
    return Credentials(
        session_user_id=request.session.get("user_id"),
        session_generation=request.session.get(SESSION_GENERATION),
    )


CredentialsDep = Annotated[Credentials, Depends(request_credentials)]

Caller = TypeVar("Caller")


def identify(
    request: Request, credentials: Credentials, lookup: Callable[[Credentials], Caller | None]
) -> Caller | None:
    """The caller that lookup finds for the credentials, or None when anonymous.

    A token that finds no active user is 401. A session cookie whose user is gone or deactivated,
    or whose sessions were ended (sign-out, a password change), is cleared (anonymous again); a
    cookie-authenticated state change needs the X-CSRF-Token header.
    """
    if credentials.token is not None:
        caller = lookup(credentials)
        if caller is None:
            raise NotAuthenticated("invalid or revoked API token")
        return caller
    if credentials.session_user_id is None:
        return None
    caller = lookup(credentials)
    if caller is None:
        request.session.clear()
        return None
    _require_csrf_header(request)
    return caller


ANONYMOUS = "sign in or send an API token (Authorization: Bearer mad_…)"
"""Why a request without credentials is refused (401)."""


def refuse_before_lookup(request: Request, credentials: Credentials) -> None:
    """What identify and require_caller refuse without the database: 401 without credentials, 403 for a
    cookie-authenticated state change without the CSRF header."""
    if credentials.token is not None:
        return
    if credentials.session_user_id is None:
        raise NotAuthenticated(ANONYMOUS)
    _require_csrf_header(request)


def require_caller(caller: Caller | None) -> Caller:
    """The identified caller, or 401 for an anonymous one."""
    if caller is None:
        raise NotAuthenticated(ANONYMOUS)
    return caller


def optional_user(request: Request, db_session: SessionDep, credentials: CredentialsDep) -> User | None:
    """The caller, from a bearer token or else the session cookie; None when anonymous.

    Synchronous on purpose: database work must not run on the event loop.
    """
    return identify(request, credentials, lambda found: _active_user(db_session, found))


def _active_user(db_session: Session, credentials: Credentials) -> User | None:
    """The active user owning the token, or the session's user while active and its session not ended."""
    if credentials.token is not None:
        return service.user_for_token(db_session=db_session, token=credentials.token)
    if credentials.session_user_id is None:
        return None
    return service.session_user(
        db_session=db_session,
        user_id=credentials.session_user_id,
        session_generation=credentials.session_generation,
    )


def signed_in_user(request: Request) -> User | None:
    """The session's active user, for an error page's header (app/web/error_pages.py); None when anonymous
    or the database cannot say."""
    user_id = request.session.get("user_id") if "session" in request.scope else None
    if user_id is None:
        return None
    try:
        with request.app.state.sessionmaker() as db_session:
            generation = request.session.get(SESSION_GENERATION)
            return service.session_user(db_session=db_session, user_id=user_id, session_generation=generation)
    except Exception:  # the page must render even when the error was the database's
        return None


OptionalUser = Annotated[User | None, Depends(optional_user)]


async def optional_user_in_a_step(
    request: Request, steps: DatabaseStepsDep, credentials: CredentialsDep
) -> User | None:
    """optional_user in a database step of its own, for a page that must not hold the database gate while
    it waits for a cached public read (app/leaderboard/public_reads.py); an anonymous caller takes no step."""
    if credentials.token is None and credentials.session_user_id is None:
        return None
    return await steps.run(
        lambda db_session: identify(request, credentials, lambda found: _active_user(db_session, found))
    )


SteppedUser = Annotated[User | None, Depends(optional_user_in_a_step)]


async def current_user(user: OptionalUser) -> User:
    """The signed-in caller, or 401 (async: it only inspects the loaded user, so it needs no thread)."""
    return require_caller(user)


CurrentUser = Annotated[User, Depends(current_user)]


def check_role(user: UserWithRole, roles: tuple[Role, ...]) -> UserWithRole:
    """The user when their role is one of `roles`, else 403 naming the roles needed."""
    if user.role not in roles:
        allowed = " or ".join(r.value for r in roles)
        raise Forbidden(f"this needs the {allowed} role; you are signed in as {user.role.value}")
    return user


def start_session(request: Request, user_id: int, session_generation: int) -> None:
    """Sign the browser in as this account: a new session (nothing of the one before is kept), with the
    account's session generation and a new CSRF token."""
    request.session.clear()
    request.session.update(
        {"user_id": user_id, SESSION_GENERATION: session_generation, "csrf": new_csrf_token()}
    )


def safe_next(target: str) -> str:
    """`target` when it is a path of this site, else "/" (no open redirect): it starts with one "/" and holds
    no backslash, no control character and no encoded slash or backslash, any of which a browser or a proxy
    may read as the start of another host (`/\\evil.example`, `/%2F%2Fevil.example`)."""
    if target.startswith("/") and not target.startswith("//") and not NOT_IN_A_NEXT_PATH.search(target):
        return target
    return "/"


def landing_page(target: str, role: Role) -> str:
    """Where a browser goes once signed in: `target` when it is a path of this site, and an admin's home
    page is /admin."""
    target = safe_next(target)
    return "/admin" if target == "/" and role == Role.admin else target


def page_user(request: Request, user: User | None, *roles: Role) -> User | RedirectResponse:
    """For a browser page: the user when their role fits, a redirect to sign in for a visitor, else 403."""
    if user is None:
        return RedirectResponse(f"/login?next={quote(request.url.path)}", status_code=303)
    return check_role(user, roles)


def require_roles(*roles: Role):
    """A dependency admitting only callers with one of these roles (401 anonymous, 403 otherwise)."""

    async def dependency(user: CurrentUser) -> User:
        return check_role(user, roles)

    dependency.__name__ = "require_" + "_or_".join(r.value for r in roles)
    return dependency


LARGE_BODY_ROLES = frozenset({Role.admin, Role.worker})
"""Who may send bodies over the body guard's small size (app/web/body_guard.py)."""


def may_send_large_bodies(db_session: Session, token: str | None, session: dict[str, Any]) -> bool | None:
    """Whether the active account behind the bearer token, else the session cookie, has a LARGE_BODY_ROLE;
    None when there is no such account."""
    if token is not None:
        credentials = Credentials(token=token)
    else:
        credentials = Credentials(
            session_user_id=session.get("user_id"), session_generation=session.get(SESSION_GENERATION)
        )
    user = _active_user(db_session, credentials)
    return None if user is None else user.role in LARGE_BODY_ROLES


ADMIN_ROLES = (Role.admin,)
ANNOTATOR_ROLES = (Role.annotator, Role.admin)
require_admin = require_roles(*ADMIN_ROLES)
require_worker = require_roles(Role.worker, Role.admin)

AdminUser = Annotated[User, Depends(require_admin)]
WorkerUser = Annotated[User, Depends(require_worker)]
