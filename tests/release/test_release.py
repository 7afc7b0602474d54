"""The release bundle: the leaderboard is rebuilt from its tables alone, the card says what is inside, the
annotators are pseudonymised, and a destination that is not empty is refused with nothing written."""

import hashlib
import hmac
import os
import stat

import numpy as np
import pyarrow.parquet as pq
import pytest
import yaml
from typer.testing import CliRunner

from app.cli.main import app as cli
from app.core.ranking import count_outcomes, rank_classifiers
from app.errors import InvalidInput
from app.labelling.models import Vote
from app.leaderboard.agreement import competition_quality
from app.leaderboard.snapshots import freeze_leaderboard
from app.leaderboard.standings import compute_leaderboard
from app.release.bundle import write_release
from app.release.tables import pseudonym, pseudonym_key
from app.settings import DEVELOPMENT_SECRET_KEY
from tests.conftest import TEST_SECRET_KEY
from tests.leaderboard.scenario import DIGITS
from tests.support.numbers import as_served

TABLES = (
    *("images", "subsets", "questions", "votes", "predictions", "adjudications"),
    *("leaderboard", "leaderboard_pairs", "leaderboard_summary", "snapshots"),
)


def release(db_session, settings, voted, out, license_id="cc-by-4.0"):
    """Write the voted competition's bundle to `out`."""
    return write_release(
        db_session=db_session,
        competition=voted.competition,
        settings=settings,
        out=out,
        license_id=license_id,
    )


def rebuilt_ranking(bundle):
    """A, the Perron scores and ranks from the bundle's tables alone, with the classifiers in the order of
    leaderboard.parquet."""
    ids = pq.read_table(bundle / "leaderboard.parquet").column("classifier_id").to_pylist()
    alpha = pq.read_table(bundle / "leaderboard_summary.parquet").column("smoothing")[0].as_py()
    index_of = {classifier_id: index for index, classifier_id in enumerate(ids)}
    outcomes: dict[tuple[int, int], list[tuple[bool, bool]]] = {}
    for row in pq.read_table(bundle / "subsets.parquet").to_pylist():
        a, b = row["classifier_a_id"], row["classifier_b_id"]
        if a not in index_of or b not in index_of:
            continue
        labels = outcomes.setdefault((index_of[a], index_of[b]), [])
        if row["role"] == "selected" and row["outcome_a"] is not None and row["outcome_b"] is not None:
            labels.append((row["outcome_a"], row["outcome_b"]))
    arrays = {pair: tuple(np.array(labels, dtype=bool).reshape(-1, 2).T) for pair, labels in outcomes.items()}
    return ids, rank_classifiers(count_outcomes(arrays, len(ids)), alpha)


def test_release_rebuilds_the_leaderboard_from_the_bundle_alone(db_session, settings, voted, tmp_path):
    served = compute_leaderboard(db_session=db_session, competition=voted.competition)
    bundle = release(db_session, settings, voted, tmp_path / "bundle").path
    ids, ranking = rebuilt_ranking(bundle)
    assert ids == served.matrices.classifier_ids and len(ids) >= len(voted.active)
    assert as_served(ranking.accuracy) == served.matrices.accuracy
    assert as_served(ranking.dominance) == served.matrices.dominance
    assert as_served(ranking.perron.scores) == [standing.mad_score for standing in served.classifiers]
    assert as_served(ranking.ranks) == [standing.mad_rank for standing in served.classifiers]
    assert sum(served.matrices.labelled[0]) > 0
    standings = pq.read_table(bundle / "leaderboard.parquet").to_pylist()
    assert standings == [standing.model_dump(mode="json") for standing in served.classifiers]


def test_release_card_names_every_table_and_the_protocol(db_session, settings, voted, admin, tmp_path):
    competition = voted.competition
    freeze_leaderboard(
        db_session=db_session, competition=voted.competition, note="before the paper", user=admin
    )
    written = release(db_session, settings, voted, tmp_path / "bundle")
    bundle = written.path
    assert sorted(path.name for path in bundle.iterdir()) == sorted(
        [*(f"{t}.parquet" for t in TABLES), "README.md"]
    )
    assert written.rows["images"] == len(voted.hashes) and written.rows["snapshots"] == 1
    card = (bundle / "README.md").read_text()
    _, header, body = card.split("---\n", 2)
    metadata = yaml.safe_load(header)
    assert metadata["license"] == "cc-by-4.0"
    assert metadata["size_categories"] == ["n<1K"] and metadata["task_categories"] == ["image-classification"]
    assert metadata["pretty_name"] == "MAD competition: digits"
    assert [config["data_files"] for config in metadata["configs"]] == [f"{t}.parquet" for t in TABLES]
    assert f"T = {competition.confidence_threshold}" in body and f"k = {competition.k} images" in body
    assert f"Panel of {competition.panel_size}" in body and f"Gold rate {competition.gold_rate}" in body
    assert f"- {len(voted.hashes)} images" in body
    alpha = competition_quality(db_session=db_session, competition=competition).alpha
    assert alpha is not None and f"gold left out, = {alpha:.3f}." in body
    for name, rows in written.rows.items():
        assert pq.read_metadata(bundle / f"{name}.parquet").num_rows == rows
        assert f"`{name}.parquet` ({rows} rows)" in body
    images = pq.read_table(bundle / "images.parquet")
    assert images.column("image_sha256").to_pylist() == voted.hashes
    assert {"source_uri", "source_url", "license", "author"} <= set(images.column_names)


def test_release_votes_name_annotators_only_by_pseudonym(db_session, settings, voted, tmp_path):
    bundle = release(db_session, settings, voted, tmp_path / "bundle").path
    votes = pq.read_table(bundle / "votes.parquet")
    assert "user_id" not in votes.column_names
    voters = {vote.user_id for vote in db_session.query(Vote)}
    key = pseudonym_key(settings.secret_key)
    names = {pseudonym(key, voted.competition.id, user_id) for user_id in voters}
    assert set(votes.column("annotator").to_pylist()) == names and len(names) == len(voters) == 3
    assert votes.num_rows == db_session.query(Vote).count()


def test_release_pseudonyms_are_stable_under_one_secret_and_not_under_the_cookie_key(
    db_session, settings, voted, tmp_path
):
    def annotators(bundle_settings, name):
        bundle = release(db_session, bundle_settings, voted, tmp_path / name).path
        return pq.read_table(bundle / "votes.parquet").column("annotator").to_pylist()

    first, second = annotators(settings, "first"), annotators(settings, "second")
    assert first == second
    other_secret = settings.model_copy(update={"secret_key": "another-deployment-secret-" + "y" * 32})
    assert set(annotators(other_secret, "other")).isdisjoint(first)
    voters = {vote.user_id for vote in db_session.query(Vote)}
    cookie_keyed = {  # what a release under the secret itself (the cookies' key) would have named them
        hmac.new(
            settings.secret_key.encode(), f"{voted.competition.id}:{user}".encode(), hashlib.sha256
        ).hexdigest()[:16]
        for user in voters
    }
    assert cookie_keyed.isdisjoint(first)


@pytest.mark.parametrize("secret_key", [DEVELOPMENT_SECRET_KEY, "short-secret"])
def test_release_refuses_the_development_key(db_session, settings, voted, tmp_path, secret_key):
    public = settings.model_copy(update={"secret_key": secret_key})
    with pytest.raises(InvalidInput, match="public development key"):
        release(db_session, public, voted, tmp_path / "bundle")
    assert not (tmp_path / "bundle").exists()


def test_release_refuses_a_destination_that_is_not_empty(db_session, settings, voted, tmp_path):
    releases = tmp_path / "releases"
    taken = releases / "taken"
    taken.mkdir(parents=True)
    (taken / "notes.txt").write_text("mine")
    with pytest.raises(InvalidInput, match="not empty"):
        release(db_session, settings, voted, taken)
    assert [path.name for path in taken.iterdir()] == ["notes.txt"]
    assert [path.name for path in releases.iterdir()] == ["taken"]
    empty = releases / "empty"
    empty.mkdir()
    release(db_session, settings, voted, empty)
    assert sorted(path.name for path in releases.iterdir()) == ["empty", "taken"]
    assert (empty / "README.md").is_file()


def test_release_command_writes_a_bundle_and_refuses_to_overwrite_it(tmp_path, fresh_database_url):
    env = {
        "MAD_DATABASE_URL": fresh_database_url,
        "MAD_DATA_DIR": str(tmp_path / "data"),
        "MAD_ENV": "development",
        "MAD_SECRET_KEY": DEVELOPMENT_SECRET_KEY,
    }
    taxonomy = tmp_path / "digits.yaml"
    taxonomy.write_text(DIGITS)
    runner = CliRunner()
    created = runner.invoke(cli, ["competitions", "create", "digits", "--taxonomy", str(taxonomy)], env=env)
    assert created.exit_code == 0, created.output
    out = tmp_path / "release"
    development = runner.invoke(cli, ["release", "-c", "digits", "--out", str(out)], env=env)
    assert development.exit_code == 1 and "public development key" in development.output
    assert "MAD_SECRET_KEY" in development.output and not out.exists()
    env["MAD_SECRET_KEY"] = TEST_SECRET_KEY
    usual = os.umask(0o022)  # the usual umask: a bundle made to publish is readable by all
    try:
        first = runner.invoke(cli, ["release", "-c", "digits", "--out", str(out)], env=env)
    finally:
        os.umask(usual)
    assert first.exit_code == 0, first.output
    assert "Wrote the release of digits" in first.output and (out / "README.md").is_file()
    assert stat.S_IMODE(out.stat().st_mode) == 0o755
    assert {stat.S_IMODE(path.stat().st_mode) for path in out.iterdir()} == {0o644}
    again = runner.invoke(cli, ["release", "-c", "digits", "--out", str(out)], env=env)
    assert again.exit_code == 1 and "not empty" in again.output
    unknown = runner.invoke(cli, ["release", "-c", "nope", "--out", str(tmp_path / "other")], env=env)
    assert unknown.exit_code == 1 and not (tmp_path / "other").exists()
