"""Public reads under anonymous load: a classifier analysis cold (the labels just changed) and cached, and an
annotator's next-item request alone and beside anonymous readers.

On the competition `mad demo --simulate` makes (1,797 UCI digits, five timm classifiers, every question
voted) in --data-dir (made there first, which takes minutes, unless it exists), served by one uvicorn
process on its SQLite file:

- `cold_ms`: GET /api/v1/classifiers/{id}/analysis right after the competition's data version was raised
  (as a decided label raises it), median of --requests; `cached_ms`: the same without a change;
  `ratio`: cold over cached.
- `next_alone_p99_ms`: an annotator's POST …/labelling/next, alone; `next_loaded_p99_ms`: the same while
  --loops anonymous clients request the analysis back to back; `next_ratio`: loaded over alone.

    .venv/bin/python benchmarks/public_reads.py [--json] [--data-dir /tmp/mad-demo] [--requests 20]
        [--loops 8]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
from sqlalchemy import text

REPOSITORY = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPOSITORY))

from app.db.engine import create_db_engine, create_sessionmaker  # noqa: E402
from app.users import service as users_service  # noqa: E402
from app.users.models import Role  # noqa: E402
from benchmarks.local_server import free_port, start_uvicorn, stop_uvicorn  # noqa: E402


def environment(data_dir: Path) -> dict[str, str]:
    """The service's settings: the demo's SQLite file and data dir."""
    return {
        **os.environ,
        "MAD_DATA_DIR": str(data_dir),
        "MAD_DATABASE_URL": f"sqlite:///{data_dir}/mad.sqlite3",
    }


def ensure_demo(data_dir: Path) -> None:
    """`mad demo --simulate` in data_dir unless its database is there."""
    if not (data_dir / "mad.sqlite3").exists():
        data_dir.mkdir(parents=True, exist_ok=True)
        command = [sys.executable, "-c", "from app.cli.main import app; app()", "demo", "--simulate"]
        subprocess.run(
            command, cwd=REPOSITORY, env=environment(data_dir), check=True, stdout=subprocess.DEVNULL
        )


def annotator_token(url: str) -> str:
    """The API token of a new annotator account."""
    engine = create_db_engine(url)
    try:
        with create_sessionmaker(engine)() as session:
            name = f"bench-{time.time_ns()}"
            user = users_service.create_user(
                db_session=session, username=name, role=Role.annotator, password="benchmark password"
            )
            token = users_service.create_api_token(db_session=session, user=user, name="bench")
            session.commit()
            return token
    finally:
        engine.dispose()


def raise_version(url: str, competition_id: int) -> None:
    """Raise the competition's data version as a decided label does (a no-op update fires the trigger)."""
    engine = create_db_engine(url)
    try:
        with engine.begin() as connection:
            statement = text("UPDATE competitions SET description = description WHERE id = :id")
            connection.execute(statement, {"id": competition_id})
    finally:
        engine.dispose()


def timed_ms(send) -> float:
    """Milliseconds of one request; it must succeed."""
    started = time.perf_counter()
    response = send()
    assert response.status_code == 200, response.text[:300]
    return (time.perf_counter() - started) * 1000


def p99(values: list[float]) -> float:
    """The 99th percentile."""
    return statistics.quantiles(values, n=100)[98]


def run(args: argparse.Namespace) -> dict:
    """Start the server, measure, stop it."""
    ensure_demo(args.data_dir)
    env = environment(args.data_dir)
    database_url = env["MAD_DATABASE_URL"]
    headers = {"Authorization": f"Bearer {annotator_token(database_url)}"}
    port = free_port()
    server = start_uvicorn(env, port, stderr=subprocess.DEVNULL)
    base = f"http://127.0.0.1:{port}"
    try:
        with httpx.Client(base_url=base, timeout=300) as http:
            competition_id = http.get("/api/v1/competitions").json()[0]["id"]
            classifier_id = http.get(f"/api/v1/competitions/{competition_id}/classifiers").json()[0]["id"]
            analysis = f"/api/v1/classifiers/{classifier_id}/analysis"
            cold = []
            for _ in range(args.requests):
                raise_version(database_url, competition_id)
                cold.append(timed_ms(lambda: http.get(analysis)))
            cached = [timed_ms(lambda: http.get(analysis)) for _ in range(args.requests)]
            next_url = f"/api/v1/competitions/{competition_id}/labelling/next"
            ask_next = lambda: http.post(next_url, headers=headers)  # noqa: E731
            alone = [timed_ms(ask_next) for _ in range(args.requests * 5)]
            stop = threading.Event()

            def reader() -> None:
                with httpx.Client(base_url=base, timeout=300) as anonymous:
                    while not stop.is_set():
                        anonymous.get(analysis)

            readers = [threading.Thread(target=reader) for _ in range(args.loops)]
            for thread in readers:
                thread.start()
            time.sleep(1)
            loaded = [
                timed_ms(lambda: http.post(next_url, headers=headers)) for _ in range(args.requests * 5)
            ]
            stop.set()
            for thread in readers:
                thread.join()
    finally:
        stop_uvicorn(server)
    cold_ms, cached_ms = statistics.median(cold), statistics.median(cached)
    return {
        "cold_ms": round(cold_ms, 1),
        "cached_ms": round(cached_ms, 2),
        "ratio": round(cold_ms / cached_ms, 1),
        "next_alone_p99_ms": round(p99(alone), 1),
        "next_loaded_p99_ms": round(p99(loaded), 1),
        "next_ratio": round(p99(loaded) / p99(alone), 2),
        "loops": args.loops,
        "requests": args.requests,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    parser.add_argument("--data-dir", type=Path, default=Path("/tmp/mad-demo"), help="the demo's data dir")
    parser.add_argument("--requests", type=int, default=20, help="timed analysis requests of each kind")
    parser.add_argument("--loops", type=int, default=8, help="anonymous readers beside the annotator")
    args = parser.parse_args()
    results = run(args)
    if args.json:
        print(json.dumps(results))
    else:
        for key, value in results.items():
            print(f"{key}: {value}")


if __name__ == "__main__":
    main()
