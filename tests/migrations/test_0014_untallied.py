"""Revision 0014 turns the active policy's tally mark into rows: on a database at 0013 holding a competition
whose policy tallied the questions decided up to a time, the upgrade leaves exactly the regular questions
decided after it to the next tally (every decided one where the policy never ran), and the downgrade gives
the mark back."""

from datetime import datetime, timedelta

from alembic import command
from sqlalchemy import text

from app.db.engine import create_db_engine
from app.migrate import alembic_config, upgrade
from tests.migrations.test_upgrades import seeded_database


def naive(value: datetime | str) -> datetime:
    """A stored time as a naive datetime (SQLite returns it as text to a textual query)."""
    return (datetime.fromisoformat(value) if isinstance(value, str) else value).replace(tzinfo=None)


def untallied(connection) -> list[int]:
    """The question ids left to the next tally."""
    return list(connection.scalars(text("SELECT question_id FROM untallied_decisions ORDER BY question_id")))


def test_0014_leaves_the_decisions_after_the_mark_to_the_next_tally_and_downgrades_to_the_mark(
    database_factory,
):
    url = database_factory.empty_url()
    seeded_database(url, "0013")
    engine = create_db_engine(url)
    try:
        with engine.begin() as connection:
            decided = connection.execute(
                text(
                    "SELECT id, decided_at FROM questions WHERE outcome IS NOT NULL AND gold_answer IS NULL "
                    "ORDER BY id"
                )
            ).all()
            assert len(decided) >= 2, "the seed decides two questions or more"
            (first, first_at), (second, _) = decided[0], decided[1]
            later = naive(first_at) + timedelta(seconds=1)
            connection.execute(  # the second decided after the first, on a server whose clock ran later
                text("UPDATE questions SET decided_at = :later WHERE id = :id"),
                {"later": later, "id": second},
            )
            connection.execute(
                text(
                    "INSERT INTO active_policies (competition_id, decided_since_refresh, informative_pairs, "
                    "full_design_votes, tallied_through, decided_yes, decided_regular) "
                    "SELECT competition_id, 0, '[]', 0, :mark, 1, 1 FROM questions WHERE id = :id"
                ),
                {"mark": first_at, "id": first},
            )
            others = [row.id for row in decided[2:]]

        upgrade(url, "0014")
        with engine.connect() as connection:
            assert untallied(connection) == sorted([second, *others])

        command.downgrade(alembic_config(url), "0013")
        with engine.connect() as connection:
            mark = connection.scalar(text("SELECT tallied_through FROM active_policies"))
            assert naive(mark) == naive(first_at)
    finally:
        engine.dispose()
