"""The question an annotator reads: in English "a" or "an" as the class name is spoken; in German and
Spanish a form that needs no article, whatever the noun's gender (the English rule must not leak)."""

import pytest

from app.labelling.schemas import QuestionRead
from app.labelling.types import PresentedQuestion


@pytest.mark.parametrize(
    ("class_name", "text"),
    [
        ("one", "Does this image contain a one?"),
        ("eight", "Does this image contain an eight?"),
        ("hourglass", "Does this image contain an hourglass?"),
        ("unicycle", "Does this image contain a unicycle?"),
        ("umbrella", "Does this image contain an umbrella?"),
        ("fountain", "Does this image contain a fountain?"),
    ],
)
def test_question_text_uses_the_spoken_article(class_name, text):
    question = PresentedQuestion(
        question_id=1, class_index=0, class_name=class_name, definition="", language="en"
    )
    assert QuestionRead.of(question).text == text


@pytest.mark.parametrize(
    ("class_name", "language", "text"),
    [
        ("Springbrunnen", "de", "Ist auf diesem Bild Folgendes zu sehen: Springbrunnen?"),
        ("Uhr", "de", "Ist auf diesem Bild Folgendes zu sehen: Uhr?"),
        ("Einhorn", "de", "Ist auf diesem Bild Folgendes zu sehen: Einhorn?"),
        ("fuente", "es", "¿Se ve en esta imagen lo siguiente: fuente?"),
        ("umbral", "es", "¿Se ve en esta imagen lo siguiente: umbral?"),
    ],
)
def test_other_languages_ask_without_an_english_article(class_name, language, text):
    question = PresentedQuestion(1, 0, class_name, "", language)
    read = QuestionRead.of(question)
    assert read.text == text
    assert read.language == language
    assert " a " not in read.text and " an " not in read.text
