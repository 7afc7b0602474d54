"""Take the README's screenshots of a running MAD Arena with Debian's headless Chromium.

Usage: python scripts/screenshots.py --url http://127.0.0.1:8000 --competition 1 \
           [--username annotator --password …] [--out-dir docs/screenshots]
Writes leaderboard.png and leaderboard-phone.png, and with an annotator's credentials (and open questions)
label.png and label-phone.png: each page at a laptop's and a phone's window size.
"""

import argparse
import tempfile
from pathlib import Path

from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support import expected_conditions
from selenium.webdriver.support.ui import WebDriverWait

FLAGS = (
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
    "--disable-sync",
    "--hide-scrollbars",
)
TIMEOUT_S = 30


def chromium(width: int, height: int, profile: str) -> webdriver.Chrome:
    """Headless Chromium at a given window size with a throwaway profile."""
    options = webdriver.ChromeOptions()
    options.binary_location = "/usr/bin/chromium"
    for flag in (*FLAGS, f"--window-size={width},{height}", f"--user-data-dir={profile}"):
        options.add_argument(flag)
    if width < 500:  # Chromium's windows are at least 500 px wide: a phone's width is emulated
        metrics = {"width": width, "height": height}
        options.add_experimental_option("mobileEmulation", {"deviceMetrics": metrics})
    return webdriver.Chrome(options=options, service=Service("/usr/bin/chromedriver"))


def label_page(driver: webdriver.Chrome, url: str, competition: int, username: str, password: str, out: Path):
    """Sign in as an annotator and capture the first question of the annotation page."""
    driver.get(f"{url}/login?next=/competitions/{competition}/label")
    driver.find_element(By.ID, "username").send_keys(username)
    driver.find_element(By.ID, "password").send_keys(password)
    driver.find_element(By.CSS_SELECTOR, "form button[type=submit]").click()
    WebDriverWait(driver, TIMEOUT_S).until(
        lambda d: d.find_element(By.ID, "question").text.startswith("Does this image contain")
    )
    WebDriverWait(driver, TIMEOUT_S).until(
        lambda d: d.execute_script(
            "const i = document.getElementById('label-image'); return i.complete && i.naturalWidth > 0;"
        )
    )
    driver.save_screenshot(str(out))


def leaderboard_page(driver: webdriver.Chrome, url: str, competition: int, out: Path):
    """Capture the leaderboard page down to the heatmap."""
    driver.get(f"{url}/competitions/{competition}/leaderboard")
    WebDriverWait(driver, TIMEOUT_S).until(
        expected_conditions.presence_of_element_located((By.TAG_NAME, "table"))
    )
    driver.save_screenshot(str(out))


SIZES = {"": (1100, 800), "-phone": (390, 844)}
"""File-name suffix and window size (CSS pixels) of each screenshot of a page: a laptop, then a phone."""


def main() -> None:
    """Parse the arguments and take each page's screenshots at both sizes."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--url", required=True)
    parser.add_argument("--competition", type=int, required=True)
    parser.add_argument("--username")
    parser.add_argument("--password")
    parser.add_argument("--out-dir", type=Path, default=Path("docs/screenshots"))
    args = parser.parse_args()
    for suffix, (width, height) in SIZES.items():
        with tempfile.TemporaryDirectory() as profile:
            driver = chromium(width, height, profile)
            try:
                if args.username:
                    out = args.out_dir / f"label{suffix}.png"
                    label_page(driver, args.url, args.competition, args.username, args.password, out)
                out = args.out_dir / f"leaderboard{suffix}.png"
                leaderboard_page(driver, args.url, args.competition, out)
            finally:
                driver.quit()


if __name__ == "__main__":
    main()
