"""The labelling REST API over HTTP: the annotator's round trip, typed errors, admin routes, OpenAPI."""

import json
import re

import pytest
from sqlalchemy import select

from app.core.taxonomy_sources import imagenet_1k
from app.images.models import Image
from app.labelling.models import Assignment, AssignmentStatus, DifficultyFlag, LabelItem, Question, Vote
from app.users.models import Role
from tests.conftest import TEST_PASSWORD, bearer, make_user
from tests.labelling.factories import add_images, labelling_competition, let_time_pass


@pytest.fixture
def labelling(db_session, competition):
    """A competition of three classifiers whose pairs each selected two images (one reserve each)."""
    competition.k = 2
    labelling_competition(db_session, competition, classifiers=3, images_per_pair=3)
    return f"/api/v1/competitions/{competition.id}/labelling"


def test_an_annotator_labels_through_the_api(client, labelling, annotator_headers, competition):
    response = client.post(f"{labelling}/next", headers=annotator_headers)
    assert response.status_code == 200
    body = response.json()
    assert body["status"] == "item"
    item = body["item"]
    assert item["image_url"].startswith("/images/") and item["width"] == 64
    assert len(item["questions"]) == 2
    classes = {c["name"]: c for c in client.get(f"/api/v1/competitions/{competition.id}/classes").json()}
    for question in item["questions"]:
        name = question["class_name"]
        assert name in competition.class_names
        assert re.fullmatch(rf"Does this image contain an? {re.escape(name)}\?", question["text"])
        gloss = imagenet_1k().definition(classes[name]["index"])  # what the class means, one key away
        assert question["definition"] == classes[name]["definition"] == gloss and gloss

    answers = [{"question_id": q["question_id"], "answer": True, "seconds": 1.25} for q in item["questions"]]
    submitted = client.post(f"{labelling}/answers", json={"answers": answers}, headers=annotator_headers)
    assert submitted.status_code == 200
    assert submitted.json() == {
        "recorded": 2,
        "already_decided": [],
        "item_done": True,
        "annotators_needed": 2,  # a panel of 5: 3 must agree, and each question has one vote
        "next": None,
        "paused": None,
    }

    stats = client.get(f"{labelling}/me", headers=annotator_headers).json()
    assert (stats["answered_today"], stats["answered_total"], stats["images_left"]) == (2, 2, 5)
    assert not any(key.startswith("gold") for key in stats)  # annotators never see their gold score

    undone = client.post(f"{labelling}/undo", headers=annotator_headers).json()
    assert undone["undone"] == "answer" and undone["question_id"] == answers[-1]["question_id"]
    assert undone["item"]["item_id"] == item["item_id"]
    assert undone["item"]["questions"][0]["question_id"] == answers[-1]["question_id"]

    flagged = client.post(f"{labelling}/flags", json={"item_id": item["item_id"]}, headers=annotator_headers)
    assert flagged.status_code == 200 and flagged.json() == {"discarded": False}
    following = client.post(f"{labelling}/next", headers=annotator_headers).json()
    assert following["item"]["item_id"] != item["item_id"]


def test_images_left_counts_down_to_finished_and_answers_say_who_else_is_needed(
    client, db_session, competition, annotator_headers
):
    competition.k = 2
    competition.panel_size = 3
    labelling_competition(db_session, competition, classifiers=3, images_per_pair=3)  # 6 images to label
    labelling = f"/api/v1/competitions/{competition.id}/labelling"
    second = bearer(db_session, make_user(db_session, "second", Role.annotator))

    def images_left(headers) -> int:
        return client.get(f"{labelling}/me", headers=headers).json()["images_left"]

    def label_all(headers) -> list[int]:
        """Answer "yes" to everything (skipping the first image once); each answer's annotators_needed."""
        needed, skipped = [], False
        following = client.post(f"{labelling}/next", headers=headers).json()
        while following["status"] != "finished":
            left = images_left(headers)
            item = following["item"]
            if not skipped:
                skipped = True
                skip = {"item_id": item["item_id"]}
                following = client.post(f"{labelling}/skip", json=skip, headers=headers).json()
                assert images_left(headers) == left, "a skipped image is still left for its annotator"
                continue
            answers = [{"question_id": q["question_id"], "answer": True} for q in item["questions"]]
            body = client.post(
                f"{labelling}/answers", json={"answers": answers, "next": True}, headers=headers
            )
            needed.append(body.json()["annotators_needed"])
            following = body.json()["next"]
            assert images_left(headers) == left - 1
        assert images_left(headers) == 0, "an annotator with nothing left is told 0 images are left"
        return needed

    assert images_left(annotator_headers) == 6
    assert label_all(annotator_headers) == [1] * 6  # a panel of 3: one more "yes" decides each question
    assert images_left(second) == 6, "the first annotator's images are still left for the second"
    assert label_all(second) == [0] * 6


def test_no_response_names_a_classifier(client, db_session, labelling, annotator_headers):
    item = client.post(f"{labelling}/next", headers=annotator_headers).json()["item"]
    answers = [{"question_id": q["question_id"], "answer": False} for q in item["questions"]]
    texts = [
        json.dumps(item),
        client.post(f"{labelling}/answers", json={"answers": answers}, headers=annotator_headers).text,
        client.post(f"{labelling}/undo", headers=annotator_headers).text,
        client.get(f"{labelling}/me", headers=annotator_headers).text,
    ]
    for text in texts:
        assert "model-" not in text  # the classifiers' names
        assert not re.search(r"classifier|label_a|label_b|prob|distance", text)


def test_the_seconds_taken_are_stored(client, db_session, labelling, annotator_headers):
    item = client.post(f"{labelling}/next", headers=annotator_headers).json()["item"]
    let_time_pass(db_session, 10.0)  # the server's clock allows the seconds claimed
    answers = [{"question_id": q["question_id"], "answer": True, "seconds": 3.5} for q in item["questions"]]
    client.post(f"{labelling}/answers", json={"answers": answers}, headers=annotator_headers)
    assert db_session.scalars(select(Vote.seconds)).all() == [3.5, 3.5]


def test_errors_are_typed(client, db_session, labelling, annotator_headers):
    nothing = client.post(f"{labelling}/undo", headers=annotator_headers)
    assert nothing.status_code == 404 and nothing.json()["code"] == "not_found"

    unknown = client.post(
        f"{labelling}/answers",
        json={"answers": [{"question_id": 999999, "answer": True}]},
        headers=annotator_headers,
    )
    assert unknown.status_code == 404 and unknown.json()["code"] == "not_found"

    two_images = db_session.execute(select(Question.id, Question.image_id).order_by(Question.id)).all()
    first, other = two_images[0], next(q for q in two_images if q.image_id != two_images[0].image_id)
    mixed = client.post(
        f"{labelling}/answers",
        json={
            "answers": [{"question_id": first.id, "answer": True}, {"question_id": other.id, "answer": True}]
        },
        headers=annotator_headers,
    )
    assert mixed.status_code == 422 and mixed.json()["code"] == "invalid"

    given = client.post(f"{labelling}/next", headers=annotator_headers).json()["item"]
    question_id = given["questions"][0]["question_id"]
    stored = client.post(
        f"{labelling}/answers",
        json={"answers": [{"question_id": question_id, "answer": True}]},
        headers=annotator_headers,
    )
    assert stored.status_code == 200 and stored.json()["recorded"] == 1
    changed = client.post(
        f"{labelling}/answers",
        json={"answers": [{"question_id": question_id, "answer": False}]},
        headers=annotator_headers,
    )
    assert changed.status_code == 409 and changed.json()["code"] == "conflict"
    assert "undo" in changed.json()["detail"]

    missing_item = client.post(f"{labelling}/flags", json={"item_id": 999999}, headers=annotator_headers)
    assert missing_item.status_code == 404
    no_competition = client.post("/api/v1/competitions/999999/labelling/next", headers=annotator_headers)
    assert no_competition.status_code == 404


def test_workers_and_anonymous_callers_may_not_label(client, db_session, labelling):
    assert client.post(f"{labelling}/next").status_code == 401
    worker = make_user(db_session, "gpu-1", Role.worker)
    assert client.post(f"{labelling}/next", headers=bearer(db_session, worker)).status_code == 403


def test_admins_may_label_too(client, labelling, admin_headers):
    assert client.post(f"{labelling}/next", headers=admin_headers).json()["status"] == "item"


def test_admins_add_gold_and_see_each_annotators_accuracy(
    client, db_session, competition, labelling, admin_headers, annotator_headers, annotator
):
    competition.gold_rate = 0.5
    (image_id,) = add_images(db_session, competition, 1, seed=77)  # an image no pair asks about
    db_session.commit()
    sha256 = db_session.get(Image, image_id).sha256
    two_classes = [{"class_index": 3, "answer": True}, {"class_index": 4, "answer": False}]
    created = client.post(
        f"{labelling}/gold", json={"image_sha256": sha256, "questions": two_classes}, headers=admin_headers
    )
    assert created.status_code == 201
    gold = created.json()
    assert [(g["class_name"], g["answer"]) for g in gold] == [
        (competition.class_names[3], True),
        (competition.class_names[4], False),
    ]
    listed = client.get(f"{labelling}/gold", headers=admin_headers).json()  # oldest first, by question id
    assert listed == sorted(gold, key=lambda question: question["question_id"])
    assert client.get(f"{labelling}/gold", headers=annotator_headers).status_code == 403

    gold_ids = sorted(g["question_id"] for g in gold)
    for _ in range(7):  # gold comes at random, or once nothing else is left: by the seventh image at last
        item = client.post(f"{labelling}/next", headers=annotator_headers).json()["item"]
        let_time_pass(db_session, 5.0)
        answers = [
            {"question_id": q["question_id"], "answer": True, "seconds": 2.0} for q in item["questions"]
        ]
        submitted = client.post(f"{labelling}/answers", json={"answers": answers}, headers=annotator_headers)
        assert submitted.status_code == 200
        if sorted(q["question_id"] for q in item["questions"]) == gold_ids:
            break
    else:
        raise AssertionError("the gold image was never given")
    (row,) = client.get(f"{labelling}/annotators", headers=admin_headers).json()
    assert row["username"] == annotator.username
    assert (row["gold_answered"], row["gold_correct"], row["gold_accuracy"], row["mean_seconds"]) == (
        2,
        1,
        0.5,
        2.0,
    )

    bad_class = client.post(
        f"{labelling}/gold",
        json={"image_sha256": sha256, "questions": [{"class_index": 5000, "answer": True}]},
        headers=admin_headers,
    )
    assert bad_class.status_code == 422
    unknown_image = client.post(
        f"{labelling}/gold",
        json={"image_sha256": "0" * 64, "questions": two_classes},
        headers=admin_headers,
    )
    assert unknown_image.status_code == 404


def test_a_gold_image_with_a_single_question_is_refused(
    client, db_session, competition, labelling, admin_headers
):
    (image_id,) = add_images(db_session, competition, 1, seed=78)  # an image no pair asks about
    db_session.commit()
    sha256 = db_session.get(Image, image_id).sha256
    one_class = client.post(
        f"{labelling}/gold",
        json={"image_sha256": sha256, "questions": [{"class_index": 3, "answer": True}]},
        headers=admin_headers,
    )
    assert one_class.status_code == 422 and "two questions" in one_class.json()["detail"]
    twice = client.post(
        f"{labelling}/gold",
        json={
            "image_sha256": sha256,
            "questions": [{"class_index": 3, "answer": True}, {"class_index": 3, "answer": True}],
        },
        headers=admin_headers,
    )
    assert twice.status_code == 422
    assert db_session.scalars(select(Question).where(Question.image_id == image_id)).all() == []

    asked = db_session.scalars(select(Question).order_by(Question.id)).first()  # a pair asks about it
    on_asked_image = client.post(
        f"{labelling}/gold",
        json={
            "image_sha256": db_session.get(Image, asked.image_id).sha256,
            "questions": [{"class_index": 900, "answer": False}],
        },
        headers=admin_headers,
    )
    assert on_asked_image.status_code == 201


def test_only_an_image_given_to_the_caller_can_be_answered_or_flagged(
    client, db_session, labelling, annotator_headers
):
    item = client.post(f"{labelling}/next", headers=annotator_headers).json()["item"]
    other = db_session.scalars(
        select(LabelItem).where(LabelItem.id != item["item_id"]).order_by(LabelItem.id)
    ).first()
    other_question = db_session.scalars(select(Question).where(Question.image_id == other.image_id)).first()
    not_given = client.post(
        f"{labelling}/answers",
        json={"answers": [{"question_id": other_question.id, "answer": True}]},
        headers=annotator_headers,
    )
    assert not_given.status_code == 409 and "not given to you" in not_given.json()["detail"]
    flag_not_given = client.post(f"{labelling}/flags", json={"item_id": other.id}, headers=annotator_headers)
    assert flag_not_given.status_code == 409

    flagged = client.post(f"{labelling}/flags", json={"item_id": item["item_id"]}, headers=annotator_headers)
    assert flagged.status_code == 200
    again = client.post(f"{labelling}/flags", json={"item_id": item["item_id"]}, headers=annotator_headers)
    assert again.status_code == 200 and again.json() == {"discarded": False}
    answers = [{"question_id": q["question_id"], "answer": True} for q in item["questions"]]
    after_flag = client.post(f"{labelling}/answers", json={"answers": answers}, headers=annotator_headers)
    assert after_flag.status_code == 409 and "undo the flag" in after_flag.json()["detail"]

    assert db_session.scalars(select(Vote)).all() == []
    assert [f.image_id for f in db_session.scalars(select(DifficultyFlag))] == [
        db_session.get(LabelItem, item["item_id"]).image_id
    ]
    assert db_session.get(LabelItem, other.id).flags == 0


def test_every_labelling_route_is_documented(app):
    paths = {path: spec for path, spec in app.openapi()["paths"].items() if "/labelling" in path}
    operations = [operation for spec in paths.values() for operation in spec.values()]
    assert len(operations) == 15
    for operation in operations:
        assert operation["summary"] and operation["description"]
        assert operation["tags"] == ["labelling"]


def _sign_in(client, username: str) -> str:
    """Sign in through the login form; the page's CSRF token."""
    page = client.get("/login").text
    csrf = re.search(r'name="csrf_token" value="([^"]+)"', page).group(1)
    client.post("/login", data={"username": username, "password": TEST_PASSWORD, "csrf_token": csrf})
    return re.search(r'name="csrf-token" content="([^"]+)"', client.get("/").text).group(1)


def test_the_page_session_needs_the_csrf_header(client, labelling, annotator):
    csrf = _sign_in(client, annotator.username)
    assert client.post(f"{labelling}/next").status_code == 403
    assert client.post(f"{labelling}/next", headers={"X-CSRF-Token": csrf}).json()["status"] == "item"


def test_the_label_page_sends_signed_out_visitors_to_sign_in(client, competition):
    response = client.get(f"/competitions/{competition.id}/label", follow_redirects=False)
    assert response.status_code == 303
    assert response.headers["location"] == f"/login?next=/competitions/{competition.id}/label"


def test_the_label_page_shows_its_keys_and_live_question(client, competition, annotator):
    _sign_in(client, annotator.username)
    home = client.get("/").text  # nothing to label yet: the card says so, with no Label button
    assert "Nothing left for you to label" in home
    assert f'href="/competitions/{competition.id}/label"' not in home
    page = client.get(f"/competitions/{competition.id}/label")
    assert page.status_code == 200
    html = page.text
    for key in ("Y", "N", "D", "U", "Z"):
        assert f"<kbd>{key}</kbd>" in html
    assert 'aria-live="polite"' in html and 'id="question"' in html
    assert 'aria-keyshortcuts="y"' in html and "/static/label.js" in html
    assert f'data-api="/api/v1/competitions/{competition.id}/labelling"' in html
    assert client.get("/static/label.js").status_code == 200


def test_the_label_page_of_an_unknown_competition_is_404(client, annotator):
    _sign_in(client, annotator.username)
    assert client.get("/competitions/999999/label").status_code == 404


def test_answers_can_bring_the_next_image_in_the_same_request(client, labelling, annotator_headers):
    item = client.post(f"{labelling}/next", headers=annotator_headers).json()["item"]
    answers = [{"question_id": q["question_id"], "answer": True} for q in item["questions"]]
    body = client.post(
        f"{labelling}/answers", json={"answers": answers, "next": True}, headers=annotator_headers
    )
    following = body.json()["next"]
    assert following["status"] == "item" and following["item"]["item_id"] != item["item_id"]
    resumed = client.post(f"{labelling}/next", headers=annotator_headers).json()["item"]
    assert resumed["item_id"] == following["item"]["item_id"]  # it is leased to the caller
    plain = client.post(f"{labelling}/answers", json={"answers": answers}, headers=annotator_headers).json()
    assert plain["next"] is None


def test_skipping_hands_an_image_back_without_a_vote_until_nothing_else_is_left(
    client, db_session, labelling, annotator, annotator_headers
):
    first = client.post(f"{labelling}/next", headers=annotator_headers).json()["item"]
    skipped = client.post(f"{labelling}/skip", json={"item_id": first["item_id"]}, headers=annotator_headers)
    assert skipped.status_code == 200 and skipped.json()["status"] == "item"
    item = skipped.json()["item"]
    assert item["item_id"] != first["item_id"]
    assignment = db_session.get(Assignment, (first["item_id"], annotator.id))
    db_session.refresh(assignment)
    assert assignment.status == AssignmentStatus.skipped  # the lease has ended: others may take it
    assert (
        db_session.scalars(select(Vote)).all() == []
        and db_session.scalars(select(DifficultyFlag)).all() == []
    )
    again = client.post(f"{labelling}/skip", json={"item_id": first["item_id"]}, headers=annotator_headers)
    assert again.status_code == 200 and again.json()["item"]["item_id"] == item["item_id"]  # a no-op

    seen = [item["item_id"]]
    while True:  # answer everything else; the skipped image comes back only then
        answers = [{"question_id": q["question_id"], "answer": True} for q in item["questions"]]
        sent = client.post(
            f"{labelling}/answers", json={"answers": answers, "next": True}, headers=annotator_headers
        )
        item = sent.json()["next"]["item"]
        if item["item_id"] == first["item_id"]:
            break
        seen.append(item["item_id"])
    assert len(seen) == 5 and first["item_id"] not in seen
    last = client.post(f"{labelling}/skip", json={"item_id": first["item_id"]}, headers=annotator_headers)
    assert last.json() == {"status": "skipped", "item": None}  # only what was skipped is left
    assert (
        client.post(f"{labelling}/next", headers=annotator_headers).json()["item"]["item_id"]
        == first["item_id"]
    )

    answers = [{"question_id": q["question_id"], "answer": False} for q in item["questions"]]
    client.post(f"{labelling}/answers", json={"answers": answers}, headers=annotator_headers)
    done = client.post(f"{labelling}/skip", json={"item_id": first["item_id"]}, headers=annotator_headers)
    assert done.status_code == 409 and "you have done this image" in done.json()["detail"]
    unknown = client.post(f"{labelling}/skip", json={"item_id": 10**6}, headers=annotator_headers)
    assert unknown.status_code == 404
