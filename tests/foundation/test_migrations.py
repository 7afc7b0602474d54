"""Alembic builds the whole schema from empty, matches the models exactly, and tears down to base."""

import logging

import pytest
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import column, inspect, select, table, text
from sqlalchemy.exc import IntegrityError

from app.db.base import utcnow
from app.db.engine import create_db_engine
from app.migrate import alembic_config, check_current, head_revision
from app.models import Base


def test_upgrade_from_empty_has_no_drift_and_downgrades_to_base(database_factory):
    url = database_factory.empty_url()
    engine = create_db_engine(url)
    try:
        command.upgrade(alembic_config(url), "head")
        check_current(engine)
        with engine.connect() as connection:
            context = MigrationContext.configure(
                connection,
                opts={"compare_type": True, "render_as_batch": connection.dialect.name == "sqlite"},
            )
            assert compare_metadata(context, Base.metadata) == []
            assert set(inspect(connection).get_table_names()) == set(Base.metadata.tables) | {
                "alembic_version"
            }

        command.downgrade(alembic_config(url), "base")
        with engine.connect() as connection:
            assert set(inspect(connection).get_table_names()) == {"alembic_version"}
            assert MigrationContext.configure(connection).get_current_revision() is None

        command.upgrade(alembic_config(url), "head")
        with engine.connect() as connection:
            assert MigrationContext.configure(connection).get_current_revision() == head_revision()
    finally:
        engine.dispose()


ACCOUNTS_AT_0001 = [  # id, username, role: names that collide once case and Unicode form are set aside
    (1, "admin", "admin"),
    (2, "Admin", "annotator"),
    (3, "ＡＤＭＩＮ", "annotator"),  # fullwidth letters: NFKC makes them ADMIN
    (4, "admin-2", "annotator"),  # takes the name account 2 would get first
    (5, "Local-Worker", "annotator"),  # an invitee in the service's own worker's name
    (6, "local-worker", "worker"),  # the service's own worker keeps its name
    (7, "bob", "annotator"),
]


def test_upgrading_to_username_keys_renames_colliding_accounts_and_keeps_their_data(database_factory, caplog):
    url = database_factory.empty_url()
    engine = create_db_engine(url)
    users = table(
        "users",
        *(column(name) for name in ("id", "username", "role", "is_active", "votes_excluded")),
        *(column(name) for name in ("session_generation", "created_at")),
    )
    tokens = table("api_tokens", *(column(name) for name in ("user_id", "name", "token_hash", "created_at")))
    try:
        command.upgrade(alembic_config(url), "0001")
        with engine.begin() as connection:
            now = utcnow()
            connection.execute(
                users.insert(),
                [
                    dict(id=id_, username=name, role=role, is_active=True, votes_excluded=False)
                    | dict(session_generation=0, created_at=now)
                    for id_, name, role in ACCOUNTS_AT_0001
                ],
            )
            connection.execute(
                tokens.insert(), [dict(user_id=2, name="script", token_hash="a" * 64, created_at=now)]
            )
        with caplog.at_level(logging.WARNING):
            command.upgrade(alembic_config(url), "0002")
        with engine.connect() as connection:
            names = dict(connection.execute(select(users.c.id, users.c.username)).all())
            assert names == {
                1: "admin",
                2: "Admin-2-2",
                3: "ＡＤＭＩＮ-3",
                4: "admin-2",
                5: "Local-Worker-5",
                6: "local-worker",
                7: "bob",
            }
            assert connection.execute(select(tokens.c.user_id)).scalars().all() == [2]  # nothing cascaded
        warned = [record.getMessage() for record in caplog.records if record.levelno == logging.WARNING]
        assert len(warned) == 3 and all("tell its owner their new username" in text for text in warned)
        assert "'Admin' to 'Admin-2-2'" in warned[0] and "'Local-Worker' to 'Local-Worker-5'" in warned[2]
        with pytest.raises(IntegrityError), engine.begin() as connection:
            connection.execute(
                text(
                    "INSERT INTO users (username, username_key, role, is_active, votes_excluded, "
                    "session_generation, created_at) VALUES ('BOB', 'bob', 'annotator', true, false, 0, "
                    "CURRENT_TIMESTAMP)"
                )
            )
        command.downgrade(alembic_config(url), "0001")
        command.upgrade(alembic_config(url), "0002")  # the renamed names stay; nothing collides any more
        with engine.connect() as connection:
            assert dict(connection.execute(select(users.c.id, users.c.username)).all()) == names
    finally:
        engine.dispose()
