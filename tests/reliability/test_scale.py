"""A small run of benchmarks/scale.py (2,000 images, 4 classifiers) on each database, so the script and the
pipeline it measures (prediction uploads, select jobs through a real worker, questions, votes, the
leaderboard) cannot rot."""

import json
import subprocess
import sys
from pathlib import Path

REPOSITORY = Path(__file__).resolve().parents[2]


def test_a_small_scale_run_goes_end_to_end_and_reports_every_figure(fresh_database_url):
    command = [sys.executable, "benchmarks/scale.py", "--json", "--images", "2000", "--classifiers", "4"]
    command += ["--baseline-images", "0", "--database-url", fresh_database_url]
    run = subprocess.run(command, cwd=REPOSITORY, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    result = json.loads(run.stdout.strip().splitlines()[-1])
    assert result["images"] == 2000 and result["pairs"] == 6 and result["ranked"] == 4
    assert result["questions"] > 0 and result["answers"] >= 2 * result["questions"]  # a majority of 3
    for figure in ("upload_s", "select_s", "questions_s", "leaderboard_ms", "server_rss_mb", "worker_rss_mb"):
        assert result[figure] > 0
    assert result["peak_rss_mb"] == max(result["server_rss_mb"], result["worker_rss_mb"])
