"""A small `make demo`: real digits, timm training, worker; one person labelling moves the leaderboard; then
`make demo ARGS=--simulate` on what is there: HTTP labelling by a simulated panel of 5, leaderboard, SRCC and
the agreement α of the simulated panel."""

import html
import re

from fastapi.testclient import TestClient
from sqlalchemy import select
from typer.testing import CliRunner

from app.cli.main import app as cli
from app.db.engine import create_db_engine, create_sessionmaker
from app.demo.run import DEMO_CLASSIFIERS, DESCRIPTION, SIMULATED_DESCRIPTION, DemoOptions, prepare_demo
from app.main import create_app
from app.settings import Settings
from app.users import service as users_service
from app.users.models import User

FIRST_IMAGES = 10
"""The README's promise: the leaderboard moves within a newcomer's first ten images."""


def standings(client: TestClient, competition_id: int) -> dict:
    """The leaderboard as the API serves it."""
    response = client.get(f"/api/v1/competitions/{competition_id}/leaderboard")
    assert response.status_code == 200, response.text
    return response.json()


def assert_no_settled_rank_without_labels(board: dict) -> None:
    """A classifier without a labelled image claims no rank: no rank, score or interval, provisional."""
    for row in board["classifiers"]:
        if row["labelled_images"] == 0:
            assert (row["mad_rank"], row["mad_score"], row["rank_low"], row["rank_high"]) == (None,) * 4, row
            assert row["provisional"] and row["delta_rank"] is None, row


def label_first_images(client: TestClient, competition_id: int, token: str) -> list[int]:
    """The demo's annotator answers "yes" to every question of its first images (all of them, in a demo this
    small); each answer's count of annotators still needed."""
    headers = {"Authorization": f"Bearer {token}"}
    labelling = f"/api/v1/competitions/{competition_id}/labelling"
    following = client.post(f"{labelling}/next", headers=headers).json()
    needed = []
    while following["status"] == "item" and len(needed) < FIRST_IMAGES:
        answers = [{"question_id": q["question_id"], "answer": True} for q in following["item"]["questions"]]
        response = client.post(
            f"{labelling}/answers", json={"answers": answers, "next": True}, headers=headers
        )
        assert response.status_code == 200, response.text
        needed.append(response.json()["annotators_needed"])
        following = response.json()["next"]
    return needed


def test_one_annotator_moves_the_small_demo_and_the_simulation_reuses_what_exists(
    tmp_path, monkeypatch, capsys
):
    env = {"MAD_DATA_DIR": str(tmp_path / "demo-data"), "MAD_ENV": "development", "COLUMNS": "200"}
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    settings = Settings()
    prepared = prepare_demo(settings, DemoOptions(images=300, training_steps=15))
    printed = capsys.readouterr().out
    assert "300 added" in printed
    for number, (architecture, _share) in enumerate(DEMO_CLASSIFIERS, 1):  # a line as each model starts
        started = printed.index(f"training {architecture} ({number} of {len(DEMO_CLASSIFIERS)}) on ")
        assert re.search(rf"trained {architecture} on \d+ digits", printed[started:])
    competition = prepared.competition
    assert competition.panel_size == 1  # one person decides questions in the demo (5 elsewhere)

    with create_sessionmaker(create_db_engine(settings.sqlalchemy_url))() as session:
        annotator = session.scalar(select(User).where(User.username == "annotator"))
        token = users_service.create_api_token(db_session=session, user=annotator, name="test")
        session.commit()
    with TestClient(create_app(settings)) as client:
        before = standings(client, competition.id)
        assert len(before["classifiers"]) == len(DEMO_CLASSIFIERS)
        assert all(row["labelled_images"] == 0 for row in before["classifiers"])
        assert_no_settled_rank_without_labels(before)
        needed = label_first_images(client, competition.id, token)
        after = standings(client, competition.id)
    assert needed and set(needed) == {0}, "each answer decides its image at once: a panel of one"
    assert sum(row["labelled_images"] for row in after["classifiers"]) >= len(needed)
    assert after["matrices"]["labelled"] != before["matrices"]["labelled"]
    assert len(after["pairs_without_labels"]) < len(before["pairs_without_labels"])
    assert_no_settled_rank_without_labels(after)

    arguments = ["demo", "--simulate", "--images", "300", "--training-steps", "15"]
    simulated = CliRunner().invoke(cli, arguments, env=env, catch_exceptions=False)
    assert simulated.exit_code == 0, simulated.output
    assert "competition 'digits-simulated'" in simulated.output
    assert "MAD leaderboard of the competition 'digits-simulated'" in simulated.output
    assert "trained" not in simulated.output, "the weights trained for people are reused"
    line = r"^SRCC\(MAD rank, true accuracy rank\) = (-?[01]\.\d{3}) · agreement α = (-?[01]\.\d{3})$"
    match = re.search(line, simulated.output, re.MULTILINE)
    assert match and -1 <= float(match.group(1)) <= 1 and -1 <= float(match.group(2)) <= 1
    assert simulated.output.rstrip().endswith(match.group(0))

    again = CliRunner().invoke(cli, arguments, env=env, catch_exceptions=False)
    assert again.exit_code == 0, again.output
    assert "0 added" in again.output and "trained" not in again.output and "0 jobs run" in again.output
    assert re.search(r"^SRCC\(MAD rank, true accuracy rank\) = ", again.output, re.MULTILINE)

    listed = CliRunner().invoke(cli, ["competitions", "list"], env=env)  # the README's MAD_DATA_DIR=demo-data
    assert listed.exit_code == 0 and {"digits", "digits-simulated"} <= set(listed.output.split())
    with TestClient(create_app(settings)) as client:  # the home page tells the two competitions apart
        cards = re.findall(r'<li class="card">\s*<h3>([\w-]+)</h3>\s*<p>([^<]+)</p>', client.get("/").text)
    shown = {name: html.unescape(" ".join(text.split())) for name, text in cards}
    assert shown == {"digits": DESCRIPTION, "digits-simulated": SIMULATED_DESCRIPTION}
