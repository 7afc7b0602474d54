"""The question an annotator answers, in their language: "Does this image contain a fountain?".

English picks "a" or "an" by the sound of the class name (inflect). Other languages must not borrow that
rule: German and Spanish articles follow the noun's gender and number, which a class name alone does not
tell, so their question names the class after a colon and needs no article ("Ist auf diesem Bild Folgendes
zu sehen: Springbrunnen?", "¿Se ve en esta imagen lo siguiente: fuente?"); the catalogue of each language
translates that form (app/locale, README "Adding a language").
"""

from functools import cache
from typing import TYPE_CHECKING

from app.i18n import N_, SOURCE_LOCALE, translations

if TYPE_CHECKING:
    import inflect

WITHOUT_ARTICLE = N_("Does this image show this: {name}?")
"""The question in a language other than English: the class name stands alone, after a colon."""


@cache
def question_text(class_name: str, locale: str = SOURCE_LOCALE) -> str:
    """ "Does this image contain a ⟨class⟩?" in English, else the language's form without an article; made
    once per class name and language: inflect's article took a few per cent of the server's time per
    answer."""
    if locale == SOURCE_LOCALE:
        return f"Does this image contain {_english().a(class_name)}?"
    return translations(locale).gettext(WITHOUT_ARTICLE).format(name=class_name)


@cache
def _english() -> "inflect.engine":
    """inflect's engine, which picks "a" or "an" by the sound of the word ("a one", "an hour", "a unicycle"),
    not its first letter; imported at the first English question, since importing inflect takes 1.6 s of
    CPU (typeguard instruments its functions) that every server process and `mad` command paid at start."""
    import inflect

    return inflect.engine()
