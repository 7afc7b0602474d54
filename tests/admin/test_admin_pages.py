"""Admin pages in headless Chromium: create a competition (a refused one says why where the admin looks),
upload images (duplicates and rejected files named), add and retire classifiers, exclude an image, freeze the
leaderboard, add gold questions, invite an annotator, set their password and deactivate them; every result
says what happened by name and stays, across the page's reload, until dismissed; then the database."""

import hashlib

import numpy as np
from selenium.common.exceptions import WebDriverException
from selenium.webdriver.common.by import By
from selenium.webdriver.support import expected_conditions
from selenium.webdriver.support.ui import Select, WebDriverWait
from sqlalchemy import select

from app.classifiers.enums import ClassifierStatus
from app.classifiers.models import Classifier
from app.competitions.models import Competition
from app.images.models import CompetitionImage
from app.labelling.models import Question
from app.leaderboard.models import LeaderboardSnapshot
from app.security import verify_password
from app.users import service as users_service
from app.users.models import Role, User
from tests.conftest import TEST_PASSWORD
from tests.leaderboard.scenario import DIGITS, predictions_parquet
from tests.support.browser import PAGE_TIMEOUT_S, sign_in, wait_for_reload
from tests.support.images import image_bytes

N_IMAGES = 6


def submit(driver, form: str, expected: str) -> None:
    """Submit the form (a CSS selector), wait for the page to reload if the form reloads it, then until the
    form's result says `expected`."""
    element = driver.find_element(By.CSS_SELECTOR, form)
    reloads = element.get_dom_attribute("data-reload") is not None
    element.find_element(By.CSS_SELECTOR, "button[type=submit]").click()
    wait = WebDriverWait(driver, PAGE_TIMEOUT_S)
    if reloads:
        wait_for_reload(driver, element)
    wait.until(
        expected_conditions.text_to_be_present_in_element((By.CSS_SELECTOR, f"{form} .form-status"), expected)
    )


def refused(driver, form: str, expected: str) -> None:
    """Submit the form, which the API refuses, and wait until its result says `expected`."""
    driver.find_element(By.CSS_SELECTOR, f"{form} button[type=submit]").click()
    WebDriverWait(driver, PAGE_TIMEOUT_S).until(
        expected_conditions.text_to_be_present_in_element((By.CSS_SELECTOR, f"{form} .form-status"), expected)
    )


def in_view_with_focus(driver, selector: str) -> bool:
    """Whether the element is on screen and has the keyboard focus (or holds it)."""
    return driver.execute_script(
        "const e = document.querySelector(arguments[0]); const r = e.getBoundingClientRect();"
        "return r.top >= 0 && r.bottom <= window.innerHeight && e.contains(document.activeElement)",
        selector,
    )


def dismiss(driver, form: str) -> None:
    """Press the result's Dismiss button and check that the result is gone."""
    driver.find_element(By.CSS_SELECTOR, f"{form} .form-status .dismiss").click()
    assert driver.find_element(By.CSS_SELECTOR, f"{form} .form-status").text == ""


def test_an_admin_runs_a_competition_from_the_pages(live_server, browser, tmp_path):
    with live_server.sessions() as db_session:
        users_service.create_user(
            db_session=db_session, username="boss", role=Role.admin, password=TEST_PASSWORD
        )
        db_session.commit()
    wait = WebDriverWait(browser, PAGE_TIMEOUT_S)
    browser.implicitly_wait(PAGE_TIMEOUT_S)  # elements looked up after a reload wait for the new page
    sign_in(browser, live_server.url, "boss", "/admin")

    form = browser.find_element(By.ID, "create-competition")
    form.find_element(By.NAME, "name").send_keys("fresh")
    Select(form.find_element(By.NAME, "taxonomy")).select_by_value("custom")
    browser.execute_script(
        "arguments[0].value = arguments[1]", form.find_element(By.NAME, "taxonomy_source"), DIGITS
    )
    smoothing = form.find_element(By.NAME, "smoothing")
    smoothing.clear()
    smoothing.send_keys("0")  # the API refuses α = 0 (422); the form says so before sending
    assert browser.execute_script("return arguments[0].checkValidity()", smoothing) is False
    smoothing.clear()
    smoothing.send_keys("1")
    for name, value in (("k", "3"), ("confidence_threshold", "0"), ("max_per_label", "100")):
        field = form.find_element(By.NAME, name)
        field.clear()
        field.send_keys(value)
    source = form.find_element(By.NAME, "taxonomy_source")
    browser.execute_script("arguments[0].value = 'root: digit'", source)  # a taxonomy without classes
    refused(browser, "#create-competition", "Not done: taxonomy:")
    assert in_view_with_focus(browser, "#create-competition .form-status")  # not below the fold
    browser.execute_script("arguments[0].value = arguments[1]", source, DIGITS)
    form.find_element(By.CSS_SELECTOR, "button[type=submit]").click()
    wait.until(expected_conditions.url_matches(r"/admin/competitions/\d+$"))
    competition_id = int(browser.current_url.rsplit("/", 1)[-1])
    wait.until(
        expected_conditions.text_to_be_present_in_element(
            (By.ID, "page-status"), "Created the competition fresh"
        )
    )

    files = []
    for seed in range(N_IMAGES):
        path = tmp_path / f"upload-{seed}.png"
        path.write_bytes(image_bytes(seed))
        files.append(path)
    (tmp_path / "again.png").write_bytes(image_bytes(0))
    (tmp_path / "notes.txt").write_text("not an image")
    upload = [*files, tmp_path / "again.png", tmp_path / "notes.txt"]
    browser.find_element(By.ID, "i-files").send_keys("\n".join(str(path) for path in upload))
    submit(browser, "#upload-images", f"Uploaded: {N_IMAGES} added, 1 already there, 1 rejected.")
    result = browser.find_element(By.CSS_SELECTOR, "#upload-images .form-status").text  # after the reload
    assert "again.png: already there (same content as upload-0.png)" in result
    assert "notes.txt: rejected" in result
    assert browser.find_element(By.CSS_SELECTOR, "[data-field=images]").text == str(N_IMAGES)
    dismiss(browser, "#upload-images")

    hashes = [hashlib.sha256(path.read_bytes()).hexdigest() for path in files]
    for name, shift in (("one", 0), ("two", 3)):
        predictions = tmp_path / f"{name}.parquet"
        predictions.write_bytes(predictions_parquet(hashes, (np.arange(N_IMAGES) + shift) % 10, seed=shift))
        form = browser.find_element(By.ID, "add-classifier")
        form.find_element(By.NAME, "name").send_keys(name)
        Select(form.find_element(By.NAME, "source")).select_by_value("predictions-file")
        assert not form.find_element(By.NAME, "architecture").is_displayed()
        form.find_element(By.NAME, "file").send_keys(str(predictions))
        submit(browser, "#add-classifier", f"Added the classifier {name} (")
        wait.until(
            expected_conditions.presence_of_element_located(
                (By.CSS_SELECTOR, f'tr[data-classifier="{name}"]')
            )
        )

    browser.find_element(By.CSS_SELECTOR, 'tr[data-classifier="two"] button').click()
    wait.until(expected_conditions.alert_is_present()).accept()
    # its form is gone with the reload, so the page says it; while the page reloads, Chromium may answer
    # that a node it was asked about no longer belongs to the document (a WebDriverException, not stale)
    WebDriverWait(browser, PAGE_TIMEOUT_S, ignored_exceptions=(WebDriverException,)).until(
        expected_conditions.text_to_be_present_in_element((By.ID, "page-status"), "Retired two: it left")
    )
    assert "retired" in browser.find_element(By.CSS_SELECTOR, 'tr[data-classifier="two"]').text

    browser.find_element(By.XPATH, "//summary[contains(., 'Exclude an image')]").click()
    form = browser.find_element(By.ID, "exclude-image")
    form.find_element(By.NAME, "sha256").send_keys(hashes[0])
    form.find_element(By.NAME, "reason").send_keys("a screenshot")
    submit(browser, "#exclude-image", f"Excluded image #0 ({hashes[0]})")
    wait.until(expected_conditions.text_to_be_present_in_element((By.TAG_NAME, "main"), "#0: a screenshot"))

    browser.find_element(By.ID, "s-note").send_keys("opening")
    submit(browser, "#freeze", "Froze the leaderboard as fresh-1.")
    wait.until(expected_conditions.presence_of_element_located((By.LINK_TEXT, "fresh-1")))

    browser.find_element(By.LINK_TEXT, "gold questions").click()
    form = browser.find_element(By.ID, "add-gold")
    form.find_element(By.NAME, "image_sha256").send_keys(hashes[1])
    Select(form.find_element(By.NAME, "questions.0.class_index")).select_by_visible_text("one")
    form.find_element(By.CSS_SELECTOR, "input[name='questions.0.answer'][value=true]").click()
    refused(browser, "#add-gold", "Not done: a gold image needs two questions")  # a fresh image
    Select(form.find_element(By.NAME, "questions.1.class_index")).select_by_visible_text("seven")
    form.find_element(By.CSS_SELECTOR, "input[name='questions.1.answer'][value=false]").click()
    submit(browser, "#add-gold", f"Added 2 gold questions on image {hashes[1]}.")
    assert browser.find_element(By.ID, "gold-images").text.split("\n") == ["one: yes", "seven: no"]

    browser.get(f"{live_server.url}/admin")
    form = browser.find_element(By.ID, "invite")
    browser.find_element(By.XPATH, "//summary[contains(., 'Create an account')]").click()
    form.find_element(By.NAME, "username").send_keys("ann")
    form.find_element(By.NAME, "password").send_keys(TEST_PASSWORD)
    submit(browser, "#invite", "Created the annotator account ann: tell them their password.")
    ann_id = (
        browser.find_element(By.CSS_SELECTOR, 'tr[data-user="ann"] form')
        .get_dom_attribute("id")
        .split("-")[1]
    )
    browser.find_element(By.CSS_SELECTOR, 'tr[data-user="ann"] summary').click()
    browser.find_element(By.ID, f"new-password-{ann_id}").send_keys("a new password")
    submit(browser, f"#password-{ann_id}", "Set a new password for ann: tell it to them.")
    assert browser.find_element(By.ID, f"new-password-{ann_id}").get_attribute("value") == ""
    submit(browser, f"#active-{ann_id}", "Deactivated ann: they cannot sign in")
    assert "deactivated" in browser.find_element(By.CSS_SELECTOR, 'tr[data-user="ann"]').text

    with live_server.sessions() as db_session:
        competition = db_session.get_one(Competition, competition_id)
        assert (competition.name, competition.taxonomy, competition.k, competition.confidence_threshold) == (
            "fresh",
            "custom",
            3,
            0.0,
        )
        classifiers = db_session.scalars(select(Classifier).order_by(Classifier.id)).all()
        assert [(c.name, c.status) for c in classifiers] == [
            ("one", ClassifierStatus.ready),
            ("two", ClassifierStatus.retired),
        ]
        excluded = db_session.scalars(select(CompetitionImage.ordinal).where(CompetitionImage.excluded)).all()
        assert excluded == [0]
        ann = db_session.scalar(select(User).where(User.username == "ann"))
        assert (ann.role, ann.is_active) == (Role.annotator, False)
        assert verify_password(ann.password_hash, "a new password")
        gold = db_session.execute(
            select(Question.class_index, Question.gold_answer).where(Question.gold_answer.is_not(None))
        )
        assert sorted(gold.all()) == [(1, True), (7, False)]
        assert db_session.scalar(select(LeaderboardSnapshot.note)) == "opening"
