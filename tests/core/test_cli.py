"""`mad taxonomy matrix` and `mad simulate`, registered the way app/cli/main.py registers them."""

import json

import numpy as np
import typer
import yaml
from typer.testing import CliRunner

from app.cli.simulate import simulate
from app.cli.taxonomy import taxonomy_app
from app.core.taxonomy_sources import imagenet_1k

cli = typer.Typer()
cli.add_typer(taxonomy_app, name="taxonomy")
cli.command()(simulate)
runner = CliRunner()


def test_matrix_imagenet_1k(tmp_path):
    out = tmp_path / "imagenet.npy"
    result = runner.invoke(cli, ["taxonomy", "matrix", "imagenet-1k", "--out", str(out)])
    assert result.exit_code == 0, result.output
    matrix = np.load(out)
    assert matrix.shape == (1000, 1000) and matrix.dtype == np.float64
    taxonomy = imagenet_1k()
    assert matrix[taxonomy.index_of("n03388043"), taxonomy.index_of("n03028079")] == 0.0859375


def test_matrix_imagenet_a_and_custom_file(tmp_path):
    out = tmp_path / "a.npy"
    assert runner.invoke(cli, ["taxonomy", "matrix", "imagenet-a", "--out", str(out)]).exit_code == 0
    assert np.load(out).shape == (200, 200)
    spec = tmp_path / "digits.yaml"
    children = {"digit": ["round", "straight"], "round": ["0"], "straight": ["1", "7"]}
    spec.write_text(yaml.safe_dump({"root": "digit", "classes": ["0", "1", "7"], "children": children}))
    result = runner.invoke(cli, ["taxonomy", "matrix", str(spec), "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert np.load(out).tolist() == [[0.0, 3.0, 3.0], [3.0, 0.0, 1.0], [3.0, 1.0, 0.0]]


def test_matrix_reports_a_bad_taxonomy(tmp_path):
    spec = tmp_path / "loop.yaml"
    spec.write_text("root: a\nclasses: [b]\nchildren: {a: [b], b: [a]}\n")
    result = runner.invoke(cli, ["taxonomy", "matrix", str(spec), "--out", str(tmp_path / "x.npy")])
    assert result.exit_code == 1 and "cycle" in result.output
    result = runner.invoke(cli, ["taxonomy", "matrix", "imagenet-2k", "--out", str(tmp_path / "x.npy")])
    assert result.exit_code == 1 and "unknown taxonomy" in result.output


def test_simulate_json():
    arguments = ["simulate", "--classifiers", "11", "--k", "30", "--noise", "0.05", "--seeds", "5", "--json"]
    result = runner.invoke(cli, arguments)
    assert result.exit_code == 0, result.output
    study = json.loads(result.output)
    assert study["srcc_median_vs_truth"] >= 0.9 and len(study["seeds"]) == 5
    assert study["srcc_vs_full_mad"] >= 0.99
    assert study["config"]["classifiers"] == 11 and study["config"]["crowd"]["noise"] == 0.05


def test_simulate_table():
    result = runner.invoke(cli, ["simulate", "--classifiers", "4", "--k", "10", "--seeds", "2"])
    assert result.exit_code == 0, result.output
    assert "true rank" in result.output and "median SRCC over 2 seeds" in result.output


def test_simulate_compare_json_on_the_same_seeds():
    arguments = ["simulate", "--compare", "--json", "--classifiers", "5", "--k", "12", "--seeds", "2"]
    result = runner.invoke(cli, [*arguments, "--careless", "0.2", "--panel", "5", "--noise", "0.1"])
    assert result.exit_code == 0, result.output
    comparison = json.loads(result.output)
    figures = ("votes", "srcc_vs_full_mad", "srcc_vs_truth", "interval_width", "coverage_full_mad")
    figures += ("confident_swap_seeds", "wrong_decisions")
    assert {f"{key}_{policy}" for key in figures for policy in ("active", "uniform")} <= set(comparison)
    assert {"srcc_vs_full_mad_difference", "srcc_vs_full_mad_difference_se"} <= set(comparison)
    assert comparison["votes_ratio"] == comparison["votes_active"] / comparison["votes_uniform"]
    assert comparison["config"]["crowd"]["careless"] == 0.2 and comparison["config"]["seeds"] == 2
    assert all(0 <= comparison[f"coverage_full_mad_{policy}"] <= 1 for policy in ("active", "uniform"))


def test_simulate_compare_against_colluders_and_spammers_prints_wrong_decisions():
    arguments = ["simulate", "--compare", "--classifiers", "5", "--k", "12", "--seeds", "2", "--json"]
    for scenario in (["--colluders", "0.25"], ["--spammers", "0.2"]):
        comparison = json.loads(runner.invoke(cli, [*arguments, *scenario]).output)
        assert 0 <= comparison["wrong_decisions_active"] <= comparison["wrong_decisions_uniform"] + 0.05
    table = runner.invoke(cli, ["simulate", "--compare", "--classifiers", "4", "--k", "10", "--seeds", "2"])
    assert "SRCC against full MAD" in table.output
    assert "active − uniform over 2 paired seeds (0–1)" in table.output
    assert runner.invoke(cli, ["simulate", "--careless", "0.6", "--spammers", "0.6"]).exit_code == 2


def test_simulate_from_a_later_first_seed_runs_those_seeds():
    arguments = ["simulate", "--json", "--classifiers", "4", "--k", "10", "--seeds"]
    longer = json.loads(runner.invoke(cli, [*arguments, "3"]).output)
    later = json.loads(runner.invoke(cli, [*arguments, "2", "--first-seed", "1"]).output)
    assert [seed["seed"] for seed in later["seeds"]] == [1, 2] and later["config"]["first_seed"] == 1
    assert later["seeds"] == longer["seeds"][1:]  # the same competitions as seeds 1 and 2 of the longer study
    compared = ["simulate", "--compare", "--classifiers", "4", "--k", "10", "--seeds", "2"]
    assert "over 2 paired seeds (40–41)" in runner.invoke(cli, [*compared, "--first-seed", "40"]).output
    assert runner.invoke(cli, [*arguments, "2", "--first-seed", "-1"]).exit_code == 2


def test_simulate_policy_and_panel_are_checked():
    result = runner.invoke(cli, ["simulate", "--policy", "greedy"])
    assert result.exit_code == 2 and "uniform, active" in result.output
    assert runner.invoke(cli, ["simulate", "--panel", "4"]).exit_code == 2
    result = runner.invoke(
        cli, ["simulate", "--policy", "active", "--classifiers", "4", "--k", "10", "--seeds", "1"]
    )
    assert (
        result.exit_code == 0
        and "active labelling" in result.output
        and "votes per competition" in result.output
    )
