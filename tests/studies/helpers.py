"""Crowd studies in tests: a study made through the API, and participants arriving through its link as a
platform sends them (their ids in the query), consenting through the page's form."""

import re
import secrets
from urllib.parse import urlencode, urlsplit

from fastapi.testclient import TestClient

CODES = {
    "completed": "C0MPLETE",
    "no_work_left": "N0W0RK",
    "screened_out": "SCREEN3D",
    "timed_out": "T1MEOUT",
}
CONSENT = "You agree that your answers are published without your name.\n\nYou may stop at any time."


def prolific_id() -> str:
    """A new id in Prolific's form (24 hexadecimal digits)."""
    return secrets.token_hex(12)


def make_study(client: TestClient, headers: dict[str, str], competition_id: int, **settings) -> dict:
    """A study of the competition made through the API (201), with these settings over small defaults; its
    JSON, with the link."""
    body = {
        "competition_id": competition_id,
        "name": "pilot",
        "codes": CODES,
        "required_images": 2,
        "max_participants": 10,
        "consent_text": CONSENT,
        **settings,
    }
    made = client.post("/api/v1/studies", json=body, headers=headers)
    assert made.status_code == 201, made.text
    return made.json()


def link_path(study: dict) -> str:
    """The study link's path (/join/TOKEN)."""
    return urlsplit(study["url"]).path


def arrival(pid: str | None, study_id: str = "", session_id: str = "") -> str:
    """The query a platform adds to the link: PROLIFIC_PID, STUDY_ID, SESSION_ID (None leaves the id out)."""
    ids = {"STUDY_ID": study_id or "a" * 24, "SESSION_ID": session_id or secrets.token_hex(12)}
    return "?" + urlencode({"PROLIFIC_PID": pid, **ids} if pid is not None else ids)


def csrf_of(page: str) -> str:
    """The CSRF token of a page's form."""
    return re.search(r'name="csrf_token" value="([^"]+)"', page).group(1)


def join(client: TestClient, study: dict, pid: str, session_id: str = ""):
    """Arrive through the link with this id and agree: the consent page's answer and the form's; the client is
    then signed in as the participant (when admitted)."""
    url = link_path(study) + arrival(pid, session_id=session_id)
    page = client.get(url)
    if page.status_code != 200:
        return page, None
    return page, client.post(url, data={"csrf_token": csrf_of(page.text)}, follow_redirects=False)


def page_csrf(client: TestClient) -> dict[str, str]:
    """The X-CSRF-Token header of the client's browser session (read from a page)."""
    return {"X-CSRF-Token": re.search(r'name="csrf-token" content="([^"]+)"', client.get("/").text).group(1)}


class Participant:
    """A participant's browser: the study's labelling API and their progress, through their session cookie."""

    def __init__(self, client: TestClient, study: dict):
        self.client, self.study = client, study
        self.headers = page_csrf(client)
        self.labelling = f"/api/v1/competitions/{study['competition_id']}/labelling"

    def label(self, answer: bool = True, seconds: float = 3, looking=None) -> dict | None:
        """Take the next image and answer both its questions, each claiming `seconds`, once `looking()` (the
        time spent on it) has passed; the answer's JSON (None: nothing handed out)."""
        taken = self.client.post(f"{self.labelling}/next", headers=self.headers)
        assert taken.status_code == 200, taken.text
        item = taken.json()["item"]
        if item is None:
            return None
        if looking is not None:
            looking()
        answers = [
            {"question_id": q["question_id"], "answer": answer, "seconds": 3} for q in item["questions"]
        ]
        sent = self.client.post(f"{self.labelling}/answers", json={"answers": answers}, headers=self.headers)
        assert sent.status_code == 200, sent.text
        return sent.json()

    def me(self) -> dict:
        """Their progress in the study."""
        read = self.client.get(f"/api/v1/studies/{self.study['id']}/me")
        assert read.status_code == 200, read.text
        return read.json()

    def finish(self):
        """Ask to leave the study; the response."""
        return self.client.post(f"/api/v1/studies/{self.study['id']}/me/finish", headers=self.headers)

    def account(self) -> dict:
        """The account they are signed in to."""
        return self.client.get("/api/v1/me").json()


def joined(client: TestClient, study: dict, pid: str, session_id: str = "") -> Participant:
    """The participant with this id, arrived and agreed (their browser signed in)."""
    page, agreed = join(client, study, pid, session_id)
    assert page.status_code == 200 and agreed is not None, page.text
    assert agreed.status_code == 303, agreed.text
    assert agreed.headers["location"] == f"/studies/{study['id']}/label"
    return Participant(client, study)
