"""Revision 0003 upgrades a database made by 0001 that holds a competition and a selected pair: the
competition keeps the paper's absolute threshold, the pair has no diagnosis and still says why it is short,
the data-version triggers of 0001 still fire, and the downgrade gives the 0001 schema back, data kept."""

from datetime import UTC, datetime

from alembic import command
from sqlalchemy import MetaData, Table, func, inspect, select, update
from sqlalchemy.orm import Session

from app.competitions.models import Competition
from app.competitions.service import data_version
from app.core.threshold_rule import ThresholdRule
from app.db.engine import create_db_engine
from app.jobs.selections import pair_selections
from app.migrate import alembic_config

NOW = datetime(2026, 11, 30, tzinfo=UTC)


def fill_0001(connection) -> None:
    """A competition (k = 3, T = 0.8) with two ready classifiers and their pair, which selected one image."""
    tables = MetaData()
    table = lambda name: Table(name, tables, autoload_with=connection)  # noqa: E731
    connection.execute(
        table("competitions").insert(),
        dict(
            id=1, name="flickr", description="", guidelines="", taxonomy="imagenet-1k", taxonomy_source=None,
            class_keys=["n01", "n02"], class_names=["tench", "goldfish"], k=3, confidence_threshold=0.8,
            max_per_label=3, panel_size=5, smoothing=1.0, gold_rate=0.0, gold_threshold=0.0,
            gold_min_answers=10, members_only=False, created_at=NOW,
        ),
    )  # fmt: skip
    connection.execute(
        table("classifiers").insert(),
        [
            dict(
                id=id_, competition_id=1, name=name, source="predictions-file", status="ready", created_at=NOW
            )
            for id_, name in ((1, "resnet"), (2, "vit"))
        ],
    )
    connection.execute(
        table("images").insert(),
        dict(
            id=1,
            sha256="a" * 64,
            format="png",
            width=1,
            height=1,
            bytes=1,
            original_name="a.png",
            created_at=NOW,
        ),
    )
    connection.execute(
        table("competition_images").insert(),
        dict(competition_id=1, image_id=1, ordinal=0, excluded=False, added_at=NOW),
    )
    connection.execute(
        table("pair_subsets").insert(),
        dict(id=1, competition_id=1, classifier_a_id=1, classifier_b_id=2, created_at=NOW),
    )
    connection.execute(
        table("pair_images").insert(),
        dict(subset_id=1, position=0, image_id=1, role="selected", distance=2.0, label_a=0, label_b=1,
             prob_a=0.9, prob_b=0.85),
    )  # fmt: skip


def test_0003_upgrades_a_0001_database_with_a_selected_pair_and_downgrades_back(database_factory):
    url = database_factory.empty_url()
    engine = create_db_engine(url)
    try:
        command.upgrade(alembic_config(url), "0001")
        with engine.begin() as connection:
            fill_0001(connection)

        command.upgrade(alembic_config(url), "0003")
        with engine.connect() as connection:
            tables = MetaData()
            competitions = Table("competitions", tables, autoload_with=connection)
            subsets = Table("pair_subsets", tables, autoload_with=connection)
            assert connection.execute(select(competitions.c.threshold_rule)).scalar_one() == "absolute"
            assert connection.execute(select(subsets.c.diagnosis)).scalar_one() is None

        command.upgrade(alembic_config(url), "head")
        with Session(engine) as session:
            competition = session.get_one(Competition, 1)
            assert competition.threshold_rule == ThresholdRule.absolute
            (pair,) = pair_selections(db_session=session, competition=competition)
            assert (pair.classifier_a, pair.classifier_b, pair.selected, pair.k, pair.reserve) == (
                "resnet", "vit", 1, 3, 0
            )  # fmt: skip
            assert pair.diagnosis is None
            assert pair.shortfall == (
                "only 1 of its disagreements passed T = 0.8 and the cap of 3 images per label "
                "(selected before the reasons were kept: no diagnosis)"
            )
            before = data_version(db_session=session, competition_id=1)
            session.execute(update(Table("pair_subsets", MetaData(), autoload_with=session.connection()))
                            .values(diagnosis={"rule": "absolute"}))  # fmt: skip
            assert data_version(db_session=session, competition_id=1) > before  # 0001's triggers still fire
            session.rollback()

        command.downgrade(alembic_config(url), "0001")
        with engine.connect() as connection:
            assert "threshold_rule" not in {
                c["name"] for c in inspect(connection).get_columns("competitions")
            }
            assert "diagnosis" not in {c["name"] for c in inspect(connection).get_columns("pair_subsets")}
            tables = MetaData()
            for name, rows in (
                ("competitions", 1),
                ("classifiers", 2),
                ("pair_subsets", 1),
                ("pair_images", 1),
            ):
                counted = select(func.count()).select_from(Table(name, tables, autoload_with=connection))
                assert connection.execute(counted).scalar_one() == rows, name
    finally:
        engine.dispose()
