"""The labelling page in headless Chromium: sign in, answer by keyboard, undo, flag; then the database.
On a phone-sized screen: big touch targets, no sideways scrolling, and a visible keyboard focus."""

from selenium.webdriver.common.action_chains import ActionChains
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.support import expected_conditions
from selenium.webdriver.support.ui import WebDriverWait
from sqlalchemy import select

from app.competitions.schemas import CompetitionCreate
from app.competitions.service import create_competition
from app.images.models import Image
from app.images.store import ImageStore
from app.labelling.models import (
    Assignment,
    AssignmentStatus,
    DifficultyFlag,
    FlagReason,
    LabelItem,
    Question,
    Vote,
)
from app.users import service as users_service
from app.users.models import Role, User
from tests.conftest import TEST_PASSWORD
from tests.labelling.factories import labelling_competition
from tests.support.browser import PAGE_TIMEOUT_S, sign_in


def set_up(live_server) -> int:
    """A competition with one pair (two images selected, two in reserve) whose files the server serves,
    and the annotator alice; returns the competition id."""
    with live_server.sessions() as db_session:
        competition = create_competition(db_session=db_session, spec=CompetitionCreate(name="browser", k=3))
        store = ImageStore(live_server.settings.blob_store)
        labelling_competition(db_session, competition, classifiers=2, images_per_pair=4, store=store)
        users_service.create_user(
            db_session=db_session, username="alice", role=Role.annotator, password=TEST_PASSWORD
        )
        db_session.commit()
        return competition.id


def press(driver, key: str) -> None:
    """Type one key into the page, as a person at the keyboard would."""
    ActionChains(driver).send_keys(key).perform()


def shown_image(driver) -> str:
    """The hash of the image on screen, once it has loaded and can be answered."""
    wait = WebDriverWait(driver, PAGE_TIMEOUT_S)
    wait.until(
        lambda d: d.execute_script(
            "const i = document.getElementById('label-image');"
            "return i.complete && i.naturalWidth > 0 && !document.getElementById('answer-yes').disabled"
        )
    )
    return driver.find_element(By.ID, "label-image").get_attribute("src").rsplit("/", 1)[-1]


def wait_for_text(driver, element_id: str, text: str) -> None:
    """Wait until an element shows this text."""
    WebDriverWait(driver, PAGE_TIMEOUT_S).until(
        expected_conditions.text_to_be_present_in_element((By.ID, element_id), text)
    )


def test_label_with_the_keyboard_undo_and_flag(live_server, browser):
    competition_id = set_up(live_server)
    page = f"/competitions/{competition_id}/label"

    browser.get(live_server.url + page)  # signed out: sent to the sign-in form, then back
    WebDriverWait(browser, PAGE_TIMEOUT_S).until(expected_conditions.url_contains("/login?next="))
    browser.find_element(By.ID, "username").send_keys("alice")
    browser.find_element(By.ID, "password").send_keys(TEST_PASSWORD)
    browser.find_element(By.CSS_SELECTOR, "form button[type=submit]").click()
    WebDriverWait(browser, PAGE_TIMEOUT_S).until(expected_conditions.url_to_be(live_server.url + page))

    wait_for_text(browser, "question-count", "Question 1 of 2")
    first_image = shown_image(browser)
    first_question = browser.find_element(By.ID, "question").text
    assert first_question.startswith("Does this image contain")
    assert browser.find_element(By.ID, "question").get_attribute("aria-live") == "polite"
    assert browser.find_element(By.ID, "answer-yes").is_enabled()

    press(browser, "y")
    wait_for_text(browser, "question-count", "Question 2 of 2")
    second_question = browser.find_element(By.ID, "question").text
    press(browser, "n")  # the image's last answer: both are sent, the next image comes without a reload
    wait_for_text(browser, "status", "Saved")
    status = browser.find_element(By.ID, "status").text
    assert status.startswith("Previous image: answered no."), "about the image answered, not the one shown"
    wait_for_text(browser, "answered-today", "2")
    second_image = shown_image(browser)
    assert second_image != first_image

    press(browser, "u")  # undo goes back to the first image, the undone question first
    wait_for_text(browser, "status", "undone")
    assert shown_image(browser) == first_image
    assert browser.find_element(By.ID, "question").text == second_question
    assert browser.find_element(By.ID, "question-count").text == "Question 2 of 2"  # the image has two
    press(browser, "y")  # answered again, differently
    wait_for_text(browser, "status", "Saved")
    assert shown_image(browser) == second_image

    press(browser, "d")  # the second image is too difficult
    wait_for_text(browser, "status", "Previous image: flagged as too difficult")
    third_image = shown_image(browser)
    press(browser, "p")  # the third is not a natural photo
    wait_for_text(browser, "status", "Previous image: flagged as not a natural photo")

    with live_server.sessions() as db_session:
        alice = db_session.scalar(select(User).where(User.username == "alice"))
        image_ids = dict(db_session.execute(select(Image.sha256, Image.id)).all())
        votes = db_session.execute(
            select(Question.image_id, Question.class_index, Vote.answer, Vote.seconds)
            .join(Question, Question.id == Vote.question_id)
            .where(Vote.user_id == alice.id)
        ).all()
        assert {(image_id, answer) for image_id, _, answer, _ in votes} == {(image_ids[first_image], True)}
        assert len(votes) == 2 and all(seconds is not None and seconds >= 0 for *_, seconds in votes)
        flags = db_session.execute(
            select(DifficultyFlag.image_id, DifficultyFlag.reason)
            .where(DifficultyFlag.user_id == alice.id)
            .order_by(DifficultyFlag.id)
        ).all()
        assert flags == [
            (image_ids[second_image], FlagReason.too_difficult),
            (image_ids[third_image], FlagReason.not_natural),
        ]
        flagged_item = db_session.scalar(
            select(LabelItem).where(LabelItem.image_id == image_ids[second_image])
        )
        assert flagged_item.flags == 1 and not flagged_item.discarded
        status = db_session.scalar(
            select(Assignment.status).where(
                Assignment.user_id == alice.id, Assignment.item_id == flagged_item.id
            )
        )
        assert status == AssignmentStatus.flagged


PHONE = {"width": 375, "height": 667, "deviceScaleFactor": 2, "mobile": True}
"""An iPhone SE-sized screen, in CSS pixels."""
MIN_TARGET_PX = 44
"""The smallest comfortable touch target (WCAG 2.2, success criterion 2.5.5)."""
CONTROLS = ("answer-yes", "answer-no", "flag", "flag-artificial", "undo")


def test_the_page_fits_a_phone_and_shows_where_the_keyboard_is(live_server, browser):
    competition_id = set_up(live_server)
    page = f"/competitions/{competition_id}/label"
    browser.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", PHONE)
    sign_in(browser, live_server.url, "alice", next_path=page)
    wait_for_text(browser, "question-count", "Question 1 of 2")
    shown_image(browser)

    viewport = browser.execute_script(
        "return {width: window.innerWidth, scrollWidth: document.documentElement.scrollWidth}"
    )
    assert viewport["width"] == PHONE["width"]
    assert viewport["scrollWidth"] <= viewport["width"], "the page scrolls sideways on a phone"
    for control in CONTROLS:
        element = browser.find_element(By.ID, control)
        box = browser.execute_script("return arguments[0].getBoundingClientRect().toJSON()", element)
        assert element.is_displayed(), control
        assert box["width"] >= MIN_TARGET_PX and box["height"] >= MIN_TARGET_PX, (control, box)
        assert 0 <= box["left"] and box["right"] <= PHONE["width"], (control, box)
        if control.startswith("answer-"):  # yes and no are on screen without scrolling
            assert box["bottom"] <= PHONE["height"], (control, box)

    for _ in range(30):  # Tab through the page to the yes button, as a keyboard user would
        if browser.switch_to.active_element.get_attribute("id") == "answer-yes":
            break
        press(browser, Keys.TAB)
    focused = browser.switch_to.active_element
    assert focused.get_attribute("id") == "answer-yes"
    outline = browser.execute_script(
        "const style = getComputedStyle(arguments[0]);"
        "return {visible: arguments[0].matches(':focus-visible'), style: style.outlineStyle,"
        " width: parseFloat(style.outlineWidth)}",
        focused,
    )
    assert outline["visible"] and outline["style"] != "none" and outline["width"] >= 2, outline
