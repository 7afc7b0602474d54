"""Class names in the annotator's language: a competition's label set per language, from its taxonomy's
translations and from translation files imported for it (rows of class id, locale, name, description;
CSV with a header, or YAML/JSON: a list of such mappings). An imported row wins over the taxonomy's."""

import csv
import io
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from sqlalchemy import delete, select, update
from sqlalchemy.orm import Session

from app.competitions.models import ClassTranslation, Competition
from app.core.taxonomy import TaxonomyError
from app.core.taxonomy_sources import cached_taxonomy
from app.core.yaml_documents import DocumentRefused, load_document
from app.errors import InvalidInput, PayloadTooLarge
from app.i18n import SOURCE_LOCALE, locales

COLUMNS = ("class_id", "locale", "name", "description")
MAX_ROWS = 100_000
MAX_NAME_LENGTH = 255

ClassText = tuple[str, str]
"""A class's (name, description) in one language; "" where not given."""


@dataclass(frozen=True)
class TranslationRow:
    """One row of a translation file: the class (its id in the label set), the language and the texts."""

    class_id: str
    locale: str
    name: str
    description: str


def check_file_size(size: int, limit: int) -> None:
    """PayloadTooLarge (413) for a translation file over MAD_MAX_TRANSLATION_BYTES, before it is read."""
    if size > limit:
        raise PayloadTooLarge(
            f"the translation file is {size:,} bytes; at most {limit:,} are taken (MAD_MAX_TRANSLATION_BYTES)"
        )


def parse_translation_file(content: bytes, filename: str) -> list[TranslationRow]:
    """The rows of a translation file: CSV (by its .csv name) with the header class_id, locale, name,
    description (description optional), else YAML or JSON holding a list of mappings with those keys."""
    try:
        text = content.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise InvalidInput("the translation file is not UTF-8 text") from None
    records = _csv_records(text) if filename.lower().endswith(".csv") else _yaml_records(text)
    if not records:
        raise InvalidInput("the translation file has no rows")
    if len(records) > MAX_ROWS:
        raise InvalidInput(f"the translation file has {len(records):,} rows; at most {MAX_ROWS:,} are taken")
    return [_row(number, record) for number, record in enumerate(records, start=1)]


def _csv_records(text: str) -> list[dict]:
    """The CSV's rows as mappings, by its header."""
    reader = csv.DictReader(io.StringIO(text))
    missing = [column for column in COLUMNS[:3] if column not in (reader.fieldnames or [])]
    if missing:
        raise InvalidInput(f"the CSV header must name {', '.join(COLUMNS)}; missing: {', '.join(missing)}")
    try:
        return list(reader)
    except csv.Error as error:
        raise InvalidInput(f"the CSV cannot be read: {error}") from None


def _yaml_records(text: str) -> list[dict]:
    """The YAML or JSON document's list of mappings (app.core.yaml_documents: no tags, no objects, no
    aliases)."""
    try:
        document = load_document(text)
    except DocumentRefused as error:
        raise InvalidInput(f"the translation file is not CSV, YAML or JSON: {error}") from None
    if not isinstance(document, list) or not all(isinstance(record, dict) for record in document):
        raise InvalidInput(
            f"a YAML or JSON translation file is a list of mappings with keys {', '.join(COLUMNS)}"
        )
    return document


def _row(number: int, record: dict) -> TranslationRow:
    """A record checked: a class id, a language the pages come in (not English), a name of at most
    MAX_NAME_LENGTH characters, a description if any."""
    values = {column: _text(number, column, record.get(column)) for column in COLUMNS}
    if not values["class_id"]:
        raise InvalidInput(f"row {number}: class_id is empty")
    others = [locale for locale in locales() if locale != SOURCE_LOCALE]
    if values["locale"] not in others:
        raise InvalidInput(
            f"row {number}: locale {values['locale']!r} is not one of the pages' languages other than "
            f"English ({', '.join(others)}); README, 'Adding a language', says how to add one"
        )
    if not values["name"]:
        raise InvalidInput(f"row {number}: the name of class {values['class_id']!r} is empty")
    if len(values["name"]) > MAX_NAME_LENGTH:
        raise InvalidInput(f"row {number}: a name has at most {MAX_NAME_LENGTH} characters")
    return TranslationRow(**values)


def _text(number: int, column: str, value: object) -> str:
    """A record's value as text, stripped ("" for none); a number stands for its digits, and anything else
    (a list, a mapping) is refused before it is turned into text."""
    if value is None:
        return ""
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise InvalidInput(f"row {number}: {column} is a {type(value).__name__}, not text")
    return str(value).strip()


def import_translations(
    *, db_session: Session, competition: Competition, rows: Sequence[TranslationRow]
) -> dict:
    """Store a translation file's rows for the competition: each language the file names is replaced by its
    rows (every class id one of the label set's, once per language, and no two classes with one name).
    Returns the rows taken per language; labelling reads the new names on its next request."""
    known = {str(key) for key in competition.class_keys}
    seen: dict[tuple[str, str], int] = {}
    names: dict[tuple[str, str], str] = {}
    for number, row in enumerate(rows, start=1):
        if row.class_id not in known:
            raise InvalidInput(f"row {number}: {row.class_id!r} is not a class of {competition.name}")
        first = seen.get((row.class_id, row.locale))
        if first is not None:
            raise InvalidInput(f"row {number}: class {row.class_id!r} in {row.locale} is also row {first}")
        seen[row.class_id, row.locale] = number
        if (row.locale, row.name.casefold()) in names:
            other = names[row.locale, row.name.casefold()]
            raise InvalidInput(
                f"row {number}: {row.name!r} is already the {row.locale} name of class {other!r}"
            )
        names[row.locale, row.name.casefold()] = row.class_id
    taken = sorted({row.locale for row in rows})
    db_session.execute(
        delete(ClassTranslation).where(
            ClassTranslation.competition_id == competition.id, ClassTranslation.locale.in_(taken)
        )
    )
    db_session.add_all(
        ClassTranslation(
            competition_id=competition.id,
            class_key=row.class_id,
            locale=row.locale,
            name=row.name,
            description=row.description,
        )
        for row in rows
    )
    db_session.execute(
        update(Competition)
        .where(Competition.id == competition.id)
        .values(translations_version=Competition.translations_version + 1)
    )
    return {locale: sum(row.locale == locale for row in rows) for locale in taken}


def label_set_translations(
    *,
    db_session: Session,
    competition_id: int,
    class_keys: Sequence[object],
    taxonomy: str,
    source: str | None,
) -> dict[str, tuple[ClassText | None, ...]]:
    """Per language other than English: each class's (name, description) in it, in class order, None where
    neither the imported files nor the taxonomy give one; imported rows win."""
    keys = [str(key) for key in class_keys]
    try:
        given: dict[str, dict[str, ClassText]] = {
            locale: dict(texts) for locale, texts in cached_taxonomy(taxonomy, source).translations.items()
        }
    except TaxonomyError:  # its data is missing on this machine (WordNet): the imported names only
        given = {}
    imported = db_session.execute(
        select(
            ClassTranslation.locale,
            ClassTranslation.class_key,
            ClassTranslation.name,
            ClassTranslation.description,
        ).where(ClassTranslation.competition_id == competition_id)
    )
    for locale, key, name, description in imported:
        given.setdefault(locale, {})[key] = (name, description)
    return {locale: _in_class_order(texts, keys) for locale, texts in given.items() if locale in locales()}


def _in_class_order(texts: Mapping[str, ClassText], keys: Sequence[str]) -> tuple[ClassText | None, ...]:
    """The texts of each class key in turn, None where there is no name."""
    return tuple(texts[key] if key in texts and texts[key][0] else None for key in keys)


def competition_translations(
    *, db_session: Session, competition: Competition
) -> dict[str, tuple[ClassText | None, ...]]:
    """label_set_translations of a competition's row."""
    return label_set_translations(
        db_session=db_session,
        competition_id=competition.id,
        class_keys=competition.class_keys,
        taxonomy=competition.taxonomy,
        source=competition.taxonomy_source,
    )


def coverage(translations: Mapping[str, Sequence[ClassText | None]], classes: int) -> dict[str, float]:
    """Per language the pages come in (English always 1): the share of the classes with a name in it."""
    return {
        locale: 1.0
        if locale == SOURCE_LOCALE
        else sum(text is not None for text in translations.get(locale, ())) / classes
        for locale in locales()
    }
