"""Admin pages in headless Chromium: create a competition, upload images, add and retire classifiers,
exclude an image, invite and pause an annotator, freeze the leaderboard; then the database."""

import hashlib

import numpy as np
from selenium.webdriver.common.by import By
from selenium.webdriver.support import expected_conditions
from selenium.webdriver.support.ui import Select, WebDriverWait
from sqlalchemy import select

from app.classifiers.models import Classifier, ClassifierStatus
from app.competitions.models import Competition
from app.images.models import CompetitionImage
from app.leaderboard.models import LeaderboardSnapshot
from app.users import service as users_service
from app.users.models import Role, User
from tests.conftest import TEST_PASSWORD
from tests.leaderboard.scenario import DIGITS, predictions_parquet
from tests.support.browser import PAGE_TIMEOUT_S, sign_in
from tests.support.images import image_bytes

N_IMAGES = 6


def submit(driver, form: str, expected: str) -> None:
    """Submit the form (a CSS selector), wait until its status says `expected`, and, for a form that
    reloads the page, until the page has reloaded."""
    element = driver.find_element(By.CSS_SELECTOR, form)
    reloads = element.get_dom_attribute("data-reload") is not None
    element.find_element(By.CSS_SELECTOR, "button[type=submit]").click()
    wait = WebDriverWait(driver, PAGE_TIMEOUT_S)
    wait.until(
        expected_conditions.text_to_be_present_in_element((By.CSS_SELECTOR, f"{form} .form-status"), expected)
    )
    if reloads:
        wait.until(expected_conditions.staleness_of(element))


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
    form.find_element(By.CSS_SELECTOR, "button[type=submit]").click()
    wait.until(expected_conditions.url_matches(r"/admin/competitions/\d+$"))
    competition_id = int(browser.current_url.rsplit("/", 1)[-1])

    files = []
    for seed in range(N_IMAGES):
        path = tmp_path / f"upload-{seed}.png"
        path.write_bytes(image_bytes(seed))
        files.append(path)
    browser.find_element(By.ID, "i-files").send_keys("\n".join(str(path) for path in files))
    submit(browser, "#upload-images", f"Added {N_IMAGES}, duplicates 0, rejected 0")
    wait.until(
        expected_conditions.text_to_be_present_in_element(
            (By.CSS_SELECTOR, "[data-field=images]"), str(N_IMAGES)
        )
    )

    hashes = [hashlib.sha256(path.read_bytes()).hexdigest() for path in files]
    for name, shift in (("one", 0), ("two", 3)):
        predictions = tmp_path / f"{name}.parquet"
        predictions.write_bytes(predictions_parquet(hashes, (np.arange(N_IMAGES) + shift) % 10, seed=shift))
        form = browser.find_element(By.ID, "add-classifier")
        form.find_element(By.NAME, "name").send_keys(name)
        Select(form.find_element(By.NAME, "source")).select_by_value("predictions-file")
        assert not form.find_element(By.NAME, "architecture").is_displayed()
        form.find_element(By.NAME, "file").send_keys(str(predictions))
        submit(browser, "#add-classifier", "Done.")
        wait.until(
            expected_conditions.presence_of_element_located(
                (By.CSS_SELECTOR, f'tr[data-classifier="{name}"]')
            )
        )

    browser.find_element(By.CSS_SELECTOR, 'tr[data-classifier="two"] button').click()
    wait.until(expected_conditions.alert_is_present()).accept()
    wait.until(
        expected_conditions.text_to_be_present_in_element(
            (By.CSS_SELECTOR, 'tr[data-classifier="two"]'), "retired"
        )
    )

    browser.find_element(By.XPATH, "//summary[contains(., 'Exclude an image')]").click()
    form = browser.find_element(By.ID, "exclude-image")
    form.find_element(By.NAME, "sha256").send_keys(hashes[0])
    form.find_element(By.NAME, "reason").send_keys("a screenshot")
    submit(browser, "#exclude-image", "Done.")
    wait.until(expected_conditions.text_to_be_present_in_element((By.TAG_NAME, "main"), "#0: a screenshot"))

    browser.find_element(By.ID, "s-note").send_keys("opening")
    submit(browser, "form[action$='/snapshots']", "Done.")
    wait.until(expected_conditions.presence_of_element_located((By.LINK_TEXT, "fresh-1")))

    browser.get(f"{live_server.url}/admin")
    form = browser.find_element(By.ID, "invite")
    browser.find_element(By.XPATH, "//summary[contains(., 'Invite')]").click()
    form.find_element(By.NAME, "username").send_keys("ann")
    form.find_element(By.NAME, "password").send_keys(TEST_PASSWORD)
    submit(browser, "#invite", "Done.")
    wait.until(expected_conditions.presence_of_element_located((By.CSS_SELECTOR, 'tr[data-user="ann"]')))
    browser.find_element(By.CSS_SELECTOR, 'tr[data-user="ann"] button').click()
    wait.until(
        expected_conditions.text_to_be_present_in_element((By.CSS_SELECTOR, 'tr[data-user="ann"]'), "paused")
    )

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
        assert db_session.scalar(select(LeaderboardSnapshot.note)) == "opening"
