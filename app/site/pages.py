"""The site's own pages: the home page (what to do next), sign-in/sign-out, one's own account, and the
invitation page on which an invited person chooses their username and password and is signed in."""

from typing import Annotated

from fastapi import APIRouter, Depends, Form, Request
from fastapi.responses import HTMLResponse, RedirectResponse
from starlette.concurrency import run_in_threadpool

from app.competitions import service as competitions_service
from app.competitions.members import competitions_of
from app.db.base import utcnow
from app.db.session import DatabaseStepsDep, SessionDep
from app.errors import Conflict, InvalidInput
from app.images.service import image_counts
from app.labelling.annotators import images_left
from app.security import new_csrf_token
from app.users import invitations, rate_limit
from app.users import service as users_service
from app.users.auth import ANNOTATOR_ROLES, SESSION_GENERATION, OptionalUser, check_csrf, page_user
from app.users.models import Role
from app.users.service import MIN_PASSWORD_LENGTH
from app.web.templating import render

router = APIRouter(include_in_schema=False)


@router.get("/", response_class=HTMLResponse)
def home(request: Request, db_session: SessionDep, user: OptionalUser):
    """The competitions (an annotator sees those they may label in, with the images left for them) and, when
    there are none yet, the commands that set one up."""
    if user is not None and user.role == Role.annotator:
        competitions = competitions_of(db_session=db_session, user=user)
    else:
        competitions = competitions_service.list_competitions(db_session=db_session)
    annotator = user if user is not None and user.role in ANNOTATOR_ROLES else None
    return render(
        request,
        "home.html",
        user=user,
        competitions=competitions,
        image_counts=image_counts(db_session=db_session),
        images_left=images_left(db_session=db_session, user_id=annotator.id) if annotator else None,
    )


@router.get("/login", response_class=HTMLResponse)
def login_page(request: Request, user: OptionalUser, next: str = "/"):
    """The sign-in form."""
    return render(request, "login.html", user=user, next=_safe_next(next), error=None, username="")


@router.post("/login", response_class=HTMLResponse, dependencies=[Depends(check_csrf)])
async def login(
    request: Request,
    steps: DatabaseStepsDep,
    username: Annotated[str, Form()],
    password: Annotated[str, Form()],
    next: Annotated[str, Form()] = "/",
):
    """Check the password, start a session and go to `next` (an admin without one goes to /admin); a wrong
    password re-shows the form (401) with the username kept.

    After too many failures from one address, for one username or for all, the form answers 429 until the
    window passes. The database is used in short steps: the Argon2 check between them holds no connection
    (and waits at its own gate, PASSWORD_CHECKS_AT_ONCE per process), and an unknown username costs the
    same Argon2 work as a known one.
    """
    limits = request.app.state.login_limits
    address = request.client.host if request.client else ""
    where = dict(limits=limits, address=address, username=username)
    wait_s = await steps.run(lambda db: rate_limit.retry_after(db_session=db, now=utcnow(), **where))
    if wait_s:
        error = f"Too many failed sign-ins. Try again in {wait_s} seconds."
        response = render(
            request, "login.html", status_code=429, next=_safe_next(next), error=error, username=username
        )
        response.headers["Retry-After"] = str(wait_s)
        return response
    account = await steps.run(lambda db: users_service.sign_in_account(db_session=db, username=username))
    async with request.app.state.password_gate:  # Argon2 takes 64 MiB a check: a few at a time
        matches = await run_in_threadpool(users_service.password_matches, account, password)
    if account is None or not matches:
        await steps.run(lambda db: rate_limit.record_failure(db_session=db, now=utcnow(), **where))
        return render(
            request,
            "login.html",
            status_code=401,
            next=_safe_next(next),
            error="Wrong username or password.",
            username=username,
        )
    await steps.run(lambda db: rate_limit.forget(db_session=db, address=address, username=username))
    request.session.clear()
    request.session.update(
        {"user_id": account.id, SESSION_GENERATION: account.session_generation, "csrf": new_csrf_token()}
    )
    target = _safe_next(next)
    if target == "/" and account.role == Role.admin:
        target = "/admin"
    return RedirectResponse(target, status_code=303)


@router.get("/account", response_class=HTMLResponse)
def account_page(request: Request, user: OptionalUser):
    """The signed-in person's account: who they are, and a form to change their password."""
    account = page_user(request, user, Role.admin, Role.annotator)
    if isinstance(account, RedirectResponse):
        return account
    return render(request, "account.html", user=account)


@router.post("/logout", dependencies=[Depends(check_csrf)])
def logout(request: Request, db_session: SessionDep, user: OptionalUser):
    """Sign out: every session of the user ends, on this browser and any other (server-side)."""
    if user is not None:
        users_service.end_sessions(db_session=db_session, user=user)
    request.session.clear()
    return RedirectResponse("/", status_code=303)


@router.get("/invitations/{token}", response_class=HTMLResponse, name="invitation_page")
def invitation_page(request: Request, token: str, db_session: SessionDep):
    """The form that makes the invited person's account; 404 once the link is used or expired."""
    invitation = invitations.open_invitation(db_session=db_session, token=token)
    return _form(request, invitation.role, username="", error=None)


@router.post("/invitations/{token}", response_class=HTMLResponse, dependencies=[Depends(check_csrf)])
def accept_invitation(
    request: Request,
    token: str,
    db_session: SessionDep,
    username: Annotated[str, Form(max_length=200)],
    password: Annotated[str, Form(max_length=200)],
    password_again: Annotated[str, Form(max_length=200)],
):
    """Make the account, use the link up and sign in; a taken username or a short or mistyped password
    re-shows the form (422 or 409) with the username kept, the link still unused."""
    invitation = invitations.open_invitation(db_session=db_session, token=token)
    try:
        if password != password_again:
            raise InvalidInput("the two passwords differ: type the same one twice")
        user = invitations.accept_invitation(
            db_session=db_session, token=token, username=username, password=password
        )
    except (InvalidInput, Conflict) as error:
        return _form(request, invitation.role, username, str(error), error.status_code)
    request.session.clear()
    request.session.update(
        {"user_id": user.id, SESSION_GENERATION: user.session_generation, "csrf": new_csrf_token()}
    )
    return RedirectResponse("/admin" if user.role == Role.admin else "/", status_code=303)


def _form(request: Request, role: Role, username: str, error: str | None, status_code: int = 200):
    """The invitation form, with an error to fix when there is one."""
    return render(
        request,
        "invitation.html",
        status_code=status_code,
        role=role.value,
        username=username,
        error=error,
        min_length=MIN_PASSWORD_LENGTH,
    )


def _safe_next(target: str) -> str:
    """Only same-site paths are followed after sign-in (no open redirect)."""
    return target if target.startswith("/") and not target.startswith("//") else "/"
