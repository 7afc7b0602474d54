"""GET /api/v1/competitions/{id}/quality: Krippendorff's α and Dawid–Skene over a competition's counted
votes, a careless annotator found out, and the ranking from Dawid–Skene labels beside the majority's."""

import math

import krippendorff
import numpy as np
from sqlalchemy import select

from app.labelling.models import Question, Vote
from app.users.models import Role
from tests.conftest import bearer, make_user
from tests.labelling.factories import labelling_competition, sign_in


def truth(question_id: int) -> bool:
    """The simulated true answer of a question."""
    return question_id % 3 == 0


def label_everything(db_session, competition, annotators) -> None:
    """Each annotator in turn answers their next image until none is left: the careful ones the truth (one
    question in seven flipped, a different seventh each), the last one always "yes"."""
    from app.labelling.annotating.answers import submit_answers
    from app.labelling.annotating.queue import next_item
    from app.labelling.types import Answer

    going = True
    while going:
        going = False
        for number, user in enumerate(annotators):
            item = next_item(db_session=db_session, competition=competition, user=user).item
            if item is None:
                continue
            going = True
            careless = number == len(annotators) - 1
            answers = [
                Answer(
                    q.question_id,
                    True if careless else truth(q.question_id) ^ ((q.question_id + number) % 7 == 0),
                    3.0,
                )
                for q in item.questions
            ]
            submit_answers(db_session=db_session, competition=competition, user=user, answers=answers)
            db_session.commit()


def test_agreement_alpha_dawid_skene_and_the_two_rankings(client, db_session, competition, admin_headers):
    competition.k = 8
    labelling_competition(db_session, competition, classifiers=4, images_per_pair=8)
    annotators = [make_user(db_session, f"rater{index}", Role.annotator) for index in range(5)]
    label_everything(db_session, competition, annotators)
    quality = f"/api/v1/competitions/{competition.id}/quality"
    assert client.get(quality, headers=bearer(db_session, annotators[0])).status_code == 403
    response = client.get(quality, headers=admin_headers)
    assert response.status_code == 200, response.text
    report = response.json()

    votes = db_session.execute(
        select(Vote.user_id, Vote.question_id, Vote.answer)
        .join(Question, Question.id == Vote.question_id)
        .where(Question.competition_id == competition.id)
    ).all()
    users = sorted({user for user, _, _ in votes})
    questions = sorted({question for _, question, _ in votes})
    matrix = np.full((len(users), len(questions)), np.nan)
    for user, question, answer in votes:
        matrix[users.index(user), questions.index(question)] = answer
    paired = matrix[:, (~np.isnan(matrix)).sum(axis=0) >= 2]
    expected = krippendorff.alpha(reliability_data=paired, level_of_measurement="nominal")
    assert (report["votes"], report["questions"]) == (len(votes), len(questions))
    assert math.isclose(report["alpha"], expected) and 0 < report["alpha"] < 1

    by_name = {row["username"]: row for row in report["annotators"]}
    assert sorted(by_name) == [user.username for user in annotators]
    careful = [by_name[f"rater{index}"] for index in range(4)]
    careless = by_name["rater4"]
    assert careless["dawid_skene_specificity"] < 0.2 < min(row["dawid_skene_specificity"] for row in careful)
    assert careless["dawid_skene_accuracy"] < min(row["dawid_skene_accuracy"] for row in careful)
    assert careless["alpha_against_others"] < min(row["alpha_against_others"] for row in careful)

    board = client.get(f"/api/v1/competitions/{competition.id}/leaderboard").json()
    mad_rank = {row["classifier_id"]: row["mad_rank"] for row in board["classifiers"]}
    assert {row["classifier_id"]: row["majority_rank"] for row in report["rankings"]} == mad_rank
    assert all(row["majority_rank"] == row["dawid_skene_rank"] for row in report["rankings"]) == (
        report["srcc_majority_vs_dawid_skene"] in (None, 1.0)
    )

    sign_in(client, "admin")
    page = client.get(f"/admin/competitions/{competition.id}/quality").text
    shared = (~np.isnan(matrix)).sum(axis=0) >= 2
    assert report["questions_shared"] == shared.sum() and report["needs_more"] is None
    assert f"Krippendorff's α over {shared.sum()} questions with two or more" in page
    assert f"{report['alpha']:.3f}" in page
    agreement = page[page.index('id="agreement-title"') :]
    assert agreement.count('<tr><th scope="row">rater') == 5 and "Dawid–Skene rank" in agreement

    # excluding the careless annotator leaves their votes out of the report
    careless_id = careless["user_id"]
    excluded = client.patch(
        f"/api/v1/users/{careless_id}", json={"votes_excluded": True}, headers=admin_headers
    )
    assert excluded.status_code == 200, excluded.text
    after = client.get(quality, headers=admin_headers).json()
    assert careless_id not in {row["user_id"] for row in after["annotators"]}
    assert after["votes"] == len(votes) - careless["answers"]


def test_agreement_of_a_competition_without_votes(client, competition, admin_headers):
    report = client.get(f"/api/v1/competitions/{competition.id}/quality", headers=admin_headers).json()
    assert report["questions"] == report["votes"] == 0
    assert report["alpha"] is None and report["annotators"] == [] and report["rankings"] == []
    assert client.get("/api/v1/competitions/999999/quality", headers=admin_headers).status_code == 404


def label_truthfully(db_session, competition, user, images: int | None = None) -> None:
    """The annotator answers the truth on their next images until none is left (or `images` are done)."""
    from app.labelling.annotating.answers import submit_answers
    from app.labelling.annotating.queue import next_item
    from app.labelling.types import Answer

    done = 0
    while images is None or done < images:
        item = next_item(db_session=db_session, competition=competition, user=user).item
        if item is None:
            return
        answers = [Answer(q.question_id, truth(q.question_id), 3.0) for q in item.questions]
        submit_answers(db_session=db_session, competition=competition, user=user, answers=answers)
        db_session.commit()
        done += 1


def test_agreement_needs_two_annotators_per_question(client, db_session, competition, admin_headers):
    """Issue 25, item 14: a panel of one, one annotator right on every question: no agreement figure, no
    Dawid–Skene estimate, no relabelling and no ranking from them, but why."""
    competition.panel_size = 1
    competition.k = 5
    labelling_competition(db_session, competition, classifiers=3, images_per_pair=5)  # 15 images
    label_truthfully(db_session, competition, make_user(db_session, "alone", Role.annotator))
    report = client.get(f"/api/v1/competitions/{competition.id}/quality", headers=admin_headers).json()
    assert (report["questions"], report["questions_shared"], report["votes"]) == (30, 0, 30)
    assert report["needs_more"] == (
        "Agreement needs at least two annotators per question: each of the 30 questions answered so far has "
        "one counted answer."
    )
    assert all(
        report[key] is None
        for key in ("alpha", "dawid_skene_prior_yes", "dawid_skene_iterations", "labels_changed")
    )
    assert report["rankings"] == [] and report["srcc_majority_vs_dawid_skene"] is None
    (row,) = report["annotators"]
    assert (row["username"], row["answers"], row["shared_answers"]) == ("alone", 30, 0)
    assert all(row[key] is None for key in row if key.startswith(("alpha", "dawid")))
    sign_in(client, "admin")
    page = client.get(f"/admin/competitions/{competition.id}/quality").text
    agreement = page.split('id="agreement-title"')[1]
    assert "Agreement needs at least two annotators per question" in agreement
    assert "relabels" not in agreement and "Dawid–Skene rank" not in agreement and "<table" not in agreement


def test_agreement_is_measured_on_the_questions_two_annotators_answered(
    client, db_session, competition, admin_headers
):
    """Issue 25, item 14: one annotator answers everything, a second two images: the figures rest on those
    four questions, and each annotator's on their answers there."""
    competition.panel_size = 3
    competition.k = 5
    labelling_competition(db_session, competition, classifiers=3, images_per_pair=5)  # 15 images
    label_truthfully(db_session, competition, make_user(db_session, "first", Role.annotator))
    label_truthfully(db_session, competition, make_user(db_session, "second", Role.annotator), images=2)
    report = client.get(f"/api/v1/competitions/{competition.id}/quality", headers=admin_headers).json()
    assert (report["questions"], report["questions_shared"], report["votes"]) == (30, 4, 34)
    assert report["needs_more"] is None and report["labels_changed"] == 0  # both told the truth
    rows = {row["username"]: row for row in report["annotators"]}
    assert {name: (row["answers"], row["shared_answers"]) for name, row in rows.items()} == {
        "first": (30, 4),
        "second": (4, 4),
    }
    assert all(row["dawid_skene_accuracy"] is not None for row in rows.values())
