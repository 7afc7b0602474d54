"""How many of a pair's images fell below T (issue 34): none under the absolute rule, and the pages say
nothing of it; after a change to the `fill` rule at a T no prediction reaches, every selected image is
below T, and the admin page, the leaderboard (JSON, page, pairs table), the pair's gallery, the subsets
export and the release bundle say so, per pair and per image."""

import csv
import io
import re

import pyarrow.parquet as pq

from app.competitions.schemas import CompetitionCreate
from app.competitions.service import create_competition
from app.release.bundle import write_release
from tests.labelling.factories import sign_in
from tests.leaderboard.conftest import truth_of
from tests.leaderboard.scenario import DIGITS, corpus, noisy_predictions, register, run_select_jobs

IMAGES = 30
K = 3


def pages(client, competition_id: int, pair: tuple[int, int]) -> dict[str, str]:
    """The admin page, the leaderboard page and the pair's gallery page."""
    return {
        "admin": client.get(f"/admin/competitions/{competition_id}").text,
        "leaderboard": client.get(f"/competitions/{competition_id}/leaderboard").text,
        "gallery": client.get(f"/competitions/{competition_id}/pairs/{pair[0]}/{pair[1]}").text,
    }


def test_pages_the_leaderboard_exports_and_the_release_say_how_many_images_fell_below_t(
    client, db_session, settings, admin_headers, tmp_path
):
    spec = CompetitionCreate(
        name="lowconf",
        taxonomy="custom",
        taxonomy_source=DIGITS,
        k=K,
        confidence_threshold=0.0,
        max_per_label=1000,
    )
    competition = create_competition(db_session=db_session, spec=spec)
    hashes = corpus(db_session, settings, competition, IMAGES)
    truth, _ = truth_of(IMAGES)
    ids = [
        register(
            db_session,
            settings,
            competition,
            tmp_path,
            f"c{seed}",
            hashes,
            noisy_predictions(truth, 0.5, seed),
            seed=seed,
            confidence=(0.3, 0.6),
        ).id
        for seed in range(3)
    ]
    assert len(run_select_jobs(db_session, settings)) == 3
    sign_in(client, "admin")
    pair = (ids[0], ids[1])
    for name, page in pages(client, competition.id, pair).items():
        assert not re.search(r"\d below T|fell below T", page), name
    board = client.get(f"/api/v1/competitions/{competition.id}/leaderboard").json()
    assert board["matrices"]["below_threshold"] == [[0] * 3] * 3

    changed = client.patch(
        f"/api/v1/competitions/{competition.id}",
        json={"threshold_rule": "fill", "confidence_threshold": 0.9},
        headers=admin_headers,
    )
    assert changed.status_code == 200, changed.text
    assert len(run_select_jobs(db_session, settings)) == 3
    board = client.get(f"/api/v1/competitions/{competition.id}/leaderboard").json()
    off_diagonal = [[0 if i == j else K for j in range(3)] for i in range(3)]
    assert board["matrices"]["selected"] == off_diagonal
    assert board["matrices"]["below_threshold"] == off_diagonal
    shown = pages(client, competition.id, pair)
    assert f"{K} of {K}, {K} below T" in shown["admin"]
    assert f"{K} of the pair's {K} images fell below T = 0.9" in shown["leaderboard"]
    assert 'id="below-threshold"' in shown["gallery"] and f"{K} of the pair's {K} images" in shown["gallery"]

    table = client.get(f"/api/v1/competitions/{competition.id}/leaderboard?format=csv&table=pairs")
    rows = list(csv.DictReader(io.StringIO(table.text)))
    assert {
        row["below_threshold_ij"] for row in rows if row["classifier_i_id"] != row["classifier_j_id"]
    } == {str(K)}
    subsets = client.get(
        f"/api/v1/competitions/{competition.id}/exports/subsets?format=csv", headers=admin_headers
    )
    rows = list(csv.DictReader(io.StringIO(subsets.text)))
    assert {row["below_threshold"] for row in rows if row["role"] == "selected"} == {"true"}

    bundle = tmp_path / "bundle"
    write_release(
        db_session=db_session, competition=competition, settings=settings, out=bundle, license_id="cc-by-4.0"
    )
    images = pq.read_table(bundle / "subsets.parquet").to_pylist()
    assert {row["below_threshold"] for row in images if row["role"] == "selected"} == {True}
    pairs = pq.read_table(bundle / "leaderboard_pairs.parquet").to_pylist()
    assert {
        row["below_threshold_ij"] for row in pairs if row["classifier_i_id"] != row["classifier_j_id"]
    } == {K}
