"""Reliability fixtures: the built competition of world.py on a committed database of its own, and its app."""

from collections.abc import Iterator

import pytest

from app.db.engine import create_db_engine, create_sessionmaker
from app.main import create_app
from app.settings import Settings
from tests.conftest import settings_for
from tests.reliability.world import World, build_world


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
