"""The adjudication review queue in headless Chromium: at laptop and phone sizes axe-core finds no violation
and nothing scrolls sideways or is clipped; an admin overturns a split decision from the keyboard, with a
reason, and the question's outcome (what the leaderboard counts) changes."""

from selenium.common.exceptions import WebDriverException
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.support import expected_conditions
from selenium.webdriver.support.ui import WebDriverWait

from app.competitions.schemas import CompetitionCreate
from app.competitions.service import create_competition
from app.images.store import ImageStore
from app.users.models import Role
from tests.conftest import make_user
from tests.labelling.contested import contested_competition
from tests.support.axe import axe_violations
from tests.support.browser import PAGE_TIMEOUT_S, sign_in
from tests.support.layout import cut_off
from tests.web.conftest import LAPTOP, PHONE, use_screen


def test_adjudication_review_queue_in_the_browser(live_server, browser):
    with live_server.sessions() as db_session:
        competition = create_competition(db_session=db_session, spec=CompetitionCreate(name="contested"))
        store = ImageStore(live_server.settings.blob_store)
        contested = contested_competition(db_session, competition, store)
        make_user(db_session, "boss", Role.admin)
        split_id = contested.question(db_session, 0, 1).id
    page = f"/admin/competitions/{competition.id}/review"
    sign_in(browser, live_server.url, "boss", next_path=page)
    for screen in (LAPTOP, PHONE):
        use_screen(browser, screen)
        browser.get(live_server.url + page)
        tiles = browser.find_elements(By.CSS_SELECTOR, "#review-queue > li")
        assert len(tiles) == 3 and "Split decision" in tiles[0].text and "3 yes to 2 no" in tiles[0].text
        assert "Discarded as too difficult" in tiles[1].text and "Not a natural photo" in tiles[2].text
        assert axe_violations(browser) == []
        assert cut_off(browser, "#review-queue label, #review-queue button") == [], screen  # none clipped
        assert (
            browser.execute_script(
                "return document.documentElement.scrollWidth - document.documentElement.clientWidth"
            )
            <= 0
        )
    use_screen(browser, LAPTOP)
    browser.get(live_server.url + page)
    form = browser.find_element(By.ID, f"verdict-split-{split_id}")
    form.find_element(By.CSS_SELECTOR, "input[value=overturned]").send_keys(Keys.SPACE)
    form.find_element(By.NAME, "reason").send_keys("a lynx: tufted ears")
    form.find_element(By.CSS_SELECTOR, "button[type=submit]").send_keys(Keys.ENTER)
    recorded = "Recorded: overturned (split)"  # on the page itself: the entry's form has left the queue
    # the page reloads the queue: an element found before it may leave the document while it is read
    WebDriverWait(browser, PAGE_TIMEOUT_S, ignored_exceptions=(WebDriverException,)).until(
        expected_conditions.text_to_be_present_in_element((By.ID, "page-status"), recorded)
    )
    assert len(browser.find_elements(By.CSS_SELECTOR, "#review-queue > li")) == 2
    assert "a lynx: tufted ears" in browser.find_element(By.ID, "verdicts").text
    assert axe_violations(browser) == []
    with live_server.sessions() as db_session:
        assert contested.question(db_session, 0, 1).outcome is False
