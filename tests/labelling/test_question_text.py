"""The question an annotator reads: "a" or "an" as the class name is spoken."""

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
    question = PresentedQuestion(question_id=1, class_index=0, class_name=class_name, definition="")
    assert QuestionRead.of(question).text == text
