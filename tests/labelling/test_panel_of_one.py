"""A panel of one (issue 25, item 13): a flag discards the image at once and cannot be withdrawn, so undo
steps past it to the answers before it, saying so; and the labelling page says that a flag decides alone
before it does."""

from selenium.webdriver.support.ui import WebDriverWait
from sqlalchemy import select

from app.competitions.schemas import CompetitionCreate
from app.competitions.service import create_competition
from app.images.store import ImageStore
from app.labelling.models import DifficultyFlag, LabelItem
from app.users import service as users_service
from app.users.models import Role
from tests.conftest import TEST_PASSWORD
from tests.labelling.factories import labelling_competition
from tests.labelling.test_browser import press, shown_image, wait_for_text
from tests.support.browser import PAGE_TIMEOUT_S, sign_in


def test_undo_steps_past_a_flag_that_discarded_the_image(client, db_session, competition, annotator_headers):
    competition.panel_size = 1
    competition.k = 3
    labelling_competition(db_session, competition, classifiers=2, images_per_pair=5)
    labelling = f"/api/v1/competitions/{competition.id}/labelling"

    def post(path: str, body: dict | None = None, status: int = 200) -> dict:
        response = client.post(f"{labelling}/{path}", json=body, headers=annotator_headers)
        assert response.status_code == status, response.text
        return response.json()

    answered = []
    for _ in range(2):
        item = post("next")["item"]
        post(
            "answers",
            {"answers": [{"question_id": q["question_id"], "answer": True} for q in item["questions"]]},
        )
        answered.append(item)
    flagged = post("next")["item"]
    assert post("flags", {"item_id": flagged["item_id"]}) == {"discarded": True}  # one flag decides alone

    undone = post("undo")  # the flag stays; the last answer before it is undone
    assert (undone["undone"], undone["flags_kept"]) == ("answer", 1)
    assert undone["item"]["item_id"] == answered[1]["item_id"]
    assert undone["question_id"] in {q["question_id"] for q in answered[1]["questions"]}
    undone = post("undo")
    assert (undone["undone"], undone["flags_kept"]) == ("answer", 1)
    assert undone["item"]["item_id"] == answered[1]["item_id"] and len(undone["item"]["questions"]) == 2
    for _ in range(2):  # back to the first image
        assert post("undo")["item"]["item_id"] == answered[0]["item_id"]
    nothing = post("undo", status=404)
    assert nothing["detail"].startswith(
        "there is nothing to undo: a flag on an image the panel has discarded"
    )
    flags = db_session.scalars(select(DifficultyFlag)).all()
    assert [flag.image_id for flag in flags] == [db_session.get(LabelItem, flagged["item_id"]).image_id]


def test_the_page_asks_before_a_flag_that_decides_alone_and_undo_passes_it(live_server, browser):
    with live_server.sessions() as db_session:
        competition = create_competition(
            db_session=db_session, spec=CompetitionCreate(name="alone", k=3, panel_size=1)
        )
        store = ImageStore(live_server.settings.blob_store)
        labelling_competition(db_session, competition, classifiers=2, images_per_pair=4, store=store)
        users_service.create_user(
            db_session=db_session, username="solo", role=Role.annotator, password=TEST_PASSWORD
        )
        db_session.commit()
        competition_id = competition.id
    sign_in(browser, live_server.url, "solo", f"/competitions/{competition_id}/label")
    rule = browser.find_element("id", "panel-rule").text
    assert "a flag of yours discards the image at once" in rule

    first_image = shown_image(browser)
    press(browser, "y")
    press(browser, "y")
    wait_for_text(browser, "status", "Saved")
    second_image = shown_image(browser)
    assert second_image != first_image

    press(browser, "d")  # asks first: nothing is flagged yet
    wait_for_text(browser, "status", "Press D again")
    assert shown_image(browser) == second_image
    with live_server.sessions() as db_session:
        assert db_session.scalars(select(DifficultyFlag)).all() == []
    press(browser, "d")
    wait_for_text(browser, "status", "discarded")
    WebDriverWait(browser, PAGE_TIMEOUT_S).until(lambda driver: shown_image(driver) != second_image)

    press(browser, "u")  # the flag stays; the answer before it is undone
    wait_for_text(browser, "status", "stays")
    assert shown_image(browser) == first_image
    with live_server.sessions() as db_session:
        assert len(db_session.scalars(select(DifficultyFlag)).all()) == 1
