"""Quality control that acts: a careless annotator is paused by their gold accuracy, told why, and an admin
resumes them or excludes their votes; streaks of fast answers and long runs of one answer are flagged."""

import random
import re

from sqlalchemy import select

from app.images.models import Image
from app.labelling.models import QualityFlag, Question
from app.users.models import Role, User
from tests.conftest import bearer, make_user
from tests.labelling.factories import add_images, labelling_competition, let_time_pass, sign_in

GOLD_ANSWERS = [{"class_index": 3, "answer": True}, {"class_index": 4, "answer": False}]
"""Each gold image's two questions: always "yes" is right once in two."""


def add_gold(client, db_session, competition, admin_headers, count: int) -> dict[int, bool]:
    """count gold images with GOLD_ANSWERS made through the API; {question id: known answer}."""
    image_ids = add_images(db_session, competition, count, seed=700)
    db_session.commit()
    known = {}
    for sha256 in db_session.scalars(select(Image.sha256).where(Image.id.in_(image_ids))):
        created = client.post(
            f"/api/v1/competitions/{competition.id}/labelling/gold",
            json={"image_sha256": sha256, "questions": GOLD_ANSWERS},
            headers=admin_headers,
        )
        assert created.status_code == 201, created.text
        known.update({gold["question_id"]: gold["answer"] for gold in created.json()})
    return known


def set_quality(client, competition, admin_headers, **settings) -> None:
    """Change the competition's quality control through the API."""
    changed = client.patch(f"/api/v1/competitions/{competition.id}", json=settings, headers=admin_headers)
    assert changed.status_code == 200, changed.text
    assert {key: changed.json()[key] for key in settings} == settings


def flags(client, competition, admin_headers) -> list[dict]:
    """The competition's quality flags as an admin reads them."""
    listed = client.get(
        f"/api/v1/competitions/{competition.id}/labelling/quality-flags", headers=admin_headers
    )
    assert listed.status_code == 200, listed.text
    return listed.json()


def test_quality_careless_annotator_is_paused_before_their_50th_answer_and_told_why(
    client, db_session, competition, admin_headers
):
    random.seed(19)
    competition.k = 6
    competition.gold_rate = 0.5
    labelling_competition(db_session, competition, classifiers=4, images_per_pair=6)  # 36 images
    known = add_gold(client, db_session, competition, admin_headers, 10)
    set_quality(client, competition, admin_headers, gold_threshold=0.8, gold_min_answers=4)
    labelling = f"/api/v1/competitions/{competition.id}/labelling"
    careless, careful = (make_user(db_session, name, Role.annotator) for name in ("careless", "careful"))
    headers = {careless.id: bearer(db_session, careless), careful.id: bearer(db_session, careful)}
    answered = {careless.id: 0, careful.id: 0}
    paused_with = None
    for _ in range(60):
        for user in (careless, careful):
            following = client.post(f"{labelling}/next", headers=headers[user.id])
            if following.status_code == 403:
                continue
            assert following.status_code == 200, following.text
            item = following.json()["item"]
            if item is None:
                continue
            let_time_pass(db_session, 6)
            answers = [  # careless: always "yes"; careful: right on gold, elsewhere "yes" then "no"
                {"question_id": q["question_id"], "answer": known.get(q["question_id"], i == 0), "seconds": 3}
                if user is careful
                else {"question_id": q["question_id"], "answer": True, "seconds": 3}
                for i, q in enumerate(item["questions"])
            ]
            sent = client.post(f"{labelling}/answers", json={"answers": answers}, headers=headers[user.id])
            assert sent.status_code == 200, sent.text
            answered[user.id] += sent.json()["recorded"]
            if sent.json()["paused"]:
                assert user is careless and paused_with is None
                paused_with = sent.json()["paused"]

    assert paused_with is not None and answered[careless.id] < 50
    assert re.fullmatch(r"You are paused in this competition: \d+ of your last \d+ answers .*", paused_with)
    refused = client.post(f"{labelling}/next", headers=headers[careless.id])
    assert refused.status_code == 403 and refused.json()["detail"] == paused_with
    german = client.post(f"{labelling}/next", headers={**headers[careless.id], "Accept-Language": "de"})
    assert re.fullmatch(  # the stored reason too, in the annotator's language
        r"Sie sind in diesem Wettbewerb pausiert: \d+ Ihrer letzten \d+ Antworten auf Kontrollfragen .*"
        r"Ein Admin wird Ihre Antworten prüfen\.",
        german.json()["detail"],
    )
    assert answered[careful.id] > answered[careless.id]
    raised = flags(client, competition, admin_headers)
    gold_flags = [flag for flag in raised if flag["kind"] == "gold"]
    assert [(flag["username"], flag["decision"]) for flag in gold_flags] == [("careless", None)]
    assert "careful" not in {flag["username"] for flag in raised}

    # the labelling page says why
    sign_in(client, "careless")
    page = client.get(f"/competitions/{competition.id}/label").text
    assert 'data-paused="You are paused in this competition:' in page
    spanish = client.get(f"/competitions/{competition.id}/label", headers={"Accept-Language": "es"}).text
    assert 'data-paused="Estás en pausa en esta competición: ' in spanish and "de tus últimas" in spanish

    # resumed: the pause ends and their gold accuracy is measured afresh
    decided = client.post(
        f"{labelling}/quality-flags/{gold_flags[0]['id']}/decision",
        json={"decision": "resumed"},
        headers=admin_headers,
    )
    assert decided.status_code == 200 and decided.json()["decision"] == "resumed"
    assert "data-paused" not in client.get(f"/competitions/{competition.id}/label").text
    assert client.post(f"{labelling}/next", headers=headers[careless.id]).status_code == 200
    again = client.post(
        f"{labelling}/quality-flags/{gold_flags[0]['id']}/decision",
        json={"decision": "excluded"},
        headers=admin_headers,
    )
    assert again.status_code == 409


def answer_items(db_session, competition, user, count: int, answer, seconds) -> None:
    """The annotator answers `count` images: question i of image n gets answer(n, i), seconds(n)."""
    from app.labelling.annotating.answers import submit_answers
    from app.labelling.annotating.queue import next_item
    from app.labelling.types import Answer

    for number in range(count):
        item = next_item(db_session=db_session, competition=competition, user=user).item
        assert item is not None
        let_time_pass(db_session, seconds(number) * len(item.questions))
        given = [
            Answer(q.question_id, answer(number, i), seconds(number)) for i, q in enumerate(item.questions)
        ]
        submit_answers(db_session=db_session, competition=competition, user=user, answers=given)
        db_session.commit()


def test_quality_fast_streaks_and_long_runs_are_flagged_and_excluding_re_decides(
    client, db_session, competition, admin_headers
):
    competition.k = 10
    labelling_competition(db_session, competition, classifiers=4, images_per_pair=10)  # 60 images
    hasty = make_user(db_session, "hasty", Role.annotator)
    # 15 images (30 answers) at 6 s alternating yes/no, then 5 images (10 answers) at 0.5 s: a fast streak
    answer_items(db_session, competition, hasty, 20, lambda n, i: i == 0, lambda n: 6.0 if n < 15 else 0.5)
    raised = flags(client, competition, admin_headers)
    assert [(flag["kind"], flag["username"]) for flag in raised] == [("fast", "hasty")]
    assert (
        "10 answers in a row took at most 0.5 s each; this annotator's median is 6.0 s" in raised[0]["detail"]
    )
    # the streak goes on: no second flag for the same answers, a new one only after ten more fast ones
    answer_items(db_session, competition, hasty, 4, lambda n, i: i == 0, lambda n: 0.5)
    assert len(flags(client, competition, admin_headers)) == 1

    monotone = make_user(db_session, "monotone", Role.annotator)
    answer_items(db_session, competition, monotone, 13, lambda n, i: False, lambda n: 4.0)  # 26 "no"
    run_flags = [flag for flag in flags(client, competition, admin_headers) if flag["kind"] == "run"]
    assert [(flag["username"], flag["detail"]) for flag in run_flags] == [
        ("monotone", '25 answers in a row were all "no"')
    ]
    assert db_session.get(User, monotone.id).is_active  # flagged for review, not paused
    labelling = f"/api/v1/competitions/{competition.id}/labelling"
    assert client.post(f"{labelling}/next", headers=bearer(db_session, monotone)).status_code == 200

    sign_in(client, "admin")
    page = client.get(f"/admin/competitions/{competition.id}/quality").text
    assert page.count('value="resumed"') == page.count('value="excluded"') == 2
    assert "run of one answer" in page and "fast answers" in page and "hasty" in page

    voted = select(Question.no_votes).where(Question.competition_id == competition.id)
    no_votes_before = sum(db_session.scalars(voted))
    decided = client.post(
        f"{labelling}/quality-flags/{run_flags[0]['id']}/decision",
        json={"decision": "excluded"},
        headers=admin_headers,
    )
    assert decided.status_code == 200, decided.text
    db_session.expire_all()
    assert db_session.get(User, monotone.id).votes_excluded
    assert sum(db_session.scalars(voted)) == no_votes_before - 26
    flag = db_session.get(QualityFlag, run_flags[0]["id"])
    assert flag.decision == "excluded" and flag.decided_at is not None


def test_quality_fast_answers_are_timed_by_the_servers_clock(client, db_session, competition, admin_headers):
    """Issue 25, item 3: leaving `seconds` out, or claiming more than passed, does not hide a fast streak."""
    competition.k = 10
    labelling_competition(db_session, competition, classifiers=4, images_per_pair=10)  # 60 images
    labelling = f"/api/v1/competitions/{competition.id}/labelling"
    quick = make_user(db_session, "quick", Role.annotator)
    headers = bearer(db_session, quick)

    def answer_one(looked: float, claimed: dict) -> None:
        item = client.post(f"{labelling}/next", headers=headers).json()["item"]
        let_time_pass(db_session, looked)
        answers = [
            {"question_id": q["question_id"], "answer": i == 0, **claimed}
            for i, q in enumerate(item["questions"])
        ]
        assert (
            client.post(f"{labelling}/answers", json={"answers": answers}, headers=headers).status_code == 200
        )

    for _ in range(20):  # 40 answers at 15 s each by the server's clock, no seconds sent
        answer_one(30.0, {})
    assert flags(client, competition, admin_headers) == []
    for number in range(5):  # 10 answers at once: some sent without seconds, some claiming 15 s
        answer_one(0.0, {} if number % 2 else {"seconds": 15.0})
    raised = flags(client, competition, admin_headers)
    assert [(flag["kind"], flag["username"]) for flag in raised] == [("fast", "quick")]
    assert re.search(r"this annotator's median is 15\.\d s", raised[0]["detail"])


def test_quality_settings_are_validated_and_flags_are_for_admins(
    client, db_session, competition, admin_headers, annotator_headers
):
    base = {"name": "strict", "taxonomy": "imagenet-1k"}
    for bad in ({"gold_threshold": 1.5}, {"gold_threshold": -0.1}, {"gold_min_answers": 0}):
        refused = client.post("/api/v1/competitions", json={**base, **bad}, headers=admin_headers)
        assert refused.status_code == 422, bad
    created = client.post(
        "/api/v1/competitions",
        json={**base, "gold_threshold": 0.75, "gold_min_answers": 8},
        headers=admin_headers,
    )
    assert created.status_code == 201, created.text
    assert (created.json()["gold_threshold"], created.json()["gold_min_answers"]) == (0.75, 8)
    path = f"/api/v1/competitions/{competition.id}"
    assert client.patch(path, json={"gold_min_answers": 0}, headers=admin_headers).status_code == 422
    assert client.get(f"{path}/labelling/quality-flags", headers=annotator_headers).status_code == 403
    missing = client.post(
        f"{path}/labelling/quality-flags/999999/decision", json={"decision": "resumed"}, headers=admin_headers
    )
    assert missing.status_code == 404
    wrong = client.post(
        f"{path}/labelling/quality-flags/999999/decision", json={"decision": "maybe"}, headers=admin_headers
    )
    assert wrong.status_code == 422
