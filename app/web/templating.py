"""Jinja2 templates shared by every page, with the CSRF token, the signed-in user and the page's language
(Jinja's i18n extension over app.i18n's catalogues) in context."""

from pathlib import Path
from typing import Any

from babel.support import NullTranslations
from fastapi import Request
from fastapi.templating import Jinja2Templates
from jinja2 import pass_context
from jinja2.runtime import Context

from app import i18n
from app.security import new_csrf_token

TEMPLATES_DIR = Path(__file__).resolve().parent.parent.parent / "templates"

templates = Jinja2Templates(directory=TEMPLATES_DIR)
templates.env.add_extension("jinja2.ext.i18n")
templates.env.policies["ext.i18n.trimmed"] = True  # a {% trans %} block's whitespace runs become one space


@pass_context
def _gettext(context: Context, message: str) -> str:
    """The message in the page's language."""
    return context["translations"].gettext(message)


@pass_context
def _ngettext(context: Context, singular: str, plural: str, count: int) -> str:
    """The message in the page's language, in the plural form its rules give for count."""
    return context["translations"].ngettext(singular, plural, count)


ROLE_NAMES = {"admin": i18n.N_("admin"), "annotator": i18n.N_("annotator"), "worker": i18n.N_("worker")}
"""A role as the pages name it, before translation."""


templates.env.install_gettext_callables(_gettext, _ngettext, newstyle=True)  # type: ignore[attr-defined]
templates.env.globals["translations"] = i18n.translations(i18n.SOURCE_LOCALE)
templates.env.filters["role"] = pass_context(
    lambda context, role: context["translations"].gettext(ROLE_NAMES.get(role.value, role.value))
)
templates.env.filters["number"] = pass_context(lambda context, value: i18n.number(value, context["locale"]))
templates.env.filters["day"] = pass_context(lambda context, value: i18n.day(value, context["locale"]))


def csrf_token_for(request: Request) -> str:
    """The CSRF token of this browser session, created on first use."""
    token = request.session.get("csrf")
    if not token:
        token = new_csrf_token()
        request.session["csrf"] = token
    return token


def page_locale(request: Request, user: Any = None) -> str:
    """The language of a page: the account's setting, else the one chosen in this browser session, else
    the browser's Accept-Language (app.i18n.choose_locale)."""
    return i18n.choose_locale(
        getattr(user, "locale", None),
        request.session.get("locale"),
        request.headers.get("accept-language", ""),
    )


def render(request: Request, name: str, status_code: int = 200, **context):
    """Render a page in the reader's language; every template gets `csrf_token`, `user` (None when
    anonymous), `locale`, the language switch's choices and the `number` and `day` filters."""
    context.setdefault("user", None)
    locale = page_locale(request, context["user"])
    return templates.TemplateResponse(
        request,
        name,
        {
            "csrf_token": csrf_token_for(request),
            "locale": locale,
            "translations": i18n.translations(locale),
            "languages": [(code, i18n.language_name(code)) for code in i18n.locales()],
            **context,
        },
        status_code=status_code,
    )


def page_translations(request: Request, user: Any = None) -> NullTranslations:
    """The catalogue of the page's language."""
    return i18n.translations(page_locale(request, user))


def translate(request: Request, message: str, user: Any = None, **values: object) -> str:
    """A message of the Python code (mark it with app.i18n.N_) in the page's language, its {names} filled."""
    return page_translations(request, user).gettext(message).format(**values)
