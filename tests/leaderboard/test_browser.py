"""Result pages in headless Chromium: the leaderboard table, the heatmap, a gallery, on desktop and phone."""

from selenium.webdriver.common.by import By
from selenium.webdriver.support import expected_conditions
from selenium.webdriver.support.ui import WebDriverWait

from tests.leaderboard.conftest import build_voted
from tests.support.browser import PAGE_TIMEOUT_S

PHONE = (390, 844)


def loaded(driver, selector: str) -> bool:
    """Whether the first image matching the selector is scrolled into view and has loaded."""
    return driver.execute_script(
        "const i = document.querySelector(arguments[0]); i.scrollIntoView();"
        "return i.complete && i.naturalWidth > 0",
        selector,
    )


def test_the_leaderboard_heatmap_and_a_gallery_render(live_server, browser, tmp_path):
    with live_server.sessions() as db_session:
        voted = build_voted(db_session, live_server.settings, tmp_path)
        competition_id = voted.competition.id
        names = [classifier.name for classifier in voted.active + [voted.retired]]
    wait = WebDriverWait(browser, PAGE_TIMEOUT_S)

    browser.get(f"{live_server.url}/competitions/{competition_id}/leaderboard")
    rows = browser.find_elements(By.CSS_SELECTOR, "#leaderboard-table tbody tr")
    assert sorted(row.find_element(By.CSS_SELECTOR, "th").text for row in rows) == sorted(names)
    assert all(row.find_element(By.CSS_SELECTOR, "td.rank").text[0].isdigit() for row in rows)
    heatmap = browser.find_element(By.ID, "heatmap")
    assert heatmap.size["width"] > 200 and heatmap.size["height"] > 200
    cells = heatmap.find_elements(By.CSS_SELECTOR, "a")
    assert len(cells) == len(names) * (len(names) - 1)
    first_cell = cells[0].find_element(By.CSS_SELECTOR, "rect")
    assert first_cell.size["width"] > 20 and first_cell.value_of_css_property("fill").startswith("rgb")
    history = browser.find_element(By.ID, "history-chart")
    assert history.size["width"] > 200 and history.find_elements(By.CSS_SELECTOR, "polyline")

    target = cells[0].get_dom_attribute("href")
    cells[0].click()
    wait.until(expected_conditions.url_to_be(live_server.url + target))
    wait.until(lambda driver: loaded(driver, "#gallery img"))
    tiles = browser.find_elements(By.CSS_SELECTOR, "#gallery .tile")
    withheld = browser.find_elements(By.ID, "withheld")
    hidden = int(withheld[0].text.split()[0]) if withheld else 0
    assert 0 < len(tiles) and len(tiles) + hidden == voted.competition.k
    verdicts = [el.text for el in browser.find_elements(By.CSS_SELECTOR, "#gallery .verdict")]
    assert len(verdicts) == 2 * len(tiles) and {"✓ right", "✗ wrong"} & set(verdicts)
    wrong = browser.find_elements(By.CSS_SELECTOR, "#gallery .prediction.wrong .label")
    if wrong:
        assert wrong[0].value_of_css_property("font-style") == "italic"

    browser.set_window_size(*PHONE)
    for path in (
        f"/competitions/{competition_id}/leaderboard",
        browser.current_url.split(live_server.url)[1],
    ):
        browser.get(live_server.url + path)
        overflow = browser.execute_script(
            "return document.documentElement.scrollWidth - document.documentElement.clientWidth"
        )
        assert overflow <= 0, path


def test_a_classifier_page_draws_its_stability_curve(live_server, browser, tmp_path):
    with live_server.sessions() as db_session:
        voted = build_voted(db_session, live_server.settings, tmp_path)
        path = f"/competitions/{voted.competition.id}/classifiers/{voted.active[0].id}"
    browser.get(live_server.url + path)
    chart = browser.find_element(By.ID, "stability-chart")
    assert chart.size["width"] > 200
    assert chart.find_elements(By.CSS_SELECTOR, "polyline, circle")
    WebDriverWait(browser, PAGE_TIMEOUT_S).until(lambda driver: loaded(driver, ".gallery img"))
