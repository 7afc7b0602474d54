"""A classifier that never disagrees confidently (its every pair selected no image) used to be listed at
rank 4 with a Perron score on the admin "Leaderboard now" and the public leaderboard. Nothing ranks it: the
API gives it no rank or score and says why, no page shows it a rank or a score; its pairs say why they are
empty."""

import numpy as np

from app.competitions.schemas import CompetitionCreate
from app.competitions.service import create_competition
from app.i18n import ENGLISH, translations
from app.leaderboard.standings import no_rank_text
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

    def text(path: str, language: str = "en") -> str:
        headers = {**admin_headers, "Accept-Language": language}
        return " ".join(client.get(path, headers=headers).text.split())

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

    german = text(f"/competitions/{competition.id}/leaderboard", "de")  # the reasons in the page's language
    why = "alle 3 seiner Paare haben kein Bild zum Beschriften ausgewählt"
    assert f'title="{why}"' in german and f"Noch kein Rang für timid ({why})." in german
    found = short[("alpha", "timid")]["diagnosis"]
    assert (
        f"0 von 6 (keine seiner {found['disagreements']} Abweichungen erreicht T = 0.5 (die sicherste hat "
        f"beide Wahrscheinlichkeiten ≥ {found['most_confident']:.3g}); "
    ) in german
    assert "ergäbe" in german and "none of its" not in german and "would give" not in german
    alpha = next(row for row in board["classifiers"] if row["name"] == "alpha")
    gallery = text(f"/competitions/{competition.id}/pairs/{alpha['classifier_id']}/{timid.id}", "es")
    shown = gallery.split('id="shortfall">')[1].split("</p>")[0]
    assert f"ninguno de sus {found['disagreements']} desacuerdos supera T = 0.5 (el más seguro" in shown
    assert "daría" in shown and "would give" not in shown
    assert f"Kein Rang: {why}" in text(f"/competitions/{competition.id}/classifiers/{timid.id}", "de")


def test_why_no_rank_has_the_plurals_of_the_readers_language():
    german, spanish = translations("de"), translations("es")
    assert no_rank_text(2, 0, 1, ENGLISH) == "no labelled image yet: of its 1 pair, 1 waits for votes"
    assert (
        no_rank_text(2, 0, 1, german)
        == "noch kein beschriftetes Bild; von seinem 1 Paar: 1 wartet auf Stimmen"
    )
    assert no_rank_text(5, 1, 2, ENGLISH) == (
        "no labelled image yet: of its 4 pairs, 1 selected no image, 2 wait for votes, 1 is not selected yet"
    )
    assert no_rank_text(5, 1, 2, spanish) == (
        "aún ninguna imagen etiquetada: de sus 4 pares, 1 no seleccionó ninguna imagen, 2 esperan votos, "
        "1 aún no está seleccionado"
    )
    assert no_rank_text(4, 0, 0, german) == (
        "noch kein beschriftetes Bild; von seinen 3 Paaren: 3 sind noch nicht ausgewählt"
    )
    assert no_rank_text(2, 1, 0, german) == "sein einziges Paar hat kein Bild zum Beschriften ausgewählt"
    assert no_rank_text(1, 0, 0, spanish) == "ningún otro clasificador con el que compararlo"
