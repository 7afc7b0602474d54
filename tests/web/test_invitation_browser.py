"""Onboarding in headless Chromium: an admin makes an invitation link on the admin page, a person opens it,
chooses a username and password and is signed in; the invitation page passes axe-core at laptop and phone
sizes, and so do the admin pages with their invitations and members sections. Runs on SQLite only (the pages
are the same on both backends; the API tests run on both)."""

import re

from selenium.common.exceptions import StaleElementReferenceException
from selenium.webdriver.common.by import By
from selenium.webdriver.support import expected_conditions
from selenium.webdriver.support.ui import WebDriverWait

from app.competitions.members import add_member
from app.competitions.schemas import CompetitionCreate
from app.competitions.service import create_competition
from app.users import service as users_service
from app.users.models import Role
from tests.conftest import TEST_PASSWORD, DatabaseFactory
from tests.support.axe import axe_violations
from tests.support.browser import PAGE_TIMEOUT_S, chromium, serving, sign_in, wait_for_reload
from tests.support.layout import cut_off
from tests.web.conftest import LAPTOP, PHONE, use_screen

NEW_PASSWORD = "my own passphrase 9"
INVITE_STATUS = (By.CSS_SELECTOR, "#invite-link .form-status")


def test_a_person_joins_through_an_invitation_link(tmp_path):
    factory = DatabaseFactory("sqlite", tmp_path)
    with (
        serving(factory.migrated_url(), tmp_path / "data") as server,
        chromium(tmp_path / "chromium") as driver,
    ):
        with server.sessions() as db_session:
            users_service.create_user(
                db_session=db_session, username="boss", role=Role.admin, password=TEST_PASSWORD
            )
            member = users_service.create_user(
                db_session=db_session, username="member", role=Role.annotator, password=TEST_PASSWORD
            )
            competition = create_competition(
                db_session=db_session, spec=CompetitionCreate(name="closed", members_only=True)
            )
            add_member(db_session=db_session, competition=competition, user=member)
            db_session.commit()
            competition_id = competition.id
        wait = WebDriverWait(driver, PAGE_TIMEOUT_S)
        use_screen(driver, LAPTOP)
        sign_in(driver, server.url, "boss")
        driver.get(f"{server.url}/admin")
        driver.find_element(By.ID, "i-note").send_keys("dana at the lab")
        form = driver.find_element(By.ID, "invite-link")
        form.find_element(By.CSS_SELECTOR, "button[type=submit]").click()
        wait_for_reload(driver, form)  # the form reloads the page

        def shown_link(browser) -> str | None:
            """The link in the reloaded page's form status, once it is shown."""
            found = re.search(r"http://\S+/invitations/[\w-]+", browser.find_element(*INVITE_STATUS).text)
            return found and found.group(0)

        link = WebDriverWait(
            driver, PAGE_TIMEOUT_S, ignored_exceptions=(StaleElementReferenceException,)
        ).until(shown_link)
        assert "dana at the lab" in driver.find_element(By.ID, "invitations-table").text
        for screen in (PHONE, LAPTOP):  # the one-time link is whole within its box, beside its Copy button
            use_screen(driver, screen)
            assert cut_off(driver, "#invite-link .copy-value, #invite-link .copy-field button") == [], screen
        assert driver.find_element(By.CSS_SELECTOR, "#invite-link .copy-value").text == link
        driver.execute_cdp_cmd(
            "Browser.grantPermissions",
            {"origin": server.url, "permissions": ["clipboardReadWrite", "clipboardSanitizedWrite"]},
        )
        driver.find_element(By.CSS_SELECTOR, "#invite-link .copy-field button").click()
        wait.until(expected_conditions.text_to_be_present_in_element(INVITE_STATUS, "Copied."))
        copied = driver.execute_async_script(
            "const done = arguments[0]; navigator.clipboard.readText().then(done, (e) => done(String(e)));"
        )
        assert copied == link
        for screen in (LAPTOP, PHONE):
            use_screen(driver, screen)
            for path in ("/admin", f"/admin/competitions/{competition_id}"):
                driver.get(server.url + path)
                assert axe_violations(driver) == [], (path, screen)
            driver.get(server.url + "/admin")  # every link and button of the admin's start page is on screen
            assert cut_off(driver, "main a, main button, main summary") == [], screen

        driver.delete_all_cookies()
        for screen in (PHONE, LAPTOP):
            use_screen(driver, screen)
            driver.get(link)
            assert driver.find_element(By.TAG_NAME, "h1").text == "Join MAD Arena"
            assert axe_violations(driver) == [], screen
        driver.find_element(By.ID, "username").send_keys("dana")
        driver.find_element(By.ID, "password").send_keys(NEW_PASSWORD)
        driver.find_element(By.ID, "password-again").send_keys(NEW_PASSWORD + "x")
        driver.find_element(By.CSS_SELECTOR, "form button[type=submit]").click()
        alert = wait.until(
            expected_conditions.visibility_of_element_located((By.CSS_SELECTOR, "[role=alert]"))
        )
        assert "differ" in alert.text and axe_violations(driver) == []
        driver.find_element(By.ID, "password").send_keys(NEW_PASSWORD)
        driver.find_element(By.ID, "password-again").send_keys(NEW_PASSWORD)
        driver.find_element(By.CSS_SELECTOR, "form button[type=submit]").click()
        wait.until_not(expected_conditions.url_contains("/invitations/"))
        body = driver.find_element(By.TAG_NAME, "body").text
        assert "dana" in body and "No competition is open to you yet" in body  # signed in; not a member

        driver.get(link)  # used up
        assert "expired or was already used" in driver.find_element(By.TAG_NAME, "body").text
