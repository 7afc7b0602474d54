"""The site's own pages: the home page (what to do next), sign-in/sign-out, one's own account, and the
invitation page on which an invited person chooses their username and password, or an OpenID provider to
sign in with, and is signed in (the OpenID flow itself: openid_pages.py)."""

from typing import Annotated

from fastapi import APIRouter, Depends, Form, Request
from fastapi.responses import HTMLResponse, RedirectResponse
from starlette.concurrency import run_in_threadpool

from app import i18n
from app.competitions.members import competitions_of
from app.db.base import utcnow
from app.db.session import DatabaseStepsDep, SessionDep
from app.errors import Conflict, Forbidden, InvalidInput
from app.i18n import N_
from app.images.service import image_counts
from app.labelling.quality_control.annotators import images_left
from app.settings import Settings
from app.users import invitations, openid, rate_limit
from app.users import service as users_service
from app.users.auth import (
    ANNOTATOR_ROLES,
    OptionalUser,
    check_csrf,
    landing_page,
    page_user,
    safe_next,
    start_session,
)
from app.users.models import Role, username_key
from app.users.service import MAX_USERNAME_LENGTH, MIN_PASSWORD_LENGTH
from app.web.dependencies import SettingsDep
from app.web.templating import page_locale, render, translate

router = APIRouter(include_in_schema=False)


@router.get("/", response_class=HTMLResponse)
def home(request: Request, db_session: SessionDep, user: OptionalUser):
    """The competitions the caller may see (an annotator those they may label in, with the images left for
    them; members-only ones only to their members and admins) and, when there are none yet, the commands
    that set one up."""
    competitions = competitions_of(db_session=db_session, user=user)
    annotator = user if user is not None and user.role in ANNOTATOR_ROLES else None
    return render(
        request,
        "home.html",
        user=user,
        competitions=competitions,
        image_counts=image_counts(db_session=db_session),
        images_left=images_left(db_session=db_session, user_id=annotator.id) if annotator else None,
    )


PASSWORDS_OFF = N_("Password sign-in is turned off here: use a button below.")
TOO_MANY_FAILURES = N_("Too many failed sign-ins. Try again in {seconds} seconds.")
WRONG_PASSWORD = N_("Wrong username or password.")
PASSWORDS_DIFFER = N_("The two passwords differ: type the same one twice.")


def sign_in_choices(settings: Settings) -> dict:
    """What a sign-in or invitation page offers: the OpenID providers, and whether passwords are taken."""
    return {"providers": settings.oidc_providers, "passwords": settings.password_sign_in}


def _login_form(
    request: Request, settings: Settings, next: str, username: str = "", error: str | None = None, **page
):
    """The sign-in page: the password form (while passwords are taken) and a button for each provider."""
    return render(
        request,
        "login.html",
        next=safe_next(next),
        username=username,
        error=error,
        **sign_in_choices(settings),
        **page,
    )


@router.get("/login", response_class=HTMLResponse)
def login_page(request: Request, user: OptionalUser, settings: SettingsDep, next: str = "/"):
    """The sign-in form, and a button for each OpenID provider."""
    return _login_form(request, settings, next, user=user)


@router.post("/login", response_class=HTMLResponse, dependencies=[Depends(check_csrf)])
async def login(
    request: Request,
    steps: DatabaseStepsDep,
    username: Annotated[str, Form()],
    password: Annotated[str, Form()],
    settings: SettingsDep,
    next: Annotated[str, Form()] = "/",
):
    """Check the password, start a session and go to `next` (an admin without one goes to /admin); a wrong
    password re-shows the form (401) with the username kept.

    After too many failures from one address, for one username or for all, the form answers 429 until the
    window passes. The database is used in short steps: the Argon2 check between them holds no connection
    (and waits at its own gate, PASSWORD_CHECKS_AT_ONCE per process), and an unknown username costs the
    same Argon2 work as a known one. With password sign-in turned off (MAD_PASSWORD_SIGN_IN) the form
    answers 403 without looking at the password.
    """
    if not settings.password_sign_in:
        return _login_form(request, settings, next, error=translate(request, PASSWORDS_OFF), status_code=403)
    limits = request.app.state.login_limits
    address = request.client.host if request.client else ""
    named = username_key(username[:MAX_USERNAME_LENGTH])  # failures count per account, in any case or form
    where = dict(limits=limits, address=address, username=named)
    wait_s = await steps.run(lambda db: rate_limit.retry_after(db_session=db, now=utcnow(), **where))
    if wait_s:
        error = translate(request, TOO_MANY_FAILURES, seconds=i18n.number(wait_s, page_locale(request)))
        response = _login_form(request, settings, next, username, error, status_code=429)
        response.headers["Retry-After"] = str(wait_s)
        return response
    account = await steps.run(lambda db: users_service.sign_in_account(db_session=db, username=username))
    async with request.app.state.password_gate:  # Argon2 takes 64 MiB a check: a few at a time
        matches = await run_in_threadpool(users_service.password_matches, account, password)
    if account is None or not matches:
        await steps.run(lambda db: rate_limit.record_failure(db_session=db, now=utcnow(), **where))
        return _login_form(
            request, settings, next, username, translate(request, WRONG_PASSWORD), status_code=401
        )
    await steps.run(lambda db: rate_limit.forget(db_session=db, address=address, username=named))
    start_session(request, account.id, account.session_generation)
    return RedirectResponse(landing_page(next, account.role), status_code=303)


@router.get("/account", response_class=HTMLResponse)
def account_page(request: Request, db_session: SessionDep, user: OptionalUser, settings: SettingsDep):
    """The signed-in person's account: who they are, the OpenID providers they sign in with (and buttons to
    link the others), and a form to change their password when they have one (keeping their API tokens,
    when they have some, only if they say so)."""
    account = page_user(request, user, Role.admin, Role.annotator)
    if isinstance(account, RedirectResponse):
        return account
    identities = openid.identities_of(db_session=db_session, user=account)
    linked = {identity.issuer: identity for identity in identities}
    return render(
        request,
        "account.html",
        user=account,
        has_password=account.password_hash is not None,
        tokens=len(users_service.list_api_tokens(db_session=db_session, user=account)),
        linked=[
            (provider, linked[provider.issuer])
            for provider in settings.oidc_providers
            if provider.issuer in linked
        ],
        to_link=[provider for provider in settings.oidc_providers if provider.issuer not in linked],
    )


@router.post("/language", dependencies=[Depends(check_csrf)])
def choose_language(
    request: Request,
    db_session: SessionDep,
    user: OptionalUser,
    locale: Annotated[str, Form(max_length=16)],
    next: Annotated[str, Form()] = "/",
):
    """The language switch at the foot of every page: the pages of this browser session, and the signed-in
    account's pages and questions wherever it signs in, come in this language from now on; back to `next`."""
    if user is not None:
        users_service.set_locale(db_session=db_session, user=user, locale=locale)
    request.session["locale"] = i18n.known_locale(locale)
    return RedirectResponse(safe_next(next), status_code=303)


@router.post("/logout", dependencies=[Depends(check_csrf)])
def logout(request: Request, db_session: SessionDep, user: OptionalUser):
    """Sign out: every session of the user ends, on this browser and any other (server-side)."""
    if user is not None:
        users_service.end_sessions(db_session=db_session, user=user)
    request.session.clear()
    return RedirectResponse("/", status_code=303)


@router.get("/invitations/{token}", response_class=HTMLResponse, name="invitation_page")
def invitation_page(request: Request, token: str, db_session: SessionDep, settings: SettingsDep):
    """The form that makes the invited person's account, and a button for each OpenID provider to join
    with instead; 404 once the link is used or expired."""
    invitation = invitations.open_invitation(db_session=db_session, token=token)
    return _form(request, settings, token, invitation.role, username="", error=None)


@router.post("/invitations/{token}", response_class=HTMLResponse, dependencies=[Depends(check_csrf)])
def accept_invitation(
    request: Request,
    token: str,
    db_session: SessionDep,
    settings: SettingsDep,
    username: Annotated[str, Form(max_length=200)],
    password: Annotated[str, Form(max_length=200)],
    password_again: Annotated[str, Form(max_length=200)],
):
    """Make the account, use the link up and sign in; a taken username or a short or mistyped password
    re-shows the form (422 or 409) with the username kept, the link still unused; so does password sign-in
    turned off (403)."""
    invitation = invitations.open_invitation(db_session=db_session, token=token)
    try:
        if not settings.password_sign_in:
            raise Forbidden(translate(request, PASSWORDS_OFF))
        if password != password_again:
            raise InvalidInput(translate(request, PASSWORDS_DIFFER))
        user = invitations.accept_invitation(
            db_session=db_session, token=token, username=username, password=password
        )
    except (InvalidInput, Conflict, Forbidden) as error:
        return _form(request, settings, token, invitation.role, username, str(error), error.status_code)
    start_session(request, user.id, user.session_generation)
    return RedirectResponse(landing_page("/", user.role), status_code=303)


def _form(
    request: Request,
    settings: Settings,
    token: str,
    role: Role,
    username: str,
    error: str | None,
    status_code: int = 200,
):
    """The invitation form, with an error to fix when there is one. Its address holds the link's token, so
    its requests (styles, scripts, the form) send no Referer for a proxy's log to keep."""
    page = render(
        request,
        "invitation.html",
        status_code=status_code,
        role=role.value,
        token=token,
        username=username,
        error=error,
        min_length=MIN_PASSWORD_LENGTH,
        **sign_in_choices(settings),
    )
    page.headers["Referrer-Policy"] = "no-referrer"
    return page
