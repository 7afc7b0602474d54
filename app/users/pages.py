"""The invitation page: an invited person chooses their username and password and is signed in."""

from typing import Annotated

from fastapi import APIRouter, Depends, Form, Request
from fastapi.responses import HTMLResponse, RedirectResponse

from app.db.session import SessionDep
from app.errors import Conflict, InvalidInput
from app.security import new_csrf_token
from app.users import invitations
from app.users.auth import SESSION_GENERATION, check_csrf
from app.users.models import Role
from app.users.service import MIN_PASSWORD_LENGTH
from app.web.templating import render

router = APIRouter(include_in_schema=False)


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
    """The invitation form, with an error to fix when there is one. Its address holds the link's token, so
    its requests (styles, scripts, the form) send no Referer for a proxy's log to keep."""
    page = render(
        request,
        "invitation.html",
        status_code=status_code,
        role=role.value,
        username=username,
        error=error,
        min_length=MIN_PASSWORD_LENGTH,
    )
    page.headers["Referrer-Policy"] = "no-referrer"
    return page
