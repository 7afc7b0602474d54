"""A short run of benchmarks/soak.py on Postgres (3 annotators, 1 worker), so the script cannot rot.

The script exits 0 only when the votes the annotators sent equal the votes recorded, nothing failed and
the worker finished some job; the run's JSON is checked as well. The load lasts 24 s, long enough for a
worker to start (torch) and finish a small job on a busy machine.
"""

import json
import subprocess
import sys
from pathlib import Path

REPOSITORY = Path(__file__).resolve().parents[2]


def test_a_short_soak_passes_and_reports_what_it_measured():
    command = [sys.executable, "benchmarks/soak.py", "--minutes", "0.4", "--json"]
    command += ["--annotators", "3", "--workers", "1", "--questions", "300", "--images", "40"]
    command += ["--feed-s", "5", "--baseline-requests", "40"]
    run = subprocess.run(command, cwd=REPOSITORY, capture_output=True, text=True, timeout=600)
    results = json.loads(run.stdout.strip().splitlines()[-1])
    assert run.returncode == 0, (results, run.stderr[-2000:])
    assert results["votes_sent"] == results["votes_recorded"] > 0
    assert results["errors"] == 0 and results["error_examples"] == []
    assert results["jobs_done"] > 0 and results["images_uploaded"] > 0
    assert results["baseline_requests"] == 40 and results["baseline_p99_ms"] > 0
    assert results["p99_ms"] > 0 and results["p99_vs_baseline"] > 0
