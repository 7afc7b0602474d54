"""The release bundle's tables beyond the admin exports: images with provenance, the leaderboard's three
tables, snapshots, the votes with annotators pseudonymised and the adjudications without admins' names."""

import hashlib
import hmac
import json
import types
from collections.abc import Iterator, Sequence
from typing import Union, get_args, get_origin

import pyarrow as pa
from sqlalchemy import Row, select
from sqlalchemy.orm import Session

from app.competitions.models import Competition
from app.images.models import CompetitionImage, Image
from app.leaderboard.exports import BATCH_ROWS, TIMESTAMP, ExportSource, rows_in_batches
from app.leaderboard.schemas import ClassifierStanding, LeaderboardRead
from app.leaderboard.snapshots import list_snapshots
from app.leaderboard.tables import PAIR_COLUMNS, SUMMARY_COLUMNS, classifier_rows, pair_rows, summary_rows

IMAGES_SCHEMA = pa.schema(
    [
        ("ordinal", pa.int64()),
        ("image_sha256", pa.string()),
        ("format", pa.string()),
        ("width", pa.int32()),
        ("height", pa.int32()),
        ("bytes", pa.int64()),
        ("source_uri", pa.string()),
        ("source_url", pa.string()),
        ("license", pa.string()),
        ("author", pa.string()),
        ("excluded", pa.bool_()),
        ("excluded_reason", pa.string()),
        ("added_at", TIMESTAMP),
    ]
)


def images_batches(source: ExportSource, schema: pa.Schema) -> Iterator[pa.RecordBatch]:
    """Every image of the competition by ordinal, with where it was read and its source, license, author."""

    def query(session: Session, after: tuple | None) -> Sequence[Row]:
        statement = (
            select(CompetitionImage, Image)
            .join(Image, Image.id == CompetitionImage.image_id)
            .where(CompetitionImage.competition_id == source.competition.id)
            .order_by(CompetitionImage.ordinal)
            .limit(BATCH_ROWS)
        )
        if after is not None:
            statement = statement.where(CompetitionImage.ordinal > after[0])
        return session.execute(statement).all()

    def row(result, _competition: Competition) -> tuple[tuple, dict]:
        member, image = result.CompetitionImage, result.Image
        return (member.ordinal,), {
            "ordinal": member.ordinal,
            "image_sha256": image.sha256,
            "format": image.format,
            "width": image.width,
            "height": image.height,
            "bytes": image.bytes,
            "source_uri": image.source_uri,
            "source_url": image.source_url,
            "license": image.license,
            "author": image.author,
            "excluded": member.excluded,
            "excluded_reason": member.excluded_reason,
            "added_at": member.added_at,
        }

    return rows_in_batches(source, schema, query, row)


PSEUDONYM_KEY_LABEL = b"mad-arena/release-pseudonyms/v1"
"""What the pseudonyms' key is derived for, so that it is no other use's key (the secret signs cookies)."""


def pseudonym_key(secret_key: str) -> bytes:
    """The key of release pseudonyms: HMAC-SHA256(MAD_SECRET_KEY, PSEUDONYM_KEY_LABEL), HKDF-Expand's
    one-block output (RFC 5869) with the secret as its key; a pseudonym reveals nothing of the secret."""
    return hmac.new(secret_key.encode(), PSEUDONYM_KEY_LABEL + b"\x01", hashlib.sha256).digest()


def pseudonym(key: bytes, competition_id: int, user_id: int) -> str:
    """An annotator's name in a release: HMAC-SHA256(pseudonym key, "competition:user"), first 16 hex
    digits; stable across releases of one competition under one secret, unlinkable across competitions and
    irreversible without it."""
    message = f"{competition_id}:{user_id}".encode()
    return hmac.new(key, message, hashlib.sha256).hexdigest()[:16]


def pseudonymised_votes(batches: Iterator[pa.RecordBatch], source: ExportSource) -> Iterator[pa.RecordBatch]:
    """The votes export with its user_id column replaced by the annotator's pseudonym."""
    key = pseudonym_key(source.settings.secret_key)
    for batch in batches:
        names = [
            pseudonym(key, source.competition.id, user_id) for user_id in batch.column("user_id").to_pylist()
        ]
        index = batch.schema.get_field_index("user_id")
        yield batch.drop_columns(["user_id"]).add_column(index, "annotator", pa.array(names, pa.string()))


def votes_schema(export_schema: pa.Schema) -> pa.Schema:
    """The votes export's schema with user_id replaced by the annotator's pseudonym."""
    index = export_schema.get_field_index("user_id")
    return export_schema.remove(index).insert(index, pa.field("annotator", pa.string()))


def without_admins(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """The adjudications export without decided_by (admins are named by their accounts)."""
    for batch in batches:
        yield batch.drop_columns(["decided_by"])


def adjudications_schema(export_schema: pa.Schema) -> pa.Schema:
    """The adjudications export's schema without decided_by."""
    return export_schema.remove(export_schema.get_field_index("decided_by"))


ARROW_TYPES = {int: pa.int64(), float: pa.float64(), str: pa.string(), bool: pa.bool_()}


def _arrow_type(annotation) -> pa.DataType:
    """The Arrow type of a standing field: int, float, str, bool or an enum of strings, maybe None."""
    if get_origin(annotation) in (Union, types.UnionType):
        (annotation,) = [arg for arg in get_args(annotation) if arg is not type(None)]
    return ARROW_TYPES.get(annotation, pa.string())


STANDINGS_SCHEMA = pa.schema(
    [(name, _arrow_type(field.annotation)) for name, field in ClassifierStanding.model_fields.items()]
)
PAIR_TYPES = (pa.int64(), pa.string(), pa.int64(), pa.string(), pa.float64(), pa.float64(), *[pa.int64()] * 3)
PAIRS_SCHEMA = pa.schema(list(zip(PAIR_COLUMNS, PAIR_TYPES, strict=True)))
SUMMARY_TYPES = (pa.int64(), pa.string(), pa.float64(), pa.int64(), *[pa.float64()] * 4, pa.int64())
SUMMARY_TYPES += (*[pa.float64()] * 3, pa.int64(), pa.int64(), pa.float64(), pa.int64())
SUMMARY_SCHEMA = pa.schema(list(zip(SUMMARY_COLUMNS, SUMMARY_TYPES, strict=True)))


def leaderboard_tables(leaderboard: LeaderboardRead) -> dict[str, pa.Table]:
    """The leaderboard's standings, pairs (A, B, n in long form) and summary as Arrow tables."""
    return {
        "leaderboard": pa.Table.from_pylist(classifier_rows(leaderboard), schema=STANDINGS_SCHEMA),
        "leaderboard_pairs": pa.Table.from_pylist(pair_rows(leaderboard), schema=PAIRS_SCHEMA),
        "leaderboard_summary": pa.Table.from_pylist(summary_rows(leaderboard), schema=SUMMARY_SCHEMA),
    }


SNAPSHOTS_SCHEMA = pa.schema(
    [
        ("slug", pa.string()),
        ("note", pa.string()),
        ("created_at", TIMESTAMP),
        ("leaderboard_json", pa.string()),
    ]
)


def snapshots_table(session: Session, competition: Competition) -> pa.Table:
    """The competition's frozen leaderboards, oldest first, each with its stored numbers as JSON (who froze
    it is left out: admins are named by their accounts)."""
    rows = [
        {
            "slug": snapshot.slug,
            "note": snapshot.note,
            "created_at": snapshot.created_at,
            "leaderboard_json": json.dumps(snapshot.leaderboard, ensure_ascii=False),
        }
        for snapshot in reversed(list_snapshots(db_session=session, competition_id=competition.id))
    ]
    return pa.Table.from_pylist(rows, schema=SNAPSHOTS_SCHEMA)
