"""An annotator whose browser asks for German labels a competition whose taxonomy names its classes in
German, end to end in headless Chromium: the pages speak German, the questions name the classes in German
without an English article (and the one class without a German name is asked in English, saying so), the
language switch works from the keyboard without JavaScript's help, and
axe-core finds nothing on the German pages."""

import json
from collections.abc import Iterator

import pytest
from selenium.common.exceptions import StaleElementReferenceException
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.support import expected_conditions
from selenium.webdriver.support.ui import WebDriverWait

from app.competitions.schemas import CompetitionCreate
from app.competitions.service import create_competition
from app.images.store import ImageStore
from app.users import service as users_service
from app.users.models import Role
from tests.conftest import TEST_PASSWORD
from tests.labelling.factories import labelling_competition
from tests.support.axe import axe_violations
from tests.support.browser import PAGE_TIMEOUT_S, chromium, serving
from tests.web.conftest import LAPTOP, use_screen

GERMAN = {"fountain": "Springbrunnen", "clock": "Uhr", "unicorn": "Einhorn"}
"""German names of three of the four classes: umbrella has none yet."""
TAXONOMY = {
    "root": "thing",
    "classes": [*GERMAN, "umbrella"],
    "children": {"thing": [*GERMAN, "umbrella"]},
    "translations": {"de": {"names": GERMAN, "descriptions": {"clock": "ein Gerät, das die Zeit anzeigt"}}},
}
QUESTION = "Ist auf diesem Bild Folgendes zu sehen: "
IN_ENGLISH = "Für diese Klasse gibt es noch keinen deutschen Namen: Die Frage ist auf Englisch."


@pytest.fixture(scope="module")
def german_driver(tmp_path_factory) -> Iterator:
    """Headless Chromium asking for German first (Accept-Language: de-DE,de)."""
    with chromium(tmp_path_factory.mktemp("chromium-de"), languages="de-DE,de") as browser:
        yield browser


@pytest.fixture(scope="module")
def server(sqlite_factory, tmp_path_factory):
    """A server with one competition on TAXONOMY (two classifiers, two images of two questions each) and
    the annotator `anna`; the server and the competition's id."""
    workdir = tmp_path_factory.mktemp("german")
    with serving(sqlite_factory.migrated_url(), workdir / "data") as live:
        with live.sessions() as db_session:
            spec = CompetitionCreate(
                name="dinge", taxonomy="custom", taxonomy_source=json.dumps(TAXONOMY), k=2
            )
            competition = create_competition(db_session=db_session, spec=spec)
            store = ImageStore(live.settings.blob_store)
            labelling_competition(db_session, competition, classifiers=2, images_per_pair=2, store=store)
            users_service.create_user(
                db_session=db_session, username="anna", role=Role.annotator, password=TEST_PASSWORD
            )
            db_session.commit()
            competition_id = competition.id
        yield live, competition_id


def wait_for_text(driver, element_id: str, text: str) -> None:
    WebDriverWait(driver, PAGE_TIMEOUT_S).until(
        expected_conditions.text_to_be_present_in_element((By.ID, element_id), text)
    )


def wait_for_language(driver, language: str) -> None:
    """Wait until the page that the switch's form brought is in this language."""
    WebDriverWait(driver, PAGE_TIMEOUT_S, ignored_exceptions=[StaleElementReferenceException]).until(
        lambda d: d.execute_script("return document.documentElement.lang") == language
    )


def ready(driver) -> bool:
    """Whether the image is shown and can be answered (false while the sign-in page is still shown)."""
    return driver.execute_script(
        "const i = document.getElementById('label-image'), yes = document.getElementById('answer-yes');"
        "return i !== null && yes !== null && i.complete && i.naturalWidth > 0 && !yes.disabled"
    )


def test_a_german_browser_labels_in_german_end_to_end(server, german_driver):
    (live, competition_id), driver = server, german_driver
    use_screen(driver, LAPTOP)
    label_page = f"/competitions/{competition_id}/label"
    driver.get(f"{live.url}/login?next={label_page}")
    assert driver.find_element(By.TAG_NAME, "h1").text == "Anmelden"
    assert driver.find_element(By.TAG_NAME, "html").get_attribute("lang") == "de"
    assert axe_violations(driver) == []
    driver.find_element(By.ID, "username").send_keys("anna")
    driver.find_element(By.ID, "password").send_keys(TEST_PASSWORD)
    driver.find_element(By.CSS_SELECTOR, "main form button[type=submit]").click()
    WebDriverWait(driver, PAGE_TIMEOUT_S).until(lambda d: ready(d))
    assert driver.find_element(By.TAG_NAME, "h1").text == "dinge beschriften"
    assert driver.find_element(By.ID, "answer-yes").text.startswith("Ja")
    assert axe_violations(driver) == []
    asked = []
    for _ in range(4):  # two images, two questions each, answered from the keyboard
        WebDriverWait(driver, PAGE_TIMEOUT_S).until(lambda d: ready(d))
        question = driver.find_element(By.ID, "question").text
        note = driver.find_element(By.ID, "question-language")
        if (
            question == "Does this image contain an umbrella?"
        ):  # no German name: asked in English, and said so
            assert note.is_displayed() and note.text == IN_ENGLISH
            asked.append("umbrella")
        else:
            assert question.startswith(QUESTION) and question.endswith("?"), question
            assert not note.is_displayed()
            asked.append(question.removeprefix(QUESTION).removesuffix("?"))
        driver.find_element(By.TAG_NAME, "body").send_keys("y")
        if len(asked) % 2 == 0:
            wait_for_text(driver, "status", "Gespeichert")
    assert sorted(asked) == sorted([*GERMAN.values(), "umbrella"])
    wait_for_text(driver, "question", "Hier gibt es für Sie nichts mehr zu beschriften. Vielen Dank!")
    assert axe_violations(driver) == []


def test_the_language_switch_works_from_the_keyboard_and_the_guidelines_follow(server, german_driver):
    (live, competition_id), driver = server, german_driver
    driver.get(f"{live.url}/competitions/{competition_id}/guidelines")
    assert "Uhr" in driver.find_element(By.ID, "class-definitions").text
    assert "ein Gerät, das die Zeit anzeigt" in driver.find_element(By.ID, "class-definitions").text
    english = driver.find_element(By.CSS_SELECTOR, ".language-switch button[value=en]")
    english.send_keys(Keys.ENTER)
    wait_for_language(driver, "en")
    assert driver.find_element(By.TAG_NAME, "h1").text == "How to label dinge"
    assert "clock" in driver.find_element(By.ID, "class-definitions").text
    assert axe_violations(driver) == []
    driver.find_element(By.CSS_SELECTOR, ".language-switch button[value=de]").send_keys(Keys.ENTER)
    wait_for_language(driver, "de")


def test_the_account_page_answers_in_german(server, german_driver):
    (live, _), driver = server, german_driver
    driver.get(f"{live.url}/account")
    assert driver.find_element(By.TAG_NAME, "h1").text == "Ihr Konto"
    driver.find_element(By.ID, "current-password").send_keys(TEST_PASSWORD)
    driver.find_element(By.ID, "new-password").send_keys("ein langes neues Passwort")
    driver.find_element(By.ID, "repeat-password").send_keys("ein anderes Passwort")
    driver.find_element(By.CSS_SELECTOR, "#change-password button[type=submit]").click()
    wait_for_text(
        driver, "change-password", "Nicht gesendet: „Neues Passwort wiederholen“ weicht vom ersten Feld ab."
    )
    assert axe_violations(driver) == []
