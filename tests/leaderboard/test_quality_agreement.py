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
    from app.labelling.answers import submit_answers
    from app.labelling.queue import next_item
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
    assert f"Krippendorff's α over {len(questions)} questions" in page and f"{report['alpha']:.3f}" in page
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
