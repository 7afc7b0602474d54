"""GET /metrics (issue 16, item 7): Prometheus text for the bearer of MAD_METRICS_TOKEN only, requests per
route template, votes recorded, open questions, jobs by state and the workers' leases and heartbeats."""

import pytest
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families

from app.competitions.schemas import CompetitionCreate
from app.competitions.service import create_competition
from app.jobs.service import enqueue_selections
from app.main import create_app
from app.users.models import Role
from tests.conftest import bearer, make_user
from tests.labelling.factories import labelling_competition
from tests.support.routes import endpoints

TOKEN = "metrics-" + "m" * 32


@pytest.fixture
def settings(settings):
    """The test settings with a metrics token."""
    return settings.model_copy(update={"metrics_token": TOKEN})


def scrape(client) -> dict[tuple[str, tuple], float]:
    """Every sample of /metrics by (name, sorted labels)."""
    response = client.get("/metrics", headers={"Authorization": f"Bearer {TOKEN}"})
    assert response.status_code == 200 and response.headers["content-type"].startswith("text/plain")
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(response.text)
        for sample in family.samples
    }


def test_metrics_need_the_metrics_token_and_are_off_without_one(client, settings, admin_headers):
    assert client.get("/metrics").status_code == 401
    assert client.get("/metrics", headers=admin_headers).status_code == 401  # an admin token is not it
    assert client.get("/metrics", headers={"Authorization": f"Bearer {TOKEN}x"}).status_code == 401
    with TestClient(create_app(settings.model_copy(update={"metrics_token": ""}))) as without:
        assert without.get("/metrics", headers={"Authorization": "Bearer "}).status_code == 404


def test_metrics_count_routes_votes_questions_jobs_and_leases(app, client, db_session):
    competition = create_competition(
        db_session=db_session, spec=CompetitionCreate(name="metrics", k=2, panel_size=1)
    )
    labelling_competition(db_session, competition, classifiers=2, images_per_pair=3)
    enqueue_selections(db_session=db_session, competition_id=competition.id, max_attempts=3)
    annotator = bearer(db_session, make_user(db_session, "voter", Role.annotator))
    worker = bearer(db_session, make_user(db_session, "gpu", Role.worker))
    before = scrape(client)
    open_questions = ("mad_open_questions", (("competition", str(competition.id)),))
    assert before[open_questions] == 4  # 2 selected images (the reserve is not asked), 2 questions each
    assert before[("mad_jobs", (("kind", "select"), ("state", "queued")))] == 1
    assert before[("mad_leasing_workers", ())] == 0

    assert client.get(f"/api/v1/competitions/{competition.id}/leaderboard").status_code == 200
    prefix = f"/api/v1/competitions/{competition.id}/labelling"
    item = client.post(f"{prefix}/next", headers=annotator).json()["item"]
    answers = [{"question_id": question["question_id"], "answer": True} for question in item["questions"]]
    assert client.post(f"{prefix}/answers", headers=annotator, json={"answers": answers}).status_code == 200
    assert len(client.post("/api/v1/jobs/claim", headers=worker, json={"worker": "w"}).json()["jobs"]) == 1

    after = scrape(client)
    votes = ("mad_votes_recorded_total", ())
    assert after[votes] - before.get(votes, 0) == len(answers)
    assert after[open_questions] == 4 - len(answers)
    assert after[("mad_jobs", (("kind", "select"), ("state", "running")))] == 1
    assert after[("mad_leasing_workers", ())] == 1 and after[("mad_newest_heartbeat_age_seconds", ())] >= 0
    leaderboard = (
        "mad_http_requests_total",
        (
            ("method", "GET"),
            ("route", "/api/v1/competitions/{competition_id}/leaderboard"),
            ("status", "200"),
        ),
    )
    assert after[leaderboard] - before.get(leaderboard, 0) == 1
    routes = {dict(labels).get("route") for name, labels in after if name == "mad_http_requests_total"}
    templates = {endpoint.path_template for endpoint in endpoints(app)} | {"/static", "unmatched"}
    assert routes <= templates  # route templates, never raw paths
