"""The whole loop of a paid crowd study in headless Chromium, against a local page standing in for Prolific:
a participant opens the study from the platform's page (their PROLIFIC_PID, STUDY_ID and SESSION_ID filled
into the study's link), agrees from the keyboard, labels the required images and lands back on the platform's
completion URL with the completed code; one who comes back with the same id resumes where they were and
finishes early with the button; one whom gold quality control pauses gets the screened-out code. The bonus
file of the run then has the expected lines, checked against the votes and the work records.

One server on SQLite (the services are tested on both backends through the API, tests/studies/test_api.py)."""

import random
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, quote, urlsplit

import httpx
import pytest
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.support.ui import WebDriverWait
from sqlalchemy import distinct, func, select

from app.competitions.schemas import CompetitionCreate
from app.competitions.service import create_competition
from app.images.models import Image
from app.images.store import ImageStore
from app.labelling.models import Question, Vote
from app.labelling.quality_control.gold import add_gold_questions
from app.studies.schemas import StudyCreate
from app.studies.service import create_study
from app.users import service as users_service
from app.users.models import Role, User
from tests.conftest import TEST_PASSWORD, DatabaseFactory
from tests.labelling.factories import add_images, labelling_competition
from tests.studies.helpers import CODES, CONSENT, prolific_id
from tests.support.browser import PAGE_TIMEOUT_S, LiveServer, chromium, serving
from tests.web.test_labelling import DIGITS_FILE, press, shown, wait_for_text

GOLD_IMAGES = 6
LOADED_IMAGE = """
const image = document.getElementById('label-image'), yes = document.getElementById('answer-yes');
return image && image.complete && image.naturalWidth > 0 && yes && !yes.disabled ? image.src : null;
"""
"""The address of the image on the labelling page once it can be answered, else null."""


@dataclass
class Platform:
    """The stand-in for Prolific: its study page opens the study's link with a participant's ids filled in
    (as Prolific fills {{%PROLIFIC_PID%}} and the others), and its completion URL records each code."""

    url: str
    study_link: str = ""
    completions: list[str] = field(default_factory=list)

    def study_page(self, pid: str, session_id: str) -> str:
        """The platform's page of the study for this participant and session."""
        return f"{self.url}/study?pid={pid}&session={session_id}"


def platform_handler(platform: Platform) -> type[BaseHTTPRequestHandler]:
    """The platform's two pages: /study (a link into the study) and /submissions/complete?cc=CODE."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            url = urlsplit(self.path)
            query = {name: values[0] for name, values in parse_qs(url.query).items()}
            if url.path == "/study":
                link = (
                    platform.study_link.replace("{{%PROLIFIC_PID%}}", quote(query["pid"]))
                    .replace("{{%STUDY_ID%}}", "6" * 24)
                    .replace("{{%SESSION_ID%}}", quote(query["session"]))
                )
                body = f'<!doctype html><title>Study</title><a id="open-study" href="{link}">Open study</a>'
            elif url.path == "/submissions/complete":
                platform.completions.append(query["cc"])
                body = f'<!doctype html><title>Done</title><p id="cc">{query["cc"]}</p>'
            else:
                self.send_error(404)
                return
            self.send_response(200)
            self.send_header("Content-Type", "text/html; charset=utf-8")
            self.end_headers()
            self.wfile.write(body.encode())

        def log_message(self, *args) -> None:  # quiet
            pass

    return Handler


@pytest.fixture(scope="module")
def platform() -> Iterator[Platform]:
    """The stand-in platform, served on a free 127.0.0.1 port for the module."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), platform_handler(Platform("")))
    stand_in = Platform(f"http://127.0.0.1:{server.server_address[1]}")
    server.RequestHandlerClass = platform_handler(stand_in)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield stand_in
    server.shutdown()


@dataclass
class Crowd:
    """A server with a digits competition (three pairs of four images, six gold images whose two questions
    are both "yes", gold mixed into 95% of hand-outs, a participant paused below 75% gold accuracy once they
    have answered two), its Prolific study (2 images required, up to 3, 0.05 a bonus image) and an admin's
    token."""

    server: LiveServer
    study_id: int
    competition_id: int
    admin_token: str


@pytest.fixture(scope="module")
def crowd(tmp_path_factory, platform) -> Iterator[Crowd]:
    workdir = tmp_path_factory.mktemp("crowd")
    database_url = DatabaseFactory("sqlite", workdir).migrated_url()
    with serving(database_url, workdir / "data") as server:
        with server.sessions() as db_session:
            spec = CompetitionCreate(
                name="digits",
                taxonomy="custom",
                taxonomy_source=DIGITS_FILE.read_text(),
                gold_rate=0.95,
                gold_threshold=0.75,
                gold_min_answers=2,
            )
            competition = create_competition(db_session=db_session, spec=spec)
            store = ImageStore(server.settings.blob_store)
            labelling_competition(db_session, competition, classifiers=3, images_per_pair=4, store=store)
            for image_id in add_images(db_session, competition, GOLD_IMAGES, store, seed=9000):
                sha256 = db_session.get_one(Image, image_id).sha256
                add_gold_questions(
                    db_session=db_session,
                    competition=competition,
                    image_sha256=sha256,
                    answers=[(3, True), (4, True)],
                )
            admin = users_service.create_user(
                db_session=db_session, username="lab", role=Role.admin, password=TEST_PASSWORD
            )
            token = users_service.create_api_token(db_session=db_session, user=admin, name="test")
            study, link = create_study(
                db_session=db_session,
                spec=StudyCreate(
                    competition_id=competition.id,
                    name="pilot",
                    codes=CODES,
                    completion_url=f"{platform.url}/submissions/complete?cc={{code}}",
                    required_images=2,
                    max_images=3,
                    max_participants=10,
                    consent_text=CONSENT,
                    bonus_rule="per_image",
                    bonus_rate="0.05",
                ),
                base_url=server.url,
            )
            db_session.commit()
            platform.study_link = link.url_with_parameters
            yield Crowd(server, study.id, competition.id, token)


@pytest.fixture(scope="module")
def driver(tmp_path_factory) -> Iterator:
    with chromium(tmp_path_factory.mktemp("chromium")) as browser:
        yield browser


def arrive(driver, platform: Platform, pid: str, session_id: str) -> None:
    """As a new browser: open the study from the platform's page."""
    driver.delete_all_cookies()
    driver.get(platform.study_page(pid, session_id))
    driver.find_element(By.ID, "open-study").click()
    WebDriverWait(driver, PAGE_TIMEOUT_S).until(lambda d: d.find_elements(By.ID, "start"))


def agree(driver, crowd: Crowd) -> None:
    """Press Enter on the consent page's focused button and wait for the study's labelling page."""
    # keyboard first: the browser applies autofocus at a rendering after the button is there
    WebDriverWait(driver, PAGE_TIMEOUT_S).until(
        lambda d: d.switch_to.active_element.get_attribute("id") == "start"
    )
    press(driver, Keys.ENTER)
    WebDriverWait(driver, PAGE_TIMEOUT_S).until(
        lambda d: d.current_url.endswith(f"/studies/{crowd.study_id}/label")
    )


def answer_image(driver, key: str) -> str:
    """Answer every question of the image on screen with `key`; the image's hash."""
    image = shown(driver)
    total = int(driver.find_element(By.ID, "question-count").text.rsplit(" ", 1)[1])
    for number in range(2, total + 1):
        press(driver, key)
        wait_for_text(driver, "question-count", f"Question {number} of {total}")
    press(driver, key)
    return image


def next_image(driver, before: str) -> None:
    """Wait until the page shows another image than `before`."""
    WebDriverWait(driver, PAGE_TIMEOUT_S).until(lambda d: shown(d) != before)


def labels_on(driver, before: str) -> bool:
    """Wait until the page shows another image than `before` (True) or has left the labelling page (False)."""

    def moved(d) -> str | None:
        if "/label" not in d.current_url:
            return "left"
        image = d.execute_script(LOADED_IMAGE)
        return "image" if image and image.rsplit("/", 1)[-1] != before else None

    return WebDriverWait(driver, PAGE_TIMEOUT_S).until(moved) == "image"


def back_on_the_platform(driver, platform: Platform) -> str:
    """Wait until the browser is on the platform's completion URL; the code it carries."""
    complete = f"{platform.url}/submissions/complete?cc="
    WebDriverWait(driver, PAGE_TIMEOUT_S).until(lambda d: d.current_url.startswith(complete))
    return driver.current_url.removeprefix(complete)


def test_a_study_from_the_platform_and_back_with_codes_resume_and_the_bonus_file(crowd, platform, driver):
    random.seed(36)  # the server runs in this process: which hand-outs are gold
    completer, resumer, careless = prolific_id(), prolific_id(), prolific_id()

    arrive(driver, platform, completer, "c" * 24)
    assert CONSENT.split("\n\n")[0] in driver.find_element(By.TAG_NAME, "main").text
    agree(driver, crowd)
    first = answer_image(driver, "y")
    next_image(driver, first)
    second = answer_image(
        driver, "y"
    )  # the required images: the page offers to finish, the labelling goes on
    next_image(driver, second)
    assert driver.find_element(By.ID, "finish-study").is_displayed()
    answer_image(driver, "y")  # the upper limit: back to the platform, after the code, on its own
    assert back_on_the_platform(driver, platform) == "C0MPLETE"

    arrive(driver, platform, resumer, "d" * 24)
    agree(driver, crowd)
    answer_image(driver, "y")
    arrive(driver, platform, resumer, "d" * 24)  # another browser, the same id: where they were
    main = driver.find_element(By.TAG_NAME, "main").text
    assert "Welcome back" in main and "You have answered 1 image of the 2" in main
    agree(driver, crowd)
    wait_for_text(driver, "study-images", "1")
    answer_image(driver, "y")
    finish = driver.find_element(By.ID, "finish-study")
    WebDriverWait(driver, PAGE_TIMEOUT_S).until(lambda d: finish.is_displayed())
    finish.click()
    WebDriverWait(driver, PAGE_TIMEOUT_S).until(lambda d: d.current_url.endswith("/done"))
    driver.execute_script("document.getElementById('complete')?.click()")  # or the page, a few seconds on
    assert back_on_the_platform(driver, platform) == "C0MPLETE"

    arrive(driver, platform, careless, "e" * 24)
    agree(driver, crowd)
    careless_images = 0
    while (
        careless_images < 3
    ):  # "no" where gold says "yes": paused at the first gold image (95% of hand-outs)
        careless_images += 1
        if not labels_on(driver, answer_image(driver, "n")):
            break
    assert back_on_the_platform(driver, platform) == "SCREEN3D"
    assert platform.completions == ["C0MPLETE", "C0MPLETE", "SCREEN3D"]

    admin = {"Authorization": f"Bearer {crowd.admin_token}"}
    api = crowd.server.url + "/api/v1"
    bonuses = httpx.get(f"{api}/studies/{crowd.study_id}/bonuses", headers=admin)
    assert bonuses.status_code == 200 and bonuses.text == f"{completer},0.05\n"
    rows = {
        row["participant_id"]: row
        for row in httpx.get(f"{api}/studies/{crowd.study_id}/participants", headers=admin).json()
    }
    records = httpx.get(
        f"{api}/work-records", params={"competition_id": crowd.competition_id}, headers=admin
    ).json()
    with crowd.server.sessions() as db_session:
        for pid, images, outcome, bonus in (
            (completer, 3, "completed", "0.05"),
            (resumer, 2, "completed", "0.00"),
            (careless, careless_images, "screened_out", "0.00"),
        ):
            row = rows[pid]
            assert (row["images"], row["outcome"], row["bonus"]) == (images, outcome, bonus)
            voted = db_session.execute(
                select(func.count(distinct(Question.image_id)), func.count())
                .join(Vote, Vote.question_id == Question.id)
                .join(User, User.id == Vote.user_id)
                .where(User.username == row["username"])
            ).one()
            answers = sum(record["answers"] for record in records if record["username"] == row["username"])
            assert tuple(voted) == (images, answers) == (images, 2 * images)
