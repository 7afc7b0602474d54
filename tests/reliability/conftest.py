"""Reliability fixtures: the built competition of world.py on a committed database of its own, and its app."""

import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from app.db.engine import create_db_engine, create_sessionmaker
from app.main import create_app
from app.settings import Settings
from tests.conftest import settings_for
from tests.reliability.world import World, build_world

FUZZ_COUNTS: dict[str, int] = {}
"""Cases fuzzed per test id, reported at the end of the run."""


@pytest.fixture
def world_settings(tmp_path, fresh_database_url) -> Settings:
    """Settings of a committed database of this test's own and a temporary data dir."""
    return settings_for(tmp_path, fresh_database_url)


@pytest.fixture
def world(world_settings, tmp_path) -> World:
    """The competition of world.py, committed."""
    engine = create_db_engine(world_settings.sqlalchemy_url)
    try:
        with create_sessionmaker(engine)() as session:
            return build_world(session, world_settings, tmp_path)
    finally:
        engine.dispose()


@pytest.fixture
def world_app(world_settings, world) -> Iterator:
    """The application on the world's database (requests commit for real)."""
    application = create_app(world_settings)
    yield application
    application.state.engine.dispose()


def pytest_terminal_summary(terminalreporter) -> None:
    """Print how many cases each fuzz test tried; also write them as JSON to $MAD_FUZZ_REPORT when set."""
    if FUZZ_COUNTS:
        terminalreporter.section("fuzzing")
        for test_id, count in FUZZ_COUNTS.items():
            terminalreporter.write_line(f"{count} cases: {test_id}")
        report = os.environ.get("MAD_FUZZ_REPORT")
        if report:
            counts = {"cases": FUZZ_COUNTS, "total": sum(FUZZ_COUNTS.values())}
            Path(report).write_text(json.dumps(counts, indent=2) + "\n")
            terminalreporter.write_line(f"written to {report}")
