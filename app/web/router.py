"""Browser pages: the home page (what to do next) and sign-in/sign-out."""

from typing import Annotated

from fastapi import APIRouter, Depends, Form, Request
from fastapi.responses import HTMLResponse, RedirectResponse

from app.competitions import service as competitions_service
from app.db import SessionDep
from app.security import new_csrf_token
from app.users import service as users_service
from app.users.auth import OptionalUser, check_csrf
from app.web.templating import render

router = APIRouter(include_in_schema=False)


@router.get("/", response_class=HTMLResponse)
def home(request: Request, db_session: SessionDep, user: OptionalUser):
    """The competitions and, when there are none yet, the commands that set one up."""
    return render(
        request,
        "home.html",
        user=user,
        competitions=competitions_service.list_competitions(db_session=db_session),
        image_counts=competitions_service.image_counts(db_session=db_session),
    )


@router.get("/login", response_class=HTMLResponse)
def login_page(request: Request, user: OptionalUser, next: str = "/"):
    """The sign-in form."""
    return render(request, "login.html", user=user, next=_safe_next(next), error=None)


@router.post("/login", response_class=HTMLResponse, dependencies=[Depends(check_csrf)])
def login(
    request: Request,
    db_session: SessionDep,
    username: Annotated[str, Form()],
    password: Annotated[str, Form()],
    next: Annotated[str, Form()] = "/",
):
    """Check the password, start a session and go to `next`; a wrong password re-shows the form (401).

    After too many failures for one address and username the form answers 429 until the window passes.
    """
    limiter = request.app.state.login_limiter
    key = (request.client.host if request.client else "", username)
    wait_s = limiter.retry_after(key)
    if wait_s:
        error = f"Too many failed sign-ins. Try again in {wait_s} seconds."
        response = render(request, "login.html", status_code=429, next=_safe_next(next), error=error)
        response.headers["Retry-After"] = str(wait_s)
        return response
    user = users_service.authenticate(db_session=db_session, username=username, password=password)
    if user is None:
        limiter.record_failure(key)
        return render(
            request, "login.html", status_code=401, next=_safe_next(next), error="Wrong username or password."
        )
    limiter.forget(key)
    request.session.clear()
    request.session.update({"user_id": user.id, "csrf": new_csrf_token()})
    return RedirectResponse(_safe_next(next), status_code=303)


@router.post("/logout", dependencies=[Depends(check_csrf)])
def logout(request: Request):
    """End the session."""
    request.session.clear()
    return RedirectResponse("/", status_code=303)


def _safe_next(target: str) -> str:
    """Only same-site paths are followed after sign-in (no open redirect)."""
    return target if target.startswith("/") and not target.startswith("//") else "/"
