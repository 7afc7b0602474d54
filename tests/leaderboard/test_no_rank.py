"""A classifier that never disagrees confidently (its every pair selected no image) used to be listed at
rank 4 with a Perron score on the admin "Leaderboard now" and the public leaderboard. Nothing ranks it: the
API gives it no rank or score and says why, no page shows it a rank or a score; its pairs say why they are
empty."""

import numpy as np

from app.competitions.schemas import CompetitionCreate
from app.competitions.service import create_competition
from tests.leaderboard.scenario import DIGITS, N_CLASSES, annotators, corpus, register, run_select_jobs, vote
from tests.leaderboard.test_leaderboard import off_by

N_IMAGES = 40


def test_a_classifier_whose_pairs_are_all_empty_gets_no_rank_and_its_pairs_say_why(
    client, db_session, settings, tmp_path, admin_headers
):
    competition = create_competition(
        db_session=db_session,
        spec=CompetitionCreate(
            name="timid", taxonomy="custom", taxonomy_source=DIGITS, k=6, confidence_threshold=0.5
        ),
    )
    hashes = corpus(db_session, settings, competition, N_IMAGES)
    db_session.commit()
    truth = np.random.default_rng(3).integers(0, N_CLASSES, N_IMAGES)
    for seed, (name, accuracy) in enumerate((("alpha", 0.8), ("beta", 0.5), ("gamma", 0.3))):
        register(db_session, settings, competition, tmp_path, name, hashes, off_by(truth, accuracy, 1, seed))
    timid = register(  # right half the time, never more than 40% sure: below T = 0.5 on every image
        db_session, settings, competition, tmp_path, "timid", hashes, off_by(truth, 0.5, 2, 9), seed=9,
        confidence=(0.1, 0.4),
    )  # fmt: skip
    run_select_jobs(db_session, settings)
    vote(db_session, competition, annotators(db_session, 3), lambda o, c: c == truth[o], hashes)

    board = client.get(f"/api/v1/competitions/{competition.id}/leaderboard").json()
    standings = {row["name"]: row for row in board["classifiers"]}
    assert standings["timid"]["no_rank"] == "all 3 of its pairs selected no image to label"
    assert (standings["timid"]["labelled_images"], standings["timid"]["rank_low"]) == (0, None)
    assert (standings["timid"]["mad_rank"], standings["timid"]["mad_score"]) == (None, None)
    assert [entry["name"] for entry in board["unranked"]] == ["timid"]
    assert all(standings[name]["no_rank"] is None for name in ("alpha", "beta", "gamma"))
    assert all(standings[name]["labelled_images"] > 0 for name in ("alpha", "beta", "gamma"))
    short = {(p["classifier_a"], p["classifier_b"]): p for p in board["short_pairs"]}
    assert set(short) == {("alpha", "timid"), ("beta", "timid"), ("gamma", "timid")}
    for pair in short.values():
        found = pair["diagnosis"]
        assert (pair["selected"], found["confident"], found["most_confident"] < 0.4) == (0, 0, True)
        assert pair["shortfall"].startswith(
            f"none of its {found['disagreements']} disagreements passes T = 0.5"
        )

    def text(path: str) -> str:
        return " ".join(client.get(path, headers=admin_headers).text.split())

    admin_page = text(f"/admin/competitions/{competition.id}")
    row = admin_page[admin_page.index(f'data-classifier-id="{timid.id}"') :].split("</tr>")[0]
    assert (
        "<td>—</td><td>timid</td><td>—</td>" in row and "no rank: all 3 of its pairs selected no image" in row
    )
    assert "6 of 6 (3 empty, 0 short of k)" in admin_page
    assert "<td>timid</td><td>ready</td><td>40 / 40</td><td>3 of 3</td>" in admin_page  # its empty pairs
    public = text(f"/competitions/{competition.id}/leaderboard")
    row = public[public.index(f'data-classifier-id="{timid.id}"') :].split("</tr>")[0]
    assert "no rank</span>" in row and 'data-label="Perron score">—</td>' in row
    assert "No rank yet for timid (all 3 of its pairs selected no image to label)." in public
    assert "alpha vs timid, 0 of 6 (none of its" in public
    classifier_page = text(f"/competitions/{competition.id}/classifiers/{timid.id}")
    assert "No rank: all 3 of its pairs selected no image to label" in classifier_page
    assert "MAD rank" not in classifier_page.split("</h1>")[1].split("</p>")[0]
