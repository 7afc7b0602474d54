"""Every page, as a visitor, an annotator and an admin see it, at laptop and phone sizes in headless Chromium
(and the result pages, leaderboard, gallery and classifier, in German and Spanish on a phone): axe-core finds
no violation, nothing is asked of another host and nothing is missing (no 4xx asset), no page or table scrolls
sideways on a phone (wide tables become a card per row there), and on a touch screen every control is at least
44 × 44 px.

Runs on SQLite only: the pages are the same on both backends, and the suite's browser time is precious."""

import re
from urllib.parse import urlsplit

import httpx
import pytest
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

from app.core.taxonomy_sources import from_text
from app.leaderboard.charts import BLACK, WHITE, contrast_ratio
from tests.conftest import TEST_PASSWORD
from tests.leaderboard.scenario import DIGITS
from tests.studies.helpers import arrival, prolific_id
from tests.support.axe import axe_violations
from tests.support.browser import PAGE_TIMEOUT_S, network_log
from tests.web.conftest import LAPTOP, PARTICIPANT, PHONE, Site, act_as, use_screen

LINK = re.compile(r'<a href="([^"]*)">([^<]*)</a>')
BROWSER_ACCEPT = "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8"
"""What Chromium sends when it opens a page."""

MIN_TARGET_PX = 44
"""The smallest comfortable touch target (WCAG 2.2, success criterion 2.5.5)."""

READY = {
    "/docs": "return document.querySelectorAll('.opblock').length > 0",
    "/redoc": "return document.querySelectorAll('redoc h2').length > 0",
    "label": "const i = document.getElementById('label-image');"
    "return i.complete && i.naturalWidth > 0 && !document.getElementById('answer-yes').disabled",
    "completion": "const stay = document.getElementById('stay'); if (!stay.hidden) stay.click(); return true",
}
"""Pages that draw themselves after loading, and when they are done (a study's completion page goes on to
the platform after a few seconds unless asked to stay)."""

SMALL_TARGETS = """
const small = [];
const controls = 'a[href], button, input:not([type=hidden]), select, textarea, summary';
for (const e of document.querySelectorAll(controls)) {
  if (e.closest('#swagger-ui, redoc, svg')) continue;  // vendored widgets; the heatmap's cells are 52 px
  const wrapped = ['radio', 'checkbox'].includes(e.type) && e.closest('label');  // the label is the target
  const r = (wrapped || e).getBoundingClientRect();
  if (!r.width || r.right <= 0 || getComputedStyle(e).visibility === 'hidden') continue;
  if (r.width < arguments[0] || r.height < arguments[0]) {
    const text = (e.textContent || e.value || '').trim().slice(0, 30);
    small.push(`${e.tagName} "${text}" ${r.width}×${r.height}`);
  }
}
return small;
"""

SIDEWAYS_TABLES = """
const name = (t) => t.id || (t.caption ? t.caption.textContent : t.rows[0].textContent).trim().slice(0, 60);
const box = (t) => t.closest('.table-scroll') || t;
const wide = [...document.querySelectorAll('main table:not(.matrix)')]
  .filter((t) => !t.closest('#swagger-ui, redoc'))  // vendored widgets
  .filter((t) => t.offsetParent && box(t).scrollWidth > box(t).clientWidth + 1).map(name);
const unlabelled = [...document.querySelectorAll('table.rows-on-phone')]
  .filter((t) => [...t.tBodies].some((b) => [...b.querySelectorAll('td')].some((c) => !c.dataset.label)));
return [...wide.map((t) => `table ${t} scrolls sideways`),
        ...unlabelled.map((t) => `table ${name(t)} has a cell without its column's name`)];
"""
"""Tables shown on the page that scroll sideways in their box (a matrix keeps its grid), and card tables
with a cell whose column is not named."""

KEYBOARD_HINTS = "return [...document.querySelectorAll('kbd, .keys')].filter((e) => e.offsetParent).length"


def tour(site: Site) -> list[tuple[str | None, str, int]]:
    """(who, path, expected status) of every page: public, annotator, admin, the API docs and error pages."""
    competition = f"/competitions/{site.competition_id}"
    first, second = sorted(site.classifier_ids[:2])
    return [
        (None, "/", 200),
        (None, "/login", 200),
        (None, f"{competition}/leaderboard", 200),
        (None, f"/leaderboards/{site.snapshot_slug}", 200),
        (None, f"{competition}/pairs/{first}/{second}", 200),
        (None, f"{competition}/classifiers/{first}", 200),
        (None, f"{competition}/guidelines", 200),
        (None, "/docs", 200),
        (None, "/redoc", 200),
        (None, "/competitions/999/leaderboard", 404),
        ("alice", "/", 200),
        ("alice", f"{competition}/label", 200),
        ("alice", "/admin", 403),
        ("alice", "/account", 200),
        ("boss", "/admin", 200),
        ("boss", f"/admin/competitions/{site.competition_id}", 200),
        ("boss", f"/admin/competitions/{site.competition_id}/gold", 200),
        ("boss", "/admin/work-records", 200),
        ("boss", f"/admin/competitions/{site.competition_id}/quality", 200),
        ("boss", f"/admin/competitions/{site.competition_id}/review", 200),
        ("boss", f"{competition}/leaderboard", 200),
        (None, site.study_link + arrival(prolific_id()), 200),
        (None, site.finished_link, 200),
        (None, "/join/no-such-link" + arrival(prolific_id()), 404),
        (None, site.study_link + arrival(None), 422),
        (None, f"/studies/{site.study_id}/label", 401),
        (PARTICIPANT, f"/studies/{site.study_id}/label", 200),
        ("boss", "/admin/studies", 200),
        ("boss", f"/admin/studies/{site.study_id}", 200),
    ]


def check_page(driver, site: Site, path: str, status: int, screen: dict) -> list[str]:
    """Load a page and list what is wrong with it at this screen size."""
    driver.get(site.page(path))
    label = path.endswith("/label") and status == 200
    kind = "label" if label else "completion" if path == site.finished_link else path
    ready = READY.get(kind)
    if ready:
        WebDriverWait(driver, PAGE_TIMEOUT_S).until(lambda d: d.execute_script(ready))
    problems = [f"axe: {violation}" for violation in axe_violations(driver)]
    log = network_log(driver)
    own = urlsplit(site.url).netloc
    problems += [
        f"asks another host for {url}"
        for url in log.requested
        if urlsplit(url).scheme in ("http", "https") and urlsplit(url).netloc != own
    ]
    problems += [
        f"{url} answered {code}"
        for url, code in log.statuses.items()
        if code >= 400 and (url != site.page(path) or code != status)
    ]
    if site.page(path) in log.statuses and log.statuses[site.page(path)] != status:
        problems.append(f"answered {log.statuses[site.page(path)]}, not {status}")
    if screen["mobile"]:
        overflow = driver.execute_script(
            "return document.documentElement.scrollWidth - document.documentElement.clientWidth"
        )
        if overflow > 0:
            problems.append(f"scrolls sideways by {overflow} px")
        problems += [f"touch target {t}" for t in driver.execute_script(SMALL_TARGETS, MIN_TARGET_PX)]
        problems += driver.execute_script(SIDEWAYS_TABLES)
        if driver.execute_script(KEYBOARD_HINTS):
            problems.append("shows keyboard hints on a touch screen")
    return problems


def test_every_page_passes_axe_asks_no_other_host_and_fits_a_phone(site, driver):
    problems = []
    for screen in (LAPTOP, PHONE):
        use_screen(driver, screen)
        who = "nobody"
        for username, path, status in tour(site):
            if username != who:
                act_as(driver, site, username)
                network_log(driver)  # the sign-in's requests are not the page's
                who = username
            where = f"{path} as {username or 'a visitor'} at {screen['width']} px"
            problems += [f"{where}: {problem}" for problem in check_page(driver, site, path, status, screen)]
    assert not problems, "\n".join(problems)


IN_LANGUAGE = {
    "de": ("Rangliste von ", "Ein Klassifikator ist vorläufig", " gegen ", "Schlechteste Klassen"),
    "es": ("Clasificación de ", "Un clasificador es provisional", " contra ", "Peores clases"),
}
"""Per language: the start of the leaderboard's heading and of its provisional rule, the gallery heading's
word between the two classifiers, and the classifier page's first section heading."""


def choose_language(driver, site: Site, locale: str) -> None:
    """Choose a language with the switch at the foot of the home page, as a visitor does."""
    driver.get(site.page("/"))
    driver.find_element(By.CSS_SELECTOR, f".language-switch button[value={locale}]").click()
    WebDriverWait(driver, PAGE_TIMEOUT_S).until(
        lambda d: d.execute_script("return document.documentElement.lang") == locale
    )
    network_log(driver)  # the switch's requests are not the pages'


@pytest.mark.parametrize("locale", IN_LANGUAGE)
def test_the_result_pages_in_german_and_spanish_pass_axe_and_fit_a_phone(site, driver, locale):
    use_screen(driver, PHONE)
    act_as(driver, site, None)
    choose_language(driver, site, locale)
    leaderboard_heading, rule, versus, worst_classes = IN_LANGUAGE[locale]
    competition = f"/competitions/{site.competition_id}"
    first, second = sorted(site.classifier_ids[:2])
    pages = {
        f"{competition}/leaderboard": ("h1", leaderboard_heading),
        f"/leaderboards/{site.snapshot_slug}": ("#provisional-rule", rule),
        f"{competition}/pairs/{first}/{second}": ("h1", versus),
        f"{competition}/classifiers/{first}": ("#worst-classes", worst_classes),
    }
    problems = []
    for path, (selector, text) in pages.items():
        problems += [
            f"{path} in {locale}: {problem}" for problem in check_page(driver, site, path, 200, PHONE)
        ]
        assert driver.execute_script("return document.documentElement.lang") == locale, path
        assert text in driver.find_element(By.CSS_SELECTOR, selector).text, path
    assert not problems, "\n".join(problems)
    use_screen(driver, LAPTOP)


def login_form(client: httpx.Client, username: str) -> dict[str, str]:
    """The sign-in form's fields for this user, with the session's CSRF token."""
    csrf = re.search(r'name="csrf_token" value="([^"]+)"', client.get("/login").text).group(1)
    return {"username": username, "password": TEST_PASSWORD, "csrf_token": csrf, "next": "/"}


def test_pages_answer_errors_with_a_page_and_a_way_back_and_the_api_keeps_json(site):
    competition = f"/competitions/{site.competition_id}"
    with httpx.Client(base_url=site.url, headers={"Accept": BROWSER_ACCEPT}) as browser:
        assert browser.post("/login", data=login_form(browser, "alice")).status_code == 303
        leaderboard = site.page(f"{competition}/leaderboard")
        forbidden = browser.get("/admin", headers={"Referer": leaderboard})
        assert forbidden.status_code == 403 and forbidden.headers["content-type"].startswith("text/html")
        assert "<h1>Not allowed</h1>" in forbidden.text and "needs the admin role" in forbidden.text
        links = dict((text.strip(), href) for href, text in re.findall(LINK, forbidden.text))
        assert links["← Back to the previous page"] == f"{competition}/leaderboard"
        assert links["Sign in as someone else"] == "/login?next=/admin"
        assert "alice (annotator)" in forbidden.text  # the header says who is signed in

        unknown = browser.get("/competitions/999/leaderboard")
        assert unknown.status_code == 404 and "No competition with id 999." in unknown.text
        not_selected = browser.get(f"{competition}/pairs/{site.classifier_ids[0]}/{site.newcomer_id}")
        assert not_selected.status_code == 404
        assert "have no selected images in this competition (yet)." in not_selected.text
        assert browser.get("/no/such/page").status_code == 404

        api = browser.get("/api/v1/competitions/999")  # the API answers JSON, whatever the client accepts
        assert api.status_code == 404
        assert api.json() == {"detail": "no competition with id 999", "code": "not_found"}
    assert httpx.get(site.page("/admin"), headers={"Accept": "application/json"}).status_code in (303, 307)


def test_the_heatmap_fits_its_names_has_a_legend_and_readable_cells(site, driver):
    use_screen(driver, LAPTOP)
    act_as(driver, site, None)
    driver.get(site.page(f"/competitions/{site.competition_id}/leaderboard"))
    geometry = driver.execute_script(
        "const svg = document.getElementById('heatmap'); const box = svg.getBoundingClientRect();"
        "const labels = [...svg.querySelectorAll('text.axis')].map((t) => t.getBoundingClientRect());"
        "return {box: box.toJSON(), right: Math.max(...labels.map((r) => r.right)),"
        " top: Math.min(...labels.map((r) => r.top)), bottom: Math.max(...labels.map((r) => r.bottom)),"
        " legend: svg.querySelectorAll('.legend-scale text').length}"
    )
    box = geometry["box"]
    assert geometry["right"] <= box["right"] and geometry["bottom"] <= box["bottom"]
    assert geometry["top"] - box["top"] < 12, "a blank band above the column names"
    assert geometry["legend"] >= 3  # the scale's ticks 0, 0.5, 1 and its name
    cells = driver.execute_script(
        "return [...document.querySelectorAll('#heatmap a')].map((a) => ["
        " a.querySelector('rect').getAttribute('fill'), a.querySelector('text').getAttribute('fill'),"
        " a.querySelector('text').textContent, a.getAttribute('aria-label')])"
    )
    assert len(cells) == len(site.classifier_ids + [site.retired_id]) * len(site.classifier_ids)
    for fill, text_fill, text, label in cells:
        background = tuple(int(v) for v in fill.removeprefix("rgb(").removesuffix(")").split(","))
        assert contrast_ratio(background, BLACK if text_fill == "#000" else WHITE) >= 4.5, fill
        assert label.startswith(f"{text}: ")  # the accessible name holds what the cell shows


def test_a_phone_shows_every_figure_of_the_leaderboard_and_every_page_has_its_icon(site, driver):
    use_screen(driver, PHONE)
    act_as(driver, site, None)
    driver.get(site.page(f"/competitions/{site.competition_id}/leaderboard"))
    cells = driver.execute_script(
        "return [...document.querySelectorAll('#leaderboard-table tbody tr:first-child > *')].map((cell) => {"
        " const r = cell.getBoundingClientRect(); return [cell.innerText, r.left, r.right, r.width]; })"
    )
    assert len(cells) == 11  # rank, name and nine figures, each on screen without scrolling sideways
    assert all(width > 0 and 0 <= left and right <= PHONE["width"] for _, left, right, width in cells), cells
    labels = driver.execute_script(
        "return [...document.querySelectorAll('#leaderboard-table tbody tr:first-child td[data-label]')]"
        ".map((cell) => getComputedStyle(cell, '::before').content)"
    )
    assert '"Perron score "' in labels and '"Δrank "' in labels  # each figure says what it is
    icon = driver.execute_script("return document.querySelector('link[rel=icon]').href")
    fetched = httpx.get(icon)
    assert fetched.status_code == 200 and fetched.headers["content-type"].startswith("image/svg+xml")
    assert httpx.get(site.page("/favicon.ico")).status_code == 200  # for what asks the old way
    use_screen(driver, LAPTOP)


BULLET_ROOM_PX = 28
"""Room a list's bullet needs before its item (it sits outside the item's box, in the gap after the last)."""


def test_each_pair_gallery_link_keeps_its_bullet_apart_from_the_link_before(site, driver):
    first = sorted(site.classifier_ids)[0]
    for screen in (LAPTOP, PHONE):
        use_screen(driver, screen)
        for path in ("leaderboard", f"classifiers/{first}"):
            driver.get(site.page(f"/competitions/{site.competition_id}/{path}"))
            boxes = driver.execute_script(
                "return [...document.querySelectorAll('.pair-links li')]"
                ".map((li) => li.getBoundingClientRect()).map((r) => [r.top, r.left, r.right])"
            )
            assert len(boxes) > 1, path
            gaps = [b[1] - a[2] for a, b in zip(boxes, boxes[1:], strict=False) if abs(a[0] - b[0]) < 1]
            assert all(gap >= BULLET_ROOM_PX for gap in gaps), (path, screen, gaps)
    use_screen(driver, LAPTOP)


def test_galleries_show_whole_images_and_the_classifier_page_names_each_class_once(site, driver):
    use_screen(driver, LAPTOP)
    first, second = sorted(site.classifier_ids[:2])
    driver.get(site.page(f"/competitions/{site.competition_id}/pairs/{first}/{second}"))
    fits = driver.execute_script(
        "return [...document.querySelectorAll('.gallery img')].map((i) => getComputedStyle(i).objectFit)"
    )
    assert fits and set(fits) == {"contain"}
    driver.get(site.page(f"/competitions/{site.competition_id}/classifiers/{first}"))
    names = driver.execute_script(
        "return [...document.querySelectorAll('section table th[scope=row]')]"
        ".map((th) => th.textContent.trim())"
    )
    taxonomy = from_text(DIGITS)
    assert names and set(names) <= set(taxonomy.names) | set(taxonomy.node_names.values()), names
