"""A small `make demo ARGS=--simulate`: real digits, timm training, worker, HTTP labelling, leaderboard, and
the agreement α of the simulated panel."""

import re

from typer.testing import CliRunner

from app.cli.main import app as cli


def test_small_simulated_demo_ends_with_the_srcc_and_agreement_line_and_reruns_from_what_exists(tmp_path):
    env = {"MAD_DATA_DIR": str(tmp_path / "demo-data"), "MAD_ENV": "development", "COLUMNS": "200"}
    arguments = ["demo", "--simulate", "--images", "300", "--training-steps", "15"]

    first = CliRunner().invoke(cli, arguments, env=env, catch_exceptions=False)
    assert first.exit_code == 0, first.output
    assert "300 added" in first.output
    assert re.search(r"trained resnet18 on \d+ digits", first.output)
    line = r"^SRCC\(MAD rank, true accuracy rank\) = (-?[01]\.\d{3}) · agreement α = (-?[01]\.\d{3})$"
    match = re.search(line, first.output, re.MULTILINE)
    assert match and -1 <= float(match.group(1)) <= 1 and -1 <= float(match.group(2)) <= 1
    assert first.output.rstrip().endswith(match.group(0))

    second = CliRunner().invoke(cli, arguments, env=env, catch_exceptions=False)
    assert second.exit_code == 0, second.output
    assert "0 added" in second.output and "trained" not in second.output and "0 jobs run" in second.output
    assert re.search(r"^SRCC\(MAD rank, true accuracy rank\) = ", second.output, re.MULTILINE)
