"""Admin tests use the live server and the headless browser of tests/support/browser.py."""

from tests.support.browser import browser, live_server  # noqa: F401
