"""The issue's "done when", in headless Chromium on a live server: an admin adds a fourth classifier to a
running three-classifier competition from the admin page (a timm architecture and a weights file), a worker
predicts it and selects its three new pairs (Algorithm 2), annotators vote through the labelling API, and
the admin watches it enter the leaderboard."""

import httpx
import numpy as np
import safetensors.torch
import timm
import torch
from selenium.common.exceptions import StaleElementReferenceException
from selenium.webdriver.common.by import By
from selenium.webdriver.support import expected_conditions
from selenium.webdriver.support.ui import Select, WebDriverWait
from sqlalchemy import select

from app.classifiers.enums import ClassifierStatus
from app.classifiers.models import Classifier
from app.labelling.models import PairSubset
from app.users import service as users_service
from app.users.models import Role
from tests.conftest import TEST_PASSWORD
from tests.leaderboard.scenario import (
    N_CLASSES,
    corpus,
    digits_competition,
    noisy_predictions,
    register,
    run_select_jobs,
)
from tests.support.browser import PAGE_TIMEOUT_S, sign_in
from tests.support.http import HTTP_TIMEOUT_S
from workers.worker import WorkerOptions, run_worker

N_IMAGES = 40
VOTERS = 3


def vote_over_http(
    base_url: str, competition_id: int, tokens: list[str], truth: np.ndarray, hashes, names
) -> int:
    """Every annotator labels through the REST API until nothing is left for them, answering truthfully;
    the number of answers sent."""
    ordinal_of = {sha256: ordinal for ordinal, sha256 in enumerate(hashes)}
    index_of = {name: index for index, name in enumerate(names)}
    sent = 0
    labelling = f"/api/v1/competitions/{competition_id}/labelling"
    for token in tokens:
        with httpx.Client(
            base_url=base_url, headers={"Authorization": f"Bearer {token}"}, timeout=HTTP_TIMEOUT_S
        ) as http:
            while (item := http.post(f"{labelling}/next").json()["item"]) is not None:
                ordinal = ordinal_of[item["image_url"].rsplit("/", 1)[-1]]
                answers = [
                    {
                        "question_id": q["question_id"],
                        "answer": bool(index_of[q["class_name"]] == truth[ordinal]),
                    }
                    for q in item["questions"]
                ]
                assert http.post(f"{labelling}/answers", json={"answers": answers}).status_code == 200
                sent += len(answers)
    return sent


def standing_of(base_url: str, competition_id: int, name: str) -> dict | None:
    """A classifier's row of the leaderboard API, or None while it is not ranked."""
    board = httpx.get(
        f"{base_url}/api/v1/competitions/{competition_id}/leaderboard", timeout=HTTP_TIMEOUT_S
    ).json()
    return next((row for row in board["classifiers"] if row["name"] == name), None)


def test_an_admin_adds_a_fourth_classifier_and_watches_it_enter_the_leaderboard(
    live_server, browser, tmp_path
):
    settings = live_server.settings
    truth = np.random.default_rng(11).integers(0, N_CLASSES, N_IMAGES)
    with live_server.sessions() as db_session:
        competition = digits_competition(db_session, name="running", k=4)
        hashes = corpus(db_session, settings, competition, N_IMAGES)
        for seed, (name, accuracy) in enumerate((("first", 0.8), ("second", 0.6), ("third", 0.4))):
            labels = noisy_predictions(truth, accuracy, seed)
            register(
                db_session, settings, competition, tmp_path, name, hashes, labels, reported_accuracy=70 + seed
            )
        run_select_jobs(db_session, settings)
        users_service.create_user(
            db_session=db_session, username="boss", role=Role.admin, password=TEST_PASSWORD
        )
        worker = users_service.create_user(
            db_session=db_session, username="gpu", role=Role.worker, password=None
        )
        worker_token = users_service.create_api_token(db_session=db_session, user=worker, name="test")
        voter_tokens = []
        for index in range(VOTERS):
            voter = users_service.create_user(
                db_session=db_session, username=f"voter{index}", role=Role.annotator, password=TEST_PASSWORD
            )
            voter_tokens.append(
                users_service.create_api_token(db_session=db_session, user=voter, name="test")
            )
        db_session.commit()
        competition_id, names = competition.id, competition.class_names
    assert vote_over_http(live_server.url, competition_id, voter_tokens, truth, hashes, names) > 0
    assert [
        standing_of(live_server.url, competition_id, n)["labelled_images"] > 0 for n in ("first", "third")
    ] == [
        True,
        True,
    ]

    torch.manual_seed(0)
    weights = tmp_path / "fourth.safetensors"
    safetensors.torch.save_file(
        timm.create_model("test_resnet", num_classes=N_CLASSES).state_dict(), str(weights)
    )
    sign_in(browser, live_server.url, "boss", f"/admin/competitions/{competition_id}")
    # the live rows are rebuilt every few seconds: an element found just before may be gone when read
    wait = WebDriverWait(browser, PAGE_TIMEOUT_S, ignored_exceptions=[StaleElementReferenceException])
    form = browser.find_element(By.ID, "add-classifier")
    form.find_element(By.NAME, "name").send_keys("fourth")
    Select(form.find_element(By.NAME, "source")).select_by_value("timm-weights")
    form.find_element(By.NAME, "architecture").send_keys("test_resnet")
    form.find_element(By.NAME, "file").send_keys(str(weights))
    form.find_element(By.NAME, "reported_accuracy").send_keys("75.5")
    assert not form.find_element(By.NAME, "pretrained_tag").is_displayed()
    form.find_element(By.CSS_SELECTOR, "button[type=submit]").click()
    wait.until(
        expected_conditions.presence_of_element_located((By.CSS_SELECTOR, 'tr[data-classifier="fourth"]'))
    )
    row = browser.find_element(By.CSS_SELECTOR, 'tr[data-classifier="fourth"]')
    assert "predicting" in row.text and "timm-weights" in row.text
    assert len(browser.find_elements(By.CSS_SELECTOR, "#standing-rows tr")) == 3
    assert standing_of(live_server.url, competition_id, "fourth") is None

    finished = run_worker(
        url=live_server.url,
        token=worker_token,
        options=WorkerOptions(device="cpu", batch_size=16, loader_workers=0, cache_dir=tmp_path / "cache"),
        exit_when_idle=True,
        report=lambda *_: None,
    )
    assert finished == 1 + 3  # one predict shard, then its three new pairs (Algorithm 2)
    with live_server.sessions() as db_session:
        fourth = db_session.scalar(select(Classifier).where(Classifier.name == "fourth"))
        assert fourth.status == ClassifierStatus.ready and fourth.reported_accuracy == 75.5
        pairs = db_session.execute(select(PairSubset.classifier_a_id, PairSubset.classifier_b_id)).all()
        assert len(pairs) == 6 and sum(fourth.id in pair for pair in pairs) == 3

    wait.until(lambda driver: len(driver.find_elements(By.CSS_SELECTOR, "#standing-rows tr")) == 4)
    entered = standing_of(live_server.url, competition_id, "fourth")
    assert entered is not None and entered["provisional"]
    assert vote_over_http(live_server.url, competition_id, voter_tokens, truth, hashes, names) > 0
    voted = standing_of(live_server.url, competition_id, "fourth")
    assert voted["labelled_images"] > entered["labelled_images"]
    wait.until(
        lambda driver: (
            driver.find_element(By.CSS_SELECTOR, f'#standing-rows tr[data-classifier-id="{fourth.id}"]')
            .find_elements(By.TAG_NAME, "td")[4]
            .text
            == str(voted["labelled_images"])
        )
    )

    browser.get(f"{live_server.url}/competitions/{competition_id}/leaderboard")
    rows = browser.find_elements(By.CSS_SELECTOR, "#leaderboard-table tbody tr")
    assert len(rows) == 4
    fourth_row = browser.find_element(
        By.CSS_SELECTOR, f'#leaderboard-table tr[data-classifier-id="{fourth.id}"]'
    )
    assert fourth_row.find_element(By.CSS_SELECTOR, "td.rank").text.startswith(str(voted["mad_rank"]))
    assert "75.50" in fourth_row.text
    assert len(browser.find_elements(By.CSS_SELECTOR, "#heatmap a")) == 4 * 3
