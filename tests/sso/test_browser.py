"""Signing in through a real OpenID provider in headless Chromium, end to end: an annotator of an allowed
domain opens the labelling page, is sent to sign in, presses the provider's button, signs in on the
provider's own login page, comes back to the labelling page and labels an image; the sign-in, account and
invitation pages with their provider buttons pass axe-core at laptop and phone sizes; signing out ends the
session. SQLite only (the flow is the same on both backends: the HTTP tests run on both)."""

from selenium.webdriver.common.by import By
from selenium.webdriver.support import expected_conditions
from selenium.webdriver.support.ui import WebDriverWait
from sqlalchemy import select

from app.competitions.schemas import CompetitionCreate
from app.competitions.service import create_competition
from app.images.store import ImageStore
from app.labelling.models import Vote
from app.users.invitations import create_invitation
from app.users.models import Role, User
from tests.conftest import DatabaseFactory
from tests.labelling.factories import labelling_competition
from tests.sso.conftest import ACCOUNT_PASSWORD, ALLOWED_DOMAIN, DISPLAY_NAME, NAME
from tests.support.axe import axe_violations
from tests.support.browser import PAGE_TIMEOUT_S, chromium, serving
from tests.web.conftest import LAPTOP, PHONE, use_screen
from tests.web.test_labelling import DIGITS_FILE, press, shown, wait_for_text


def test_an_annotator_signs_in_through_the_provider_and_labels_an_image(tmp_path, provider):
    client = provider.register("http://127.0.0.1/until-the-server-has-a-port")
    factory = DatabaseFactory("sqlite", tmp_path)
    with (
        serving(
            factory.migrated_url(), tmp_path / "data", oidc_providers=[provider.settings(client)]
        ) as server,
        chromium(tmp_path / "chromium") as driver,
    ):
        provider.redirect_to(client, f"{server.url}/login/sso/{NAME}/callback")
        with server.sessions() as db_session:
            spec = CompetitionCreate(
                name="digits", taxonomy="custom", taxonomy_source=DIGITS_FILE.read_text(), k=2
            )
            competition = create_competition(db_session=db_session, spec=spec)
            store = ImageStore(server.settings.blob_store)
            labelling_competition(db_session, competition, classifiers=2, images_per_pair=2, store=store)
            _, token = create_invitation(
                db_session=db_session, role=Role.annotator, note="", valid_hours=1, created_by=None
            )
            db_session.commit()
            label_page = f"{server.url}/competitions/{competition.id}/label"
        provider.account("lena", f"lena@{ALLOWED_DOMAIN}")
        wait = WebDriverWait(driver, PAGE_TIMEOUT_S)

        for screen in (PHONE, LAPTOP):
            use_screen(driver, screen)
            driver.get(f"{server.url}/invitations/{token}")
            assert driver.find_element(By.ID, f"openid-{NAME}").text == f"Join with {DISPLAY_NAME}"
            assert axe_violations(driver) == [], screen
            driver.get(label_page)  # not signed in: sent to sign in, and back here after it
            wait.until(expected_conditions.url_contains("/login?next="))
            assert axe_violations(driver) == [], screen

        driver.find_element(By.ID, f"openid-{NAME}").click()
        wait.until(expected_conditions.url_contains(f"{provider.issuer}/interaction/"))
        driver.find_element(By.ID, "login").send_keys("lena")
        driver.find_element(By.ID, "password").send_keys(ACCOUNT_PASSWORD)
        driver.find_element(By.ID, "provider-sign-in").click()
        wait.until(expected_conditions.url_to_be(label_page))
        shown(driver)
        press(driver, "y")
        wait_for_text(driver, "question-count", "Question 2 of 2")
        press(driver, "n")
        wait_for_text(driver, "status", "Saved")
        with server.sessions() as db_session:
            votes = db_session.scalars(
                select(Vote.answer).join(User, User.id == Vote.user_id).where(User.username == "lena")
            ).all()
        assert sorted(votes) == [False, True]

        for screen in (PHONE, LAPTOP):
            use_screen(driver, screen)
            driver.get(f"{server.url}/account")
            assert f"You can sign in with {DISPLAY_NAME} (lena@{ALLOWED_DOMAIN})" in driver.page_source
            assert axe_violations(driver) == [], screen
        driver.find_element(By.CSS_SELECTOR, "header form button[type=submit]").click()  # sign out
        wait.until(expected_conditions.url_to_be(f"{server.url}/"))
        driver.get(label_page)
        wait.until(expected_conditions.url_contains("/login?next="))
