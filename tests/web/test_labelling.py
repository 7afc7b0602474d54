"""The labelling page in headless Chromium, keyboard first: the focus follows the questions; zoom goes to the
centre or the pointer, the arrow keys pan and two fingers pinch; undo speaks plainly, counts an image's
questions and asks the server nothing it would refuse; answers that meet an ended session are sent after
signing in again; a class's definition is one key away; skipping hands an image back without a vote.

One server (SQLite: the services are tested on both backends through the API) and one browser for the module;
each test labels as an annotator of its own."""

import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from selenium.webdriver.common.action_chains import ActionChains
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.support import expected_conditions
from selenium.webdriver.support.ui import WebDriverWait
from sqlalchemy import select

from app.competitions.schemas import CompetitionCreate
from app.competitions.service import create_competition
from app.core.taxonomy_sources import load_taxonomy
from app.images.models import Image
from app.images.store import ImageStore
from app.labelling.models import Assignment, AssignmentStatus, LabelItem, Question, Vote
from app.users import service as users_service
from app.users.models import Role, User
from tests.conftest import TEST_PASSWORD
from tests.labelling.factories import add_classifiers, add_images, labelling_competition, store_pair
from tests.support.axe import axe_violations
from tests.support.browser import PAGE_TIMEOUT_S, LiveServer, serving, sign_in
from tests.web.conftest import LAPTOP, PHONE, use_screen

SIDEWAYS = "return document.documentElement.scrollWidth - document.documentElement.clientWidth"
DIGITS_FILE = Path(__file__).resolve().parents[2] / "app" / "demo" / "digits_taxonomy.yaml"


@dataclass
class Labelling:
    """A server with a competition on the demo's digit taxonomy (every class described): three classifiers,
    two images selected per pair, each image with two questions."""

    server: LiveServer
    competition_id: int

    @property
    def page(self) -> str:
        return f"{self.server.url}/competitions/{self.competition_id}/label"


@pytest.fixture(scope="module")
def labelling(sqlite_factory, tmp_path_factory) -> Iterator[Labelling]:
    workdir = tmp_path_factory.mktemp("labelling")
    with serving(sqlite_factory.migrated_url(), workdir / "data") as server:
        with server.sessions() as db_session:
            spec = CompetitionCreate(
                name="digits", taxonomy="custom", taxonomy_source=DIGITS_FILE.read_text(), k=2
            )
            competition = create_competition(db_session=db_session, spec=spec)
            store = ImageStore(server.settings.blob_store)
            labelling_competition(db_session, competition, classifiers=3, images_per_pair=4, store=store)
            competition_id = competition.id
        yield Labelling(server, competition_id)


def annotator(labelling: Labelling, driver, name: str) -> None:
    """A new annotator, signed in on the labelling page in a fresh browser session, its image shown."""
    with labelling.server.sessions() as db_session:
        users_service.create_user(
            db_session=db_session, username=name, role=Role.annotator, password=TEST_PASSWORD
        )
        db_session.commit()
    driver.delete_all_cookies()
    sign_in(driver, labelling.server.url, name, next_path=labelling.page.removeprefix(labelling.server.url))
    shown(driver)


def shown(driver) -> str:
    """The hash of the image on screen, once it has loaded and can be answered."""
    WebDriverWait(driver, PAGE_TIMEOUT_S).until(
        lambda d: d.execute_script(
            "const i = document.getElementById('label-image');"
            "return i.complete && i.naturalWidth > 0 && !document.getElementById('answer-yes').disabled"
        )
    )
    return driver.find_element(By.ID, "label-image").get_attribute("src").rsplit("/", 1)[-1]


def press(driver, *keys: str) -> None:
    """Type keys into the page, as a person at the keyboard would."""
    ActionChains(driver).send_keys(*keys).perform()


def wait_for_text(driver, element_id: str, text: str) -> None:
    WebDriverWait(driver, PAGE_TIMEOUT_S).until(
        expected_conditions.text_to_be_present_in_element((By.ID, element_id), text)
    )


def wait_until_idle(driver) -> None:
    """Wait until the labelling page has no request in flight (label.js marks it aria-busy meanwhile)."""
    WebDriverWait(driver, PAGE_TIMEOUT_S).until(
        lambda d: not d.find_element(By.ID, "label-app").get_dom_attribute("aria-busy")
    )


def focused(driver) -> str:
    return driver.switch_to.active_element.get_attribute("id")


def test_the_focus_follows_the_questions(labelling, driver):
    use_screen(driver, LAPTOP)
    annotator(labelling, driver, "focus")
    assert focused(driver) == "answer-yes"  # ready to answer from the start
    first = shown(driver)
    press(driver, Keys.TAB, Keys.ENTER)  # Tab to "No" and press it
    wait_for_text(driver, "question-count", "Question 2 of 2")
    assert focused(driver) == "answer-yes"
    press(driver, Keys.ENTER)  # "Yes": the image's last answer; the next image comes
    wait_for_text(driver, "status", "Saved")
    assert shown(driver) != first
    WebDriverWait(driver, PAGE_TIMEOUT_S).until(lambda d: focused(d) == "answer-yes")
    driver.find_element(By.ID, "answer-no").click()  # with the mouse too
    assert focused(driver) == "answer-yes"


def frame_state(driver) -> dict:
    return driver.execute_script(
        "const f = document.getElementById('zoom-frame');"
        "return {left: f.scrollLeft, top: f.scrollTop, width: f.scrollWidth, height: f.scrollHeight,"
        " clientWidth: f.clientWidth, clientHeight: f.clientHeight,"
        " pressed: document.getElementById('zoom').getAttribute('aria-pressed')}"
    )


def test_zoom_goes_to_the_centre_or_the_pointer_arrows_pan_and_two_fingers_pinch(labelling, driver):
    use_screen(driver, LAPTOP)
    annotator(labelling, driver, "zoomer")
    press(driver, "z")
    zoomed = frame_state(driver)
    assert zoomed["pressed"] == "true" and zoomed["width"] > 2 * zoomed["clientWidth"]
    assert (
        abs(zoomed["left"] - (zoomed["width"] - zoomed["clientWidth"]) / 2) <= 2
    )  # the centre, not a corner
    assert abs(zoomed["top"] - (zoomed["height"] - zoomed["clientHeight"]) / 2) <= 2
    press(driver, Keys.ARROW_RIGHT, Keys.ARROW_DOWN)
    panned = frame_state(driver)
    assert panned["left"] > zoomed["left"] + 0.1 * zoomed["clientWidth"] and panned["top"] > zoomed["top"]
    press(driver, "z")
    assert frame_state(driver)["pressed"] == "false" and frame_state(driver)["left"] == 0

    frame = driver.find_element(By.ID, "zoom-frame")
    at = (frame.size["width"] // 4, frame.size["height"] // 4)  # the upper left quarter's centre
    before = frame_state(driver)
    ActionChains(driver).move_to_element_with_offset(
        frame, at[0] - frame.size["width"] // 2, at[1] - frame.size["height"] // 2
    ).click().perform()
    after = frame_state(driver)
    assert after["pressed"] == "true"
    for axis, offset, size in (("left", at[0], "width"), ("top", at[1], "height")):  # the point stays put
        assert abs((after[axis] + offset) / after[size] - (before[axis] + offset) / before[size]) < 0.01
    press(driver, "z")

    use_screen(driver, PHONE)
    box = driver.execute_script(
        "return document.getElementById('zoom-frame').getBoundingClientRect().toJSON()"
    )
    x, y = box["left"] + box["width"] / 2, box["top"] + box["height"] / 2

    def touch(kind: str, spread: float) -> None:
        points = [] if kind == "touchEnd" else [{"x": x - spread, "y": y}, {"x": x + spread, "y": y}]
        driver.execute_cdp_cmd("Input.dispatchTouchEvent", {"type": kind, "touchPoints": points})

    touch("touchStart", 20)
    for spread in (40, 60, 80):
        touch("touchMove", spread)
    touch("touchEnd", 0)
    pinched = frame_state(driver)
    assert pinched["pressed"] == "true"
    assert 3.5 < pinched["width"] / pinched["clientWidth"] < 4.5  # fingers four times as far apart
    use_screen(driver, LAPTOP)


def votes_of(labelling: Labelling, username: str) -> list[tuple[str, bool]]:
    """(image hash, answer) of every vote of the user."""
    with labelling.server.sessions() as db_session:
        return db_session.execute(
            select(Image.sha256, Vote.answer)
            .join(Question, Question.id == Vote.question_id)
            .join(Image, Image.id == Question.image_id)
            .join(User, User.id == Vote.user_id)
            .where(User.username == username)
        ).all()


def test_undo_speaks_plainly_and_answers_outlive_an_ended_session(labelling, driver):
    use_screen(driver, LAPTOP)
    annotator(labelling, driver, "undoer")
    driver.get_log("browser")  # start the console afresh
    first = shown(driver)
    press(driver, "y", "n")
    wait_for_text(driver, "status", "Saved")
    press(driver, "u")
    wait_for_text(driver, "status", "Your last answer is undone")
    assert shown(driver) == first
    assert driver.find_element(By.ID, "question-count").text == "Question 2 of 2"
    press(driver, "u")
    wait_for_text(driver, "question-count", "Question 1 of 2")
    wait_until_idle(
        driver
    )  # the undo's request has ended (keys pressed while one is in flight are not taken)
    press(driver, "u")  # nothing of this annotator's is left to undo: said without asking the server
    wait_for_text(driver, "status", "Nothing to undo")
    refused = [entry["message"] for entry in driver.get_log("browser") if entry["level"] == "SEVERE"]
    assert not refused, refused
    assert votes_of(labelling, "undoer") == []

    press(driver, "y")  # the first answer stays in the page until the image's last one
    driver.delete_cookie("mad_session")  # the session ends
    press(driver, "n")
    WebDriverWait(driver, PAGE_TIMEOUT_S).until(expected_conditions.url_contains("/login?next="))
    driver.find_element(By.ID, "username").send_keys("undoer")
    driver.find_element(By.ID, "password").send_keys(TEST_PASSWORD, Keys.ENTER)
    wait_for_text(driver, "status", "Sent the 2 answers kept from before you signed in again.")
    assert sorted(votes_of(labelling, "undoer")) == sorted([(first, True), (first, False)])
    assert shown(driver) != first


def test_a_definition_is_one_key_away_and_skipping_hands_the_image_back(labelling, driver):
    use_screen(driver, LAPTOP)
    annotator(labelling, driver, "reader")
    guidelines = driver.find_element(By.PARTIAL_LINK_TEXT, "Guidelines")
    assert guidelines.get_dom_attribute("href") == f"/competitions/{labelling.competition_id}/guidelines"
    assert not driver.find_element(By.ID, "definition-box").is_displayed()
    buttons = ("answer-yes", "answer-no", "flag", "define")
    buttons_at = {button: driver.find_element(By.ID, button).rect for button in buttons}
    press(driver, "i")
    definition = driver.find_element(By.ID, "definition").text
    moved = [button for button, rect in buttons_at.items() if driver.find_element(By.ID, button).rect != rect]
    assert moved == [], "opening the definition moves no button from under the pointer"
    assert definition and definition not in text_of(driver, "status"), "the definition is shown once"
    name = re.fullmatch(r"Does this image contain an? (.+)\?", driver.find_element(By.ID, "question").text)[1]
    digits = load_taxonomy(str(DIGITS_FILE))
    index = digits.names.index(name)
    assert definition == f"{digits.names[index]}: {digits.definition(index)}"
    assert driver.find_element(By.ID, "define").get_attribute("aria-expanded") == "true"
    press(driver, "y")  # the next question's class, explained as it comes
    WebDriverWait(driver, PAGE_TIMEOUT_S).until(
        lambda d: d.find_element(By.ID, "definition").text != definition
    )

    skipped = shown(driver)
    press(driver, "s")
    wait_for_text(driver, "status", "Previous image skipped: no answer recorded.")
    assert shown(driver) != skipped
    assert votes_of(labelling, "reader") == []  # the first answer was never sent
    with labelling.server.sessions() as db_session:
        statuses = db_session.execute(
            select(Image.sha256, Assignment.status)
            .join(LabelItem, LabelItem.id == Assignment.item_id)
            .join(Image, Image.id == LabelItem.image_id)
            .join(User, User.id == Assignment.user_id)
            .where(User.username == "reader")
        ).all()
    assert (skipped, AssignmentStatus.skipped) in statuses


def answer_image(driver) -> str:
    """Answer "yes" to every question of the image on screen; its hash, once the page has moved on."""
    image = shown(driver)
    asked, total = map(
        int, re.fullmatch(r"Question (\d+) of (\d+)", text_of(driver, "question-count")).groups()
    )
    for number in range(asked, total + 1):
        press(driver, "y")
        if number < total:
            wait_for_text(driver, "question-count", f"Question {number + 1} of {total}")
    WebDriverWait(driver, PAGE_TIMEOUT_S).until(
        lambda d: (
            d.find_element(By.ID, "figure").get_attribute("hidden") is not None
            or (d.find_element(By.ID, "label-image").get_attribute("src") or "").rsplit("/", 1)[-1] != image
        )
    )
    return image


def text_of(driver, element_id: str) -> str:
    return driver.find_element(By.ID, element_id).text


def one_pair_competition(labelling: Labelling, name: str, panel_size: int, seed: int) -> int:
    """A competition of its own on the server: one pair, two images selected (one in reserve); its id."""
    with labelling.server.sessions() as db_session:
        spec = CompetitionCreate(name=name, k=2, panel_size=panel_size)
        competition = create_competition(db_session=db_session, spec=spec)
        store = ImageStore(labelling.server.settings.blob_store)
        image_ids = add_images(db_session, competition, 3, store, seed=seed)
        pair = tuple(add_classifiers(db_session, competition, 2))
        store_pair(db_session, competition, pair, image_ids, first_label=0)
        db_session.commit()
        return competition.id


def test_an_empty_queue_says_so_once_counts_zero_and_leads_on(labelling, driver):
    solo = one_pair_competition(labelling, "solo", panel_size=3, seed=80_000)
    one_pair_competition(labelling, "elsewhere", panel_size=5, seed=90_000)
    use_screen(driver, LAPTOP)
    with labelling.server.sessions() as db_session:
        users_service.create_user(
            db_session=db_session, username="finisher", role=Role.annotator, password=TEST_PASSWORD
        )
        db_session.commit()
    driver.delete_all_cookies()
    sign_in(driver, labelling.server.url, "finisher", next_path=f"/competitions/{solo}/label")
    assert "2 of 3 annotators agree" in text_of(driver, "panel-rule")
    WebDriverWait(driver, PAGE_TIMEOUT_S).until(lambda d: text_of(d, "images-left").isdigit())
    left = int(text_of(driver, "images-left"))
    assert left == 2
    for labelled in range(1, left + 1):  # the counter follows every image, not every tenth
        answer_image(driver)
        assert "1 more annotator needed before it counts on the leaderboard." in text_of(driver, "status")
        assert text_of(driver, "status").startswith("Previous image: "), "the status is not about this image"
        wait_for_text(driver, "images-left", str(left - labelled))

    wait_for_text(driver, "question", "Nothing is left for you to label here")
    assert text_of(driver, "images-left") == "0", "the empty queue and its counter agree"
    visible_disabled = [
        b.get_attribute("id")
        for b in driver.find_elements(By.CSS_SELECTOR, "button:disabled")
        if b.is_displayed()
    ]
    assert visible_disabled == [], "no dead buttons are left on screen"
    assert not driver.find_element(By.ID, "answer-yes").is_displayed()
    assert driver.find_element(By.ID, "undo").is_displayed()  # the last answers can still be taken back
    onward = driver.find_element(By.LINK_TEXT, "Label elsewhere")
    assert "(2 images left for you)" in driver.find_element(By.ID, "label-done").text
    for screen in (LAPTOP, PHONE):
        use_screen(driver, screen)
        assert axe_violations(driver) == [], screen
        assert driver.execute_script(SIDEWAYS) <= 0, screen

    use_screen(driver, LAPTOP)
    onward.click()
    shown(driver)  # the other competition's first image
    assert "3 of 5 annotators agree" in text_of(driver, "panel-rule")
    driver.get(labelling.server.url + "/")
    cards = {
        card.find_element(By.TAG_NAME, "h3").text: card.text
        for card in driver.find_elements(By.CSS_SELECTOR, ".card")
    }
    assert "Nothing left for you to label" in cards["solo"]
    assert "2 images left for you to label" in cards["elsewhere"]
    label_buttons = {
        card.find_element(By.TAG_NAME, "h3").text
        for card in driver.find_elements(By.CSS_SELECTOR, ".card")
        if card.find_elements(By.LINK_TEXT, "Label")
    }
    assert "solo" not in label_buttons and "elsewhere" in label_buttons, "no Label button with nothing left"
    for screen in (LAPTOP, PHONE):
        use_screen(driver, screen)
        assert axe_violations(driver) == [], screen
