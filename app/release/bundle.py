"""`mad release`: the tables a lab publishes and their dataset card, written whole or not at all.

Every table is read in one session (the command makes it one REPEATABLE READ snapshot on Postgres, so the
leaderboard and the labels it comes from agree) and written as Parquet into a temporary directory beside
the destination, which is renamed into place at the end: a failure leaves no bundle, never half of one.
"""

import secrets
import shutil
from collections.abc import Iterator
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from sqlalchemy.orm import Session

from app.competitions.models import Competition
from app.errors import InvalidInput
from app.leaderboard.agreement import competition_quality
from app.leaderboard.exports import TABLES, ExportSource
from app.leaderboard.standings import compute_leaderboard
from app.release.card import dataset_card
from app.release.tables import (
    IMAGES_SCHEMA,
    adjudications_schema,
    images_batches,
    leaderboard_tables,
    pseudonymised_votes,
    snapshots_table,
    votes_schema,
    without_admins,
)
from app.settings import Settings

DEVELOPMENT_KEY_REFUSED = (
    "MAD_SECRET_KEY is the public development key (or shorter than 32 characters): anyone could recompute "
    "the annotators' pseudonyms from it. Release with the deployment's own MAD_SECRET_KEY, the one its "
    "server runs with (pseudonyms stay the same across releases only under the same key)"
)


@dataclass(frozen=True)
class Release:
    """A written bundle: where, and the rows of each of its tables in the order written."""

    path: Path
    rows: dict[str, int]


def refuse_unusable_destination(out: Path) -> None:
    """InvalidInput unless `out` is missing or an empty directory (a release never overwrites anything)."""
    if out.exists() and not out.is_dir():
        raise InvalidInput(f"--out {out}: a file is there; name a new or empty directory")
    if out.is_dir() and any(out.iterdir()):
        raise InvalidInput(f"--out {out}: the directory is not empty; name a new or empty directory")


def read_as_one_snapshot(db_session: Session) -> None:
    """Make the session's transaction one REPEATABLE READ snapshot on Postgres; call it before the session's
    first query (a SQLite transaction is one snapshot already)."""
    if db_session.get_bind().dialect.name == "postgresql":
        db_session.connection(execution_options={"isolation_level": "REPEATABLE READ"})


def write_release(
    *, db_session: Session, competition: Competition, settings: Settings, out: Path, license_id: str
) -> Release:
    """Write the competition's release bundle to `out` (missing or empty): Parquet tables and README.md
    (its YAML header names the license, a Hugging Face license id). InvalidInput with the development
    secret key: anyone could recompute the annotators' pseudonyms from it."""
    if not settings.has_real_secret_key:
        raise InvalidInput(DEVELOPMENT_KEY_REFUSED)
    refuse_unusable_destination(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    staging = out.parent / f".{out.name}-{secrets.token_hex(8)}"
    staging.mkdir()  # as readable as any new directory (0755 under the usual umask), not mkdtemp's 0700
    try:
        rows = _write_tables(db_session, competition, settings, staging)
        alpha = competition_quality(db_session=db_session, competition=competition).alpha
        card = dataset_card(
            competition=competition, bundle=staging, rows=rows, license_id=license_id, alpha=alpha
        )
        (staging / "README.md").write_text(card, encoding="utf-8")
        staging.rename(out)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return Release(out, rows)


def _write_tables(db_session: Session, competition: Competition, settings: Settings, into: Path) -> dict:
    """Write every table as <name>.parquet into the directory; {name: rows}."""
    source = ExportSource(lambda: nullcontext(db_session), competition, settings)
    votes, verdicts = TABLES["votes"], TABLES["adjudications"]
    streamed = {
        "images": (IMAGES_SCHEMA, images_batches(source, IMAGES_SCHEMA)),
        "subsets": _exported(source, "subsets"),
        "questions": _exported(source, "questions"),
        "votes": (
            votes_schema(votes.schema),
            pseudonymised_votes(votes.batches(source, votes.schema), source),
        ),
        "predictions": _exported(source, "predictions"),
        "adjudications": (
            adjudications_schema(verdicts.schema),
            without_admins(verdicts.batches(source, verdicts.schema)),
        ),
    }
    rows = {name: _write_parquet(into / f"{name}.parquet", *table) for name, table in streamed.items()}
    whole = leaderboard_tables(compute_leaderboard(db_session=db_session, competition=competition))
    whole["snapshots"] = snapshots_table(db_session, competition)
    for name, table in whole.items():
        rows[name] = _write_parquet(into / f"{name}.parquet", table.schema, iter(table.to_batches()))
    return rows


def _exported(source: ExportSource, name: str) -> tuple[pa.Schema, Iterator[pa.RecordBatch]]:
    """An admin export table's schema and batches."""
    table = TABLES[name]
    return table.schema, table.batches(source, table.schema)


def _write_parquet(path: Path, schema: pa.Schema, batches: Iterator[pa.RecordBatch]) -> int:
    """Write the batches as one Parquet file (a row group each); the rows written."""
    rows = 0
    with pq.ParquetWriter(path, schema) as writer:
        for batch in batches:
            writer.write_batch(batch)
            rows += batch.num_rows
    return rows
