"""Gold questions stay secret from annotators and undo cannot improve a gold score: the issue's attack.

Gold images also come at random: a schedule by counts ("gold while gold answers are at most gold_rate of
all answers") gave every annotator a gold image first, and the next one at a count they could work out.

The attacker answers "no" to everything and reads GET …/me after every answer, looking for the images
after which it changes differently (those would be gold). Then, knowing the gold answers as if they had
found them, they undo both answers of every image and answer again: right on the gold images, "yes"
elsewhere. Their gold score must stay that of their first answers, and undo must look the same on every
image.
"""

from sqlalchemy import select

from app.images.models import Image
from app.labelling.annotating.queue import next_item
from app.users.models import Role
from tests.conftest import make_user
from tests.labelling.factories import LabellingCalls, add_images, labelling_competition

GOLD_IMAGES = 5
GOLD_ANSWERS = [{"class_index": 3, "answer": True}, {"class_index": 4, "answer": False}]
"""Each gold image's two questions: "no" to both is right once in two."""


def add_gold_images(client, db_session, competition, admin_headers, count: int) -> set[str]:
    """count new images no pair asks about, made gold with GOLD_ANSWERS through the API; their hashes."""
    image_ids = add_images(db_session, competition, count, seed=500)
    db_session.commit()
    hashes = set(db_session.scalars(select(Image.sha256).where(Image.id.in_(image_ids))))
    for sha256 in hashes:
        created = client.post(
            f"/api/v1/competitions/{competition.id}/labelling/gold",
            json={"image_sha256": sha256, "questions": GOLD_ANSWERS},
            headers=admin_headers,
        )
        assert created.status_code == 201, created.text
    return hashes


def test_gold_images_come_at_random_not_by_a_count(client, db_session, competition, admin_headers):
    competition.k = 2
    competition.gold_rate = 0.5
    labelling_competition(db_session, competition, classifiers=3, images_per_pair=3)
    gold_hashes = add_gold_images(client, db_session, competition, admin_headers, GOLD_IMAGES)
    firsts = []
    for index in range(20):
        user = make_user(db_session, f"first-{index}", Role.annotator)
        item = next_item(db_session=db_session, competition=competition, user=user).item
        firsts.append(item.image_sha256 in gold_hashes)
    # each first image is gold with probability 1/2 (all alike by chance: 2 in 10^6)
    assert sorted(set(firsts)) == [False, True], "a first image's being gold follows from no count"


def test_me_does_not_tell_gold_images_apart_and_undo_does_not_repair_a_gold_score(
    client, db_session, competition, admin_headers, annotator_headers, annotator
):
    competition.k = 2
    competition.gold_rate = 0.5
    labelling_competition(db_session, competition, classifiers=3, images_per_pair=3)  # 6 regular images
    gold_hashes = add_gold_images(client, db_session, competition, admin_headers, GOLD_IMAGES)
    labelling = f"/api/v1/competitions/{competition.id}/labelling"
    calls = LabellingCalls(client, competition.id, annotator_headers)
    post, me = calls.post, calls.me

    right = {competition.class_names[gold["class_index"]]: gold["answer"] for gold in GOLD_ANSWERS}
    changes: dict[bool, set[tuple]] = {True: set(), False: set()}
    undo_views: dict[bool, set[tuple]] = {True: set(), False: set()}
    still_needed: dict[bool, set[int]] = {True: set(), False: set()}
    shown = 0
    while (following := post("next"))["status"] == "item":
        item = following["item"]
        is_gold = item["image_url"].removeprefix("/images/") in gold_hashes
        shown += 1
        before = me()
        answered = post(
            "answers",
            {"answers": [{"question_id": q["question_id"], "answer": False} for q in item["questions"]]},
        )
        still_needed[is_gold].add(answered["annotators_needed"])
        after = me()
        changes[is_gold].add(tuple(sorted((key, after[key] != before[key]) for key in after)))

        undone = [post("undo"), post("undo")]  # both answers of the image, the latest first
        undo_views[is_gold].add(
            tuple((u["undone"], u["item"] is not None, len(u["item"]["questions"])) for u in undone)
        )
        again = undone[-1]["item"]
        assert {q["question_id"] for q in again["questions"]} == {q["question_id"] for q in item["questions"]}
        answers = [
            {"question_id": q["question_id"], "answer": right.get(q["class_name"], True) if is_gold else True}
            for q in again["questions"]
        ]
        post("answers", {"answers": answers})

    assert shown == 6 + GOLD_IMAGES
    assert changes[True] and changes[True] == changes[False], "…/me changes alike after gold and other images"
    assert still_needed[True] == still_needed[False] == {2}, "an answer's annotators_needed is alike too"
    assert not any(key.startswith("gold") for key in me()), "annotators do not see their gold score"
    assert undo_views[True] == undo_views[False] == {(("answer", True, 1), ("answer", True, 2))}

    (row,) = client.get(f"{labelling}/annotators", headers=admin_headers).json()
    assert (row["gold_answered"], row["gold_correct"]) == (2 * GOLD_IMAGES, GOLD_IMAGES)  # the first answers
    assert row["gold_accuracy"] == 0.5
