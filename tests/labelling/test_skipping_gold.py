"""Skipping cannot find the gold images nor dodge them (issue 25, item 1).

The attacker skips every image the first time they see it, reads GET …/me before and after each skip, then
answers whatever comes back "yes". A skipped regular image comes back once nothing else is left and "images
left" does not move when it is skipped; a skipped gold image must do the same, so the attacker meets the
gold images, cannot tell them by the count, and is paused by the gold threshold.
"""

from tests.labelling.factories import LabellingCalls, labelling_competition
from tests.labelling.test_gold_secrecy import add_gold_images
from tests.labelling.test_quality_control import set_quality

GOLD_IMAGES = 4


def test_skipping_neither_tells_gold_images_apart_nor_dodges_the_pause(
    client, db_session, competition, admin_headers, annotator_headers
):
    competition.k = 2
    competition.gold_rate = 0.5
    labelling_competition(db_session, competition, classifiers=3, images_per_pair=3)  # 6 regular images
    gold_hashes = add_gold_images(client, db_session, competition, admin_headers, GOLD_IMAGES)
    set_quality(client, competition, admin_headers, gold_threshold=0.8, gold_min_answers=4)
    labelling = f"/api/v1/competitions/{competition.id}/labelling"
    calls = LabellingCalls(client, competition.id, annotator_headers)
    post = calls.post

    def images_left() -> int:
        return calls.me()["images_left"]

    skipped: set[int] = set()
    left_after_skip: dict[bool, set[int]] = {True: set(), False: set()}
    gold_answered, paused = 0, None
    following = post("next")
    while paused is None and following["status"] in ("item", "skipped"):
        if following["status"] == "skipped":  # only skipped images are left: take them up again
            following = post("next")
            continue
        item = following["item"]
        is_gold = item["image_url"].removeprefix("/images/") in gold_hashes
        if item["item_id"] not in skipped:
            skipped.add(item["item_id"])
            before = images_left()
            following = post("skip", {"item_id": item["item_id"]})
            left_after_skip[is_gold].add(images_left() - before)
            continue
        answers = [{"question_id": q["question_id"], "answer": True} for q in item["questions"]]
        answered = post("answers", {"answers": answers, "next": True})
        gold_answered += is_gold
        paused = answered["paused"]
        following = answered["next"] or {"status": "finished"}

    assert len(skipped) == 6 + GOLD_IMAGES, "every image was offered, and skipped once"
    assert left_after_skip[True] == left_after_skip[False] == {0}, "a skip moves 'images left' alike"
    assert gold_answered >= 2 and paused is not None, "skipped gold images came back and the pause bit"
    assert paused.startswith("You are paused in this competition:")
    assert client.post(f"{labelling}/next", headers=annotator_headers).status_code == 403
