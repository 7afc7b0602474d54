"""A reselection under active sampling (issue 34): a competition whose every selected image is labelled is
settled; a larger k through the API queues select jobs, and the worker's last one reruns the policy, so the
competition is no longer settled and the new images are handed out. The dry run of a smaller k says how many
of the votes it would drop are a crowd-study participant's work (their pay is counted from their votes)."""

import httpx
import numpy as np
from sqlalchemy import select

from app.competitions.models import Competition, Sampling
from app.competitions.schemas import CompetitionCreate
from app.competitions.service import create_competition
from app.db.base import utcnow
from app.labelling.models import ActivePolicy, LabelItem
from app.studies.models import StudyParticipant
from app.studies.schemas import StudyCreate
from app.studies.service import create_study
from app.users import service as users_service
from app.users.models import Role
from tests.jobs.test_reselection import work
from tests.leaderboard.scenario import DIGITS, corpus, noisy_predictions, register
from tests.studies.helpers import CODES, CONSENT
from tests.support.http import HTTP_TIMEOUT_S

IMAGES = 40


def label_everything(base_url: str, competition_id: int, token: str) -> str:
    """The annotator answers yes to every question of every image handed to them (each pair's images then
    all come out Case I: no classifier ahead); the status they were last told."""
    labelling = f"/api/v1/competitions/{competition_id}/labelling"
    with httpx.Client(
        base_url=base_url, headers={"Authorization": f"Bearer {token}"}, timeout=HTTP_TIMEOUT_S
    ) as http:
        while (reply := http.post(f"{labelling}/next").json())["status"] == "item":
            answers = [{"question_id": q["question_id"], "answer": True} for q in reply["item"]["questions"]]
            assert http.post(f"{labelling}/answers", json={"answers": answers}).status_code == 200
        return reply["status"]


def next_status(base_url: str, competition_id: int, token: str) -> str:
    """What the labelling queue tells the annotator now."""
    url = f"{base_url}/api/v1/competitions/{competition_id}/labelling/next"
    return httpx.post(url, headers={"Authorization": f"Bearer {token}"}, timeout=HTTP_TIMEOUT_S).json()[
        "status"
    ]


def test_a_reselection_under_active_sampling_unsettles_the_competition_and_counts_study_votes(
    live_service, admin_client, tmp_path
):
    with live_service.session() as session:
        spec = CompetitionCreate(
            name="active",
            taxonomy="custom",
            taxonomy_source=DIGITS,
            k=2,
            confidence_threshold=0.0,
            max_per_label=1000,
            panel_size=1,
            sampling=Sampling.active,
        )
        competition = create_competition(db_session=session, spec=spec)
        hashes = corpus(session, live_service.settings, competition, IMAGES)
        truth = np.random.default_rng(5).integers(0, 10, IMAGES)
        for seed, accuracy in enumerate((0.8, 0.5, 0.2)):
            labels = noisy_predictions(truth, accuracy, seed)
            register(session, live_service.settings, competition, tmp_path, f"c{seed}", hashes, labels)
        annotator = users_service.create_user(
            db_session=session, username="participant", role=Role.annotator, password="long enough"
        )
        token = users_service.create_api_token(db_session=session, user=annotator, name="test")
        study, _ = create_study(
            db_session=session,
            spec=StudyCreate(
                competition_id=competition.id,
                name="pilot",
                codes=CODES,
                required_images=1,
                max_participants=10,
                consent_text=CONSENT,
            ),
            base_url=live_service.url,
        )
        session.add(
            StudyParticipant(
                study_id=study.id,
                user_id=annotator.id,
                platform_study_id="s" * 24,
                session_id="t" * 24,
                arrived_at=utcnow(),
            )
        )
        session.commit()
        competition_id = competition.id
    assert work(live_service, tmp_path) == 3
    assert label_everything(live_service.url, competition_id, token) == "settled"

    path = f"/api/v1/competitions/{competition_id}"
    preview = admin_client.patch(path, json={"k": 1, "dry_run": True}).json()["reselection"]
    assert preview["votes_dropped"] > 0 and preview["study_votes_dropped"] == preview["votes_dropped"]
    refused = admin_client.patch(path, json={"k": 1})
    assert refused.status_code == 409
    assert (
        f"{preview['votes_dropped']} of the dropped votes are crowd-study participants' work"
        in (refused.json()["detail"])
    )

    with live_service.session() as session:
        before = session.scalar(
            select(ActivePolicy.refreshed_at).where(ActivePolicy.competition_id == competition_id)
        )
    grown = admin_client.patch(path, json={"k": 6})
    assert grown.status_code == 200, grown.text
    assert grown.json()["reselection"]["votes_dropped"] == 0
    assert work(live_service, tmp_path) == 3
    with live_service.session() as session:
        assert not session.get_one(Competition, competition_id).settled
        policy = session.get_one(ActivePolicy, competition_id)
        assert policy.refreshed_at > before and policy.informative_pairs
        priorities = session.scalars(
            select(LabelItem.priority).where(LabelItem.competition_id == competition_id, LabelItem.needed > 0)
        ).all()
    assert priorities and min(priorities) > 0
    assert admin_client.get(f"{path}/leaderboard").json()["active"]["settled"] is False
    assert next_status(live_service.url, competition_id, token) == "item"
