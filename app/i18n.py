"""The annotator's language: Babel's gettext catalogues (app/locale/LANG/LC_MESSAGES/messages.po, compiled
in memory when first used), which language a request gets, and numbers and dates written its way."""

import re
from collections.abc import Callable, Iterable
from datetime import date, datetime
from functools import cache, lru_cache
from io import BytesIO
from pathlib import Path

from babel import Locale, negotiate_locale
from babel.dates import format_date
from babel.messages.mofile import write_mo
from babel.messages.pofile import read_po
from babel.numbers import format_decimal
from babel.support import NullTranslations, Translations

from app.errors import InvalidInput

LOCALE_DIR = Path(__file__).resolve().parent / "locale"
SOURCE_LOCALE = "en"
"""The language the code and templates are written in: it needs no catalogue."""
ENGLISH = NullTranslations()
"""The messages as written: the words of the API, the CLI and the texts stored in English."""


@cache
def locales() -> tuple[str, ...]:
    """The languages the pages come in: English and every catalogue under app/locale."""
    found = sorted(path.parent.parent.name for path in LOCALE_DIR.glob("*/LC_MESSAGES/messages.po"))
    return (SOURCE_LOCALE, *found)


@cache
def translations(locale: str) -> NullTranslations:
    """The catalogue of a language, compiled from its .po file on first use (nothing to build at install,
    no compiled file to go stale); English and unknown languages get the messages as written."""
    if locale == SOURCE_LOCALE or locale not in locales():
        return ENGLISH
    with (LOCALE_DIR / locale / "LC_MESSAGES" / "messages.po").open("rb") as po_file:
        catalogue = read_po(po_file, locale=locale)
    compiled = BytesIO()
    write_mo(compiled, catalogue, use_fuzzy=False)
    compiled.seek(0)
    return Translations(compiled)


def known_locale(locale: str) -> str:
    """The language, if the pages come in it; else InvalidInput (422) naming those they come in."""
    if locale not in locales():
        raise InvalidInput(f"no pages in {locale!r}: choose one of {', '.join(locales())}")
    return locale


@lru_cache(maxsize=512)
def accepted_locale(accept_language: str) -> str | None:
    """The first language of an Accept-Language header (by its q weights, RFC 9110 §12.5.4) that the pages
    come in (Babel's negotiate_locale: `de-CH` takes `de`), None when none is."""
    weighted = []
    for position, part in enumerate(accept_language.split(",")[:20]):
        tag, _, parameters = part.strip().partition(";")
        weight = 1.0
        if parameters.strip().startswith("q="):
            try:
                weight = float(parameters.strip()[2:])
            except ValueError:
                continue
        if tag and weight > 0:
            weighted.append((-weight, position, tag.strip().replace("_", "-")))
    return negotiate_locale([tag for _, _, tag in sorted(weighted)], locales(), sep="-")


def choose_locale(account_locale: str | None, session_locale: str | None, accept_language: str) -> str:
    """The language of a request: the account's setting, else the one chosen on the pages in this browser
    session, else the browser's Accept-Language, else English."""
    for chosen in (account_locale, session_locale):
        if chosen in locales():
            return chosen
    return accepted_locale(accept_language) or SOURCE_LOCALE


@cache
def language_name(locale: str) -> str:
    """A language's name in itself ("Deutsch", "español"), for the language switch."""
    name = Locale.parse(locale).get_display_name(locale) or locale
    return name[:1].upper() + name[1:]


def number(value: float, locale: str) -> str:
    """A number written the language's way (1,234.5 in English, 1.234,5 in German)."""
    return format_decimal(value, locale=locale)


def day(value: date | datetime, locale: str) -> str:
    """A date written the language's way, medium length (Nov 26, 2026; 26.11.2026)."""
    return format_date(value, format="medium", locale=locale)


def N_(message: str) -> str:
    """Mark a message of the Python code for `pybabel extract` (-k N_): it is translated where shown."""
    return message


def in_language(text: str, templates: Iterable[str], translations: NullTranslations) -> str:
    """A message the code stored or sent in English, made from one of `templates` (marked with N_, their
    {names} filled), in the language of `translations`; text made from none of them is returned as it is."""
    for template in templates:
        match = _template_pattern(template).fullmatch(text)
        if match:
            return translations.gettext(template).format(**match.groupdict())
    return text


def rebuilt_in_language(
    stored: str, build: Callable[[NullTranslations], str | None], translations: NullTranslations
) -> str | None:
    """A message stored or sent in English, built again by `build` (its words from the catalogue it is given)
    in the language of `translations`, when building it in English gives the stored text (the facts it was
    built from have not changed since); else the stored text as it is."""
    return build(translations) if build(ENGLISH) == stored else stored


@cache
def _template_pattern(template: str) -> re.Pattern[str]:
    """A regular expression matching the template with any values in its {names} (a name repeated must
    repeat its value)."""
    parts, seen = re.split(r"\{(\w+)\}", template), set()
    pattern = []
    for position, part in enumerate(parts):
        if position % 2 == 0:
            pattern.append(re.escape(part))
        else:
            pattern.append(f"(?P={part})" if part in seen else f"(?P<{part}>.+?)")
            seen.add(part)
    return re.compile("".join(pattern), re.DOTALL)
