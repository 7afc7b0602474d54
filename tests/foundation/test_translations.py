"""The annotator's pages come in every shipped language: each of their texts is marked for translation, and
each catalogue holds every message of the code and templates (extracted as `pybabel extract` does, by
babel.cfg), translated, with the same placeholders and no message the code no longer has."""

import re
from html.parser import HTMLParser
from pathlib import Path

import pytest
from babel.messages.frontend import CommandLineInterface
from babel.messages.pofile import read_po

from app.i18n import (
    ENGLISH,
    LOCALE_DIR,
    SOURCE_LOCALE,
    in_language,
    locales,
    rebuilt_in_language,
    translations,
)
from app.labelling.quality_control.checks import GOLD_SHORTFALL, gold_shortfall
from app.leaderboard.standings import PROVISIONAL_RULE, PROVISIONAL_RULE_TEXT
from app.web.templating import TEMPLATES_DIR, templates

ROOT = Path(__file__).resolve().parents[2]
ANNOTATOR_PAGES = (
    "base.html",
    "home.html",
    "label.html",
    "guidelines.html",
    "login.html",
    "account.html",
    "invitation.html",
    "error.html",
    "openid_buttons.html",
    "study_consent.html",
    "study_label.html",
    "study_done.html",
    "study_refused.html",
    "leaderboard.html",
    "gallery.html",
    "classifier.html",
    "charts.html",
)
"""The pages annotators read (the admin pages may stay English)."""
SHIPPED = ("de", "es")
VISIBLE_ATTRIBUTES = ("aria-label", "title", "alt", "placeholder", "data-done")
"""Attributes read out or shown (and a button input's value)."""
UNTRANSLATED = ("MAD Arena", "HodgeRank", "Hodge", "BT", "SRCC", "JSON Lines", "JSON", "CSV", "Parquet")
"""Text that is the same in every language: the product's name, the names of methods and file formats."""
NOTATION = ("sub", "sup", "tspan")
"""Elements holding a symbol's subscript or superscript (λ<sub>max</sub>), not words."""
WORD = re.compile(r"[^\W\d_]{2,}")
"""Two letters in a row: a word that would need translating (a key such as <kbd>Y</kbd> does not)."""
MARK = "\x00"
"""Stands for what Jinja prints or translates in the template's skeleton."""


def skeleton(source: str) -> str:
    """The template's HTML with every {{ … }}, {% trans %} block and other tag replaced by MARK or nothing:
    what is left is the text a reader would see untranslated."""
    parts, in_trans, tag_name_next = [], False, False
    for _, kind, value in templates.env.lex(source):
        if kind == "block_begin":
            tag_name_next = True
        elif kind == "name" and tag_name_next:
            tag_name_next = False
            if value == "trans":
                in_trans = True
                parts.append(MARK)
            elif value == "endtrans":
                in_trans = False
        elif kind == "variable_begin" and not in_trans:
            parts.append(MARK)
        elif kind == "data" and not in_trans:
            parts.append(value)
    return "".join(parts)


class VisibleText(HTMLParser):
    """The texts and the read-out attribute values of an HTML skeleton, outside <script>, <style> and
    notation (NOTATION)."""

    def __init__(self) -> None:
        super().__init__()
        self.texts: list[str] = []
        self._hidden = 0

    def handle_starttag(self, tag, attrs):
        if tag in ("script", "style", *NOTATION):
            self._hidden += 1
        shown = (*VISIBLE_ATTRIBUTES, "value") if ("type", "submit") in attrs else VISIBLE_ATTRIBUTES
        self.texts += [value or "" for name, value in attrs if name in shown]

    def handle_endtag(self, tag):
        if tag in ("script", "style", *NOTATION):
            self._hidden -= 1

    def handle_data(self, data):
        if not self._hidden:
            self.texts.append(data)


def unmarked_words(source: str) -> list[str]:
    """Text of a template that no translation call covers."""
    parser = VisibleText()
    parser.feed(skeleton(source))
    words = []
    for text in parser.texts:
        for kept in UNTRANSLATED:
            text = text.replace(kept, "")
        if WORD.search(text.replace(MARK, " ")):
            words.append(text.strip())
    return words


@pytest.mark.parametrize("name", ANNOTATOR_PAGES)
def test_every_text_of_the_annotator_pages_is_marked_for_translation(name):
    assert unmarked_words((TEMPLATES_DIR / name).read_text()) == []


def test_the_check_finds_unmarked_text_and_attributes():
    assert unmarked_words('<p>{{ _("Yes") }} <kbd>Y</kbd></p>{% trans %}Left: {{ n }}{% endtrans %}') == []
    unmarked = unmarked_words('<p>Plain words</p><button aria-label="Close">×</button>')
    assert unmarked == ["Plain words", "Close"]


@pytest.fixture(scope="module")
def extracted(tmp_path_factory) -> dict:
    """Every message of the code and templates, by id, as `pybabel extract -F babel.cfg -k N_` finds them."""
    template = tmp_path_factory.mktemp("i18n") / "messages.pot"
    arguments = ["pybabel", "-q", "extract", "-F", str(ROOT / "babel.cfg"), "-k", "N_", "-o", str(template)]
    CommandLineInterface().run([*arguments, str(ROOT)])
    with template.open("rb") as pot:
        return {message.id: message for message in read_po(pot) if message.id}


def test_the_extraction_finds_the_pages_the_questions_and_the_python_messages(extracted):
    assert "Skip to content" in extracted  # base.html
    assert "Does this image show this: {name}?" in extracted  # app/labelling/annotating/questions.py
    assert "Wrong username or password." in extracted  # app/site/pages.py


def test_the_shipped_languages_are_offered():
    assert set(SHIPPED) <= set(locales()) and locales()[0] == SOURCE_LOCALE


@pytest.mark.parametrize("locale", SHIPPED)
def test_each_catalogue_translates_every_message_and_nothing_else(extracted, locale):
    with (LOCALE_DIR / locale / "LC_MESSAGES" / "messages.po").open("rb") as po_file:
        catalogue = read_po(po_file, locale=locale)
    held = {message.id: message for message in catalogue if message.id}
    assert sorted(map(str, extracted.keys() - held.keys())) == [], "not in the catalogue (pybabel update)"
    assert sorted(map(str, held.keys() - extracted.keys())) == [], "no longer in the code (pybabel update)"
    untranslated = [
        message.id
        for message in held.values()
        if message.fuzzy or not all(message.string if isinstance(message.string, tuple) else [message.string])
    ]
    assert untranslated == []
    problems = [(message.id, [str(error) for error in errors]) for message, errors in catalogue.check()]
    assert problems == []
    braces = re.compile(r"\{\w+\}")
    for message_id, message in held.items():
        for original, translated in zip(
            message_id if isinstance(message_id, tuple) else (message_id,),
            message.string if isinstance(message.string, tuple) else (message.string,),
            strict=False,
        ):
            assert sorted(braces.findall(translated)) == sorted(braces.findall(original)), message_id


def test_a_message_stored_in_english_is_read_back_in_the_readers_language():
    reason = gold_shortfall(answered=10, correct=5, threshold=0.7, min_answers=5)
    assert in_language(reason, (GOLD_SHORTFALL,), translations("de")) == (
        "5 Ihrer letzten 10 Antworten auf Kontrollfragen mit bekannter Antwort waren richtig (50%); "
        "dieser Wettbewerb verlangt 70%"
    )
    spanish = in_language(PROVISIONAL_RULE, (GOLD_SHORTFALL, PROVISIONAL_RULE_TEXT), translations("es"))
    assert spanish.startswith("Un clasificador es provisional") and "min(k, 15)" in spanish
    assert in_language(reason, (GOLD_SHORTFALL,), translations(SOURCE_LOCALE)) == reason
    other = "an admin paused you by hand"  # made from no template: as it was written
    assert in_language(other, (GOLD_SHORTFALL,), translations("de")) == other
    mixed = PROVISIONAL_RULE.replace("once k > 15", "once k > 16")  # a repeated name must repeat its value
    assert in_language(mixed, (PROVISIONAL_RULE_TEXT,), translations("de")) == mixed


def test_a_message_built_from_facts_is_built_again_in_the_readers_language_while_the_facts_still_give_it():
    def reason(cap: int):
        return lambda words: words.ngettext(
            "the cap of {cap} image per label leaves {selected} of the {candidates} disagreements",
            "the cap of {cap} images per label leaves {selected} of the {candidates} disagreements",
            cap,
        ).format(cap=cap, selected=21, candidates=45)

    sent = reason(3)(ENGLISH)
    assert sent == "the cap of 3 images per label leaves 21 of the 45 disagreements"
    assert rebuilt_in_language(sent, reason(3), translations("de")) == (
        "die Obergrenze von 3 Bildern pro Label lässt 21 der 45 Abweichungen übrig"
    )
    assert rebuilt_in_language(sent, reason(4), translations("de")) == sent  # the cap changed since: as sent
