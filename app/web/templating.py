"""Jinja2 templates shared by every page, with the CSRF token and the signed-in user in context."""

from pathlib import Path

from fastapi import Request
from fastapi.templating import Jinja2Templates

from app.security import new_csrf_token

TEMPLATES_DIR = Path(__file__).resolve().parent.parent.parent / "templates"

templates = Jinja2Templates(directory=TEMPLATES_DIR)


def csrf_token_for(request: Request) -> str:
    """The CSRF token of this browser session, created on first use."""
    token = request.session.get("csrf")
    if not token:
        token = new_csrf_token()
        request.session["csrf"] = token
    return token


def render(request: Request, name: str, status_code: int = 200, **context):
    """Render a page; every template gets `csrf_token` and `user` (None when anonymous)."""
    context.setdefault("user", None)
    return templates.TemplateResponse(
        request, name, {"csrf_token": csrf_token_for(request), **context}, status_code=status_code
    )
