"""The selection settings form of the admin competition page, in headless Chromium at phone width and by
keyboard only (issue 34): a first Enter shows what a smaller k keeps and drops and the select jobs it
queues, changing nothing; editing a field takes the form back to that first step; Enter on the focused
button then applies it, and the page says what was done."""

import httpx
import numpy as np
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.support import expected_conditions
from selenium.webdriver.support.ui import WebDriverWait
from sqlalchemy import func, select

from app.competitions.models import Competition
from app.labelling.models import Vote
from app.users import service as users_service
from app.users.models import Role
from tests.conftest import TEST_PASSWORD
from tests.leaderboard.scenario import annotators, corpus, digits_competition, register, run_select_jobs, vote
from tests.support.axe import axe_violations
from tests.support.browser import PAGE_TIMEOUT_S, sign_in, wait_for_reload
from tests.web.conftest import PHONE, use_screen

IMAGES = 30
PREVIEW = "#selection-settings"


def status_says(driver, text: str) -> None:
    """Wait until the form's result says `text`."""
    WebDriverWait(driver, PAGE_TIMEOUT_S).until(
        expected_conditions.text_to_be_present_in_element((By.CSS_SELECTOR, f"{PREVIEW} .form-status"), text)
    )


def test_the_selection_form_previews_then_applies_a_change_by_keyboard_at_phone_width(
    live_server, browser, tmp_path
):
    settings = live_server.settings
    with live_server.sessions() as db_session:
        competition = digits_competition(db_session, name="steered", k=4)
        hashes = corpus(db_session, settings, competition, IMAGES)
        truth = np.random.default_rng(2).integers(0, 10, IMAGES)
        for seed in range(3):
            labels = np.where(
                np.random.default_rng(seed).random(IMAGES) < 0.5, truth, (truth + 1 + seed) % 10
            )
            register(db_session, settings, competition, tmp_path, f"model{seed}", hashes, labels)
        assert len(run_select_jobs(db_session, settings)) == 3
        vote(db_session, competition, annotators(db_session, 1), lambda o, c: truth[o] == c, hashes)
        admin = users_service.create_user(
            db_session=db_session, username="boss", role=Role.admin, password=TEST_PASSWORD
        )
        token = users_service.create_api_token(db_session=db_session, user=admin, name="test")
        db_session.commit()
        competition_id = competition.id
        votes = db_session.scalar(select(func.count()).select_from(Vote))
    api = f"{live_server.url}/api/v1/competitions/{competition_id}"
    expected = httpx.patch(api, json={"k": 2, "dry_run": True}, headers={"Authorization": f"Bearer {token}"})
    found = expected.json()["reselection"]
    assert found["votes_dropped"] > 0 and found["select_jobs"] == 3

    use_screen(browser, PHONE)
    sign_in(browser, live_server.url, "boss", f"/admin/competitions/{competition_id}")
    browser.find_element(By.CSS_SELECTOR, "#selection-panel summary").send_keys(Keys.ENTER)
    k = browser.find_element(By.ID, "sel-k")
    k.send_keys(Keys.CONTROL, "a")
    k.send_keys("2", Keys.ENTER)
    status_says(browser, f"This change keeps {found['votes_kept']} votes and drops {found['votes_dropped']}")
    status_says(browser, "queues 3 select jobs")
    button = browser.find_element(By.CSS_SELECTOR, f"{PREVIEW} button[type=submit]")
    assert browser.switch_to.active_element == button and button.text == "Apply the change"
    assert axe_violations(browser) == []
    overflow = "return document.documentElement.scrollWidth - document.documentElement.clientWidth"
    assert browser.execute_script(overflow) <= 0
    with live_server.sessions() as db_session:
        assert db_session.get_one(Competition, competition_id).k == 4
        assert db_session.scalar(select(func.count()).select_from(Vote)) == votes

    threshold = browser.find_element(By.ID, "sel-threshold")
    threshold.send_keys(Keys.END, "5")  # 0.05: an edit asks for a new preview
    assert button.text == "Show what the change keeps and drops"
    threshold.send_keys(Keys.BACKSPACE, Keys.ENTER)
    status_says(browser, f"drops {found['votes_dropped']}")
    browser.switch_to.active_element.send_keys(Keys.ENTER)
    wait_for_reload(browser, button)
    status_says(
        browser, f"Applied: kept {found['votes_kept']} votes, dropped {found['votes_dropped']}; 3 select"
    )
    with live_server.sessions() as db_session:
        assert db_session.get_one(Competition, competition_id).k == 2
        assert db_session.scalar(select(func.count()).select_from(Vote)) == found["votes_kept"]
