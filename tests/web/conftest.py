"""The site as a visitor, an annotator and an admin see it: one live server on a voted competition and one
headless Chromium per test module (browser tests are the slowest part of the suite, so they share both)."""

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from app.db.base import utcnow
from app.leaderboard.snapshots import freeze_leaderboard
from app.studies.arrivals import Arrival, admit
from app.studies.enums import Outcome
from app.studies.schemas import StudyCreate
from app.studies.service import create_study
from app.users import service as users_service
from app.users.models import Role
from tests.conftest import TEST_PASSWORD, DatabaseFactory
from tests.leaderboard.conftest import build_voted
from tests.studies.helpers import CODES, CONSENT, arrival, prolific_id
from tests.support.browser import PAGE_TIMEOUT_S, LiveServer, chromium, serving, sign_in

LAPTOP = {"width": 1366, "height": 768, "deviceScaleFactor": 1, "mobile": False}
PHONE = {"width": 390, "height": 844, "deviceScaleFactor": 3, "mobile": True}
"""The screens pages are checked at, in CSS pixels: a common laptop, and a phone (touch, no hover)."""


@dataclass
class Site:
    """A live server with a voted digits competition (four ranked classifiers and a retired one, some
    questions still open, and a classifier still predicting), a frozen snapshot, the admin `boss`, the
    annotator `alice` (who has labelled nothing yet), and a Prolific study of the competition with one
    participant who has left (`finished_link`: their way back to it) and `study_link` for new ones."""

    server: LiveServer
    competition_id: int
    classifier_ids: list[int]
    retired_id: int
    newcomer_id: int
    snapshot_slug: str
    study_id: int
    study_link: str
    finished_link: str

    @property
    def url(self) -> str:
        return self.server.url

    def page(self, path: str) -> str:
        """The absolute URL of a path on the server."""
        return self.server.url + path


def build_site(server: LiveServer, tmp_path: Path) -> Site:
    """Fill the server's database with the Site's competition, snapshot and accounts."""
    with server.sessions() as db_session:
        voted = build_voted(db_session, server.settings, tmp_path)
        boss = users_service.create_user(
            db_session=db_session, username="boss", role=Role.admin, password=TEST_PASSWORD
        )
        users_service.create_user(
            db_session=db_session, username="alice", role=Role.annotator, password=TEST_PASSWORD
        )
        snapshot = freeze_leaderboard(
            db_session=db_session, competition=voted.competition, note="first look", user=boss
        )
        study, link = create_study(
            db_session=db_session,
            spec=StudyCreate(
                competition_id=voted.competition.id,
                name="pilot",
                codes=CODES,
                required_images=5,
                max_participants=100,
                consent_text=CONSENT,
            ),
            base_url=server.url,
        )
        finished = Arrival(prolific_id(), "a" * 24, "b" * 24)
        token = link.url.rsplit("/", 1)[1]
        participant, _ = admit(
            db_session=db_session, token=token, arrival=finished, now=utcnow(), per_minute=60
        )
        participant.outcome, participant.finished_at = Outcome.no_work_left, utcnow()
        db_session.commit()
        return Site(
            server,
            voted.competition.id,
            [c.id for c in voted.active],
            voted.retired.id,
            voted.pending.id,
            snapshot.slug,
            study.id,
            link.url.removeprefix(server.url),
            link.url.removeprefix(server.url) + arrival(finished.participant_id),
        )


@pytest.fixture(scope="module")
def sqlite_factory(tmp_path_factory) -> DatabaseFactory:
    """Migrated SQLite databases, for browser modules whose pages do not depend on the backend."""
    return DatabaseFactory("sqlite", tmp_path_factory.mktemp("sqlite"))


@pytest.fixture(scope="module")
def site(sqlite_factory: DatabaseFactory, tmp_path_factory) -> Iterator[Site]:
    """The module's Site, served on SQLite."""
    workdir = tmp_path_factory.mktemp("site")
    with serving(sqlite_factory.migrated_url(), workdir / "data") as server:
        yield build_site(server, workdir)


@pytest.fixture(scope="module")
def driver(tmp_path_factory) -> Iterator:
    """The module's headless Chromium, recording the URLs its pages request."""
    with chromium(tmp_path_factory.mktemp("chromium"), record_requests=True) as browser:
        yield browser


def use_screen(driver, screen: dict) -> None:
    """Emulate this screen; a phone gets a touch screen too (`pointer: coarse` and `hover: none` match)."""
    driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", screen)
    driver.execute_cdp_cmd(
        "Emulation.setTouchEmulationEnabled", {"enabled": screen["mobile"], "maxTouchPoints": 5}
    )


PARTICIPANT = "participant"
"""act_as's name for a study participant, signed in through the study's link."""


def act_as(driver, site: Site, username: str | None, next_path: str = "/") -> None:
    """Start a fresh browser session: signed in as `username`, as a new participant of the site's study
    (PARTICIPANT), or anonymous for None."""
    driver.delete_all_cookies()
    if username == PARTICIPANT:
        join_study(driver, site.page(site.study_link + arrival(prolific_id())))
    elif username is not None:
        sign_in(driver, site.url, username, next_path)


def join_study(driver, link: str) -> None:
    """Open a study's link and agree (or go on), as a participant does, and wait for its labelling page."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions
    from selenium.webdriver.support.ui import WebDriverWait

    driver.get(link)
    driver.find_element(By.ID, "start").click()
    WebDriverWait(driver, PAGE_TIMEOUT_S).until(expected_conditions.url_contains("/studies/"))
