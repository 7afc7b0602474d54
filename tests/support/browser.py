"""A live uvicorn server on a committed database, and headless Chromium driven by Selenium.

Use from a conftest.py: `from tests.support.browser import browser, live_server  # noqa: F401`.
`live_server` runs the real application (real HTTP, its own database per test, both backends through
`fresh_database_url`); `browser` is Debian's /usr/bin/chromium through /usr/bin/chromedriver. Browser
tests skip with the reason when either is missing, and fail instead when MAD_REQUIRE_BROWSER=1 (CI).
"""

import json
import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest
from fastapi import FastAPI
from sqlalchemy import Engine
from sqlalchemy.orm import Session, sessionmaker

from app.db.engine import create_db_engine, create_sessionmaker
from app.main import create_app
from app.serving import serve_in_thread
from app.settings import Settings
from tests.conftest import TEST_PASSWORD, TEST_SECRET_KEY

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
CHROMIUM_FLAGS = (
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
    "--disable-sync",
    "--window-size=1280,900",
)
PAGE_TIMEOUT_S = 30


@dataclass
class LiveServer:
    """A running server: its base URL, the application, settings (data dir, database) and sessions on its
    database."""

    url: str
    app: FastAPI
    settings: Settings
    engine: Engine
    sessions: sessionmaker[Session]


@contextmanager
def serving(database_url: str, data_dir: Path, **overrides) -> Iterator[LiveServer]:
    """The application served by uvicorn in a background thread on this (migrated) database, with these
    settings overridden."""
    settings = Settings(
        env="test", data_dir=data_dir, database_url=database_url, secret_key=TEST_SECRET_KEY, **overrides
    )
    engine = create_db_engine(settings.sqlalchemy_url)
    try:
        app = create_app(settings)
        with serve_in_thread(app) as url:
            yield LiveServer(url, app, settings, engine, create_sessionmaker(engine))
    finally:
        engine.dispose()


@pytest.fixture
def live_server(fresh_database_url: str, tmp_path: Path) -> Iterator[LiveServer]:
    """The application served by uvicorn in a background thread on a database of its own."""
    with serving(fresh_database_url, tmp_path / "data") as server:
        yield server


def _browser_missing() -> str | None:
    """Why the browser tests cannot run here, or None."""
    for path, package in ((CHROMIUM, "chromium"), (CHROMEDRIVER, "chromium-driver")):
        if not (path.exists() or shutil.which(path.name)):
            return f"{path} is missing: install the Debian package {package}"
    return None


@contextmanager
def chromium(profile_dir: Path, record_requests: bool = False, languages: str | None = None):
    """Headless Chromium with a fresh profile; skipped (or failed under MAD_REQUIRE_BROWSER=1) if absent.
    With record_requests, `network_log(driver)` lists what the pages asked for and got; with languages
    ("de-DE,de"), the browser asks for them (its --lang and its Accept-Language preference)."""
    missing = _browser_missing()
    if missing is not None:
        if os.environ.get("MAD_REQUIRE_BROWSER") == "1":
            pytest.fail(f"MAD_REQUIRE_BROWSER=1 but {missing}")
        pytest.skip(missing)
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for flag in CHROMIUM_FLAGS:
        options.add_argument(flag)
    options.add_argument(f"--user-data-dir={profile_dir}")
    if record_requests:
        options.set_capability("goog:loggingPrefs", {"performance": "ALL"})
    if languages:
        options.add_argument(f"--lang={languages.split(',')[0]}")
        options.add_experimental_option("prefs", {"intl.accept_languages": languages})
    driver = webdriver.Chrome(service=Service(executable_path=str(CHROMEDRIVER)), options=options)
    driver.set_page_load_timeout(PAGE_TIMEOUT_S)
    try:
        yield driver
    finally:
        driver.quit()


@dataclass
class NetworkLog:
    """What the pages of a `record_requests` browser asked for since the last read: every requested URL
    (pages, scripts, styles, images, fetches, fonts, icons) and the HTTP status each response had."""

    requested: list[str]
    statuses: dict[str, int]


def network_log(driver) -> NetworkLog:
    """The requests and responses recorded since the last call."""
    log = NetworkLog([], {})
    for entry in driver.get_log("performance"):
        event = json.loads(entry["message"])["message"]
        if event["method"] == "Network.requestWillBeSent":
            log.requested.append(event["params"]["request"]["url"])
        elif event["method"] == "Network.responseReceived":
            response = event["params"]["response"]
            log.statuses[response["url"]] = response["status"]
    return log


@pytest.fixture
def browser(tmp_path: Path):
    """Headless Chromium with a fresh profile for one test."""
    with chromium(tmp_path / "chromium-profile") as driver:
        yield driver


def sign_in(
    driver, base_url: str, username: str, next_path: str = "/", password: str = TEST_PASSWORD
) -> None:
    """Sign in through the login form and wait until the browser has left it."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions
    from selenium.webdriver.support.ui import WebDriverWait

    driver.get(f"{base_url}/login?next={next_path}")
    driver.find_element(By.ID, "username").send_keys(username)
    driver.find_element(By.ID, "password").send_keys(password)
    driver.find_element(By.CSS_SELECTOR, "form button[type=submit]").click()
    WebDriverWait(driver, PAGE_TIMEOUT_S).until_not(expected_conditions.url_contains("/login"))


def wait_for_reload(driver, element) -> None:
    """Wait until `element`'s page has been replaced. Chromedriver may answer a query on an element whose
    page is being torn down with "unhandled inspector error" instead of a stale-element error: wait on."""
    from selenium.common.exceptions import WebDriverException
    from selenium.webdriver.support import expected_conditions
    from selenium.webdriver.support.ui import WebDriverWait

    WebDriverWait(driver, PAGE_TIMEOUT_S, ignored_exceptions=(WebDriverException,)).until(
        expected_conditions.staleness_of(element)
    )
