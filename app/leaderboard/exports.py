"""Exports of votes, questions, pair subsets, adjudications and prediction summaries as CSV, Parquet or JSON
Lines.

Rows are read in batches of BATCH_ROWS, each in its own short transaction (keyset pagination), so a large
export never holds a database lock for long and never holds the table in memory. CSV and JSON Lines are
streamed as they are read; Parquet is written batch by batch (one row group each) to a temporary file
that is then streamed. Together with the public classifiers list and competition (smoothing, k), the
subsets export is enough to recompute the leaderboard: a pair's labels are its `selected` rows whose
outcome_a and outcome_b are both known; with the questions export's decision times, its history too.
"""

import io
import json
import tempfile
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from datetime import datetime
from typing import Literal

import numpy as np
import pyarrow as pa
import pyarrow.csv as pa_csv
import pyarrow.parquet as pq
from sqlalchemy import Row, select, tuple_
from sqlalchemy.orm import Session, aliased

from app.classifiers.models import Classifier
from app.classifiers.service import list_classifiers, readable_predictions
from app.competitions.models import Competition
from app.csv_cells import neutralised_batch
from app.images.models import CompetitionImage, Image
from app.images.service import competition_image_count
from app.labelling.models import Adjudication, PairImage, PairSubset, Question, Vote
from app.labelling.results import QUESTION_A, QUESTION_B, with_pair_questions
from app.settings import Settings
from app.users.models import User

BATCH_ROWS = 5000
STREAM_CHUNK_BYTES = 1024 * 1024
ExportFormat = Literal["csv", "parquet", "jsonl"]
MEDIA_TYPES: dict[str, str] = {
    "csv": "text/csv; charset=utf-8",
    "parquet": "application/vnd.apache.parquet",
    "jsonl": "application/x-ndjson",
}
TIMESTAMP = pa.timestamp("us", tz="UTC")


@dataclass(frozen=True)
class ExportSource:
    """What an export reads: the session factory, the competition and the settings (prediction store)."""

    sessions: Callable[[], AbstractContextManager[Session]]
    competition: Competition
    settings: Settings


@dataclass(frozen=True)
class ExportTable:
    """One exportable table: its columns and a reader yielding record batches of them."""

    name: str
    schema: pa.Schema
    batches: Callable[[ExportSource, pa.Schema], Iterator[pa.RecordBatch]]


def rows_in_batches(
    source: ExportSource, schema: pa.Schema, query: Callable[[Session, tuple | None], Sequence[Row]], row
) -> Iterator[pa.RecordBatch]:
    """Record batches from `query(session, after)`, which returns up to BATCH_ROWS rows after the keyset
    position `after` (None at the start); `row(result, competition)` gives a row's (key, values)."""
    after = None
    while True:
        with source.sessions() as session:
            results = query(session, after)
        if not results:
            return
        keyed = [row(result, source.competition) for result in results]
        after = keyed[-1][0]
        yield pa.RecordBatch.from_pylist([values for _, values in keyed], schema=schema)
        if len(results) < BATCH_ROWS:
            return


# Votes (admin) ---------------------------------------------------------------------------------------------

VOTES_SCHEMA = pa.schema(
    [
        ("vote_id", pa.int64()),
        ("question_id", pa.int64()),
        ("image_sha256", pa.string()),
        ("class_index", pa.int32()),
        ("class_key", pa.string()),
        ("user_id", pa.int64()),
        ("answer", pa.bool_()),
        ("seconds", pa.float64()),
        ("created_at", TIMESTAMP),
        ("gold", pa.bool_()),
        ("counted", pa.bool_()),
    ]
)


def _votes_batches(source: ExportSource, schema: pa.Schema) -> Iterator[pa.RecordBatch]:
    """Every vote, by id; `counted`: it counts towards its question's majority (not gold, not excluded)."""

    def query(session: Session, after: tuple | None) -> Sequence[Row]:
        statement = (
            select(Vote, Question.class_index, Question.gold_answer, Image.sha256, User.votes_excluded)
            .join(Question, Question.id == Vote.question_id)
            .join(Image, Image.id == Question.image_id)
            .join(User, User.id == Vote.user_id)
            .where(Question.competition_id == source.competition.id)
            .order_by(Vote.id)
            .limit(BATCH_ROWS)
        )
        if after is not None:
            statement = statement.where(Vote.id > after[0])
        return session.execute(statement).all()

    def row(result, competition: Competition) -> tuple[tuple, dict]:
        vote = result.Vote
        return (vote.id,), {
            "vote_id": vote.id,
            "question_id": vote.question_id,
            "image_sha256": result.sha256,
            "class_index": result.class_index,
            "class_key": str(competition.class_keys[result.class_index]),
            "user_id": vote.user_id,
            "answer": vote.answer,
            "seconds": vote.seconds,
            "created_at": vote.created_at,
            "gold": result.gold_answer is not None,
            "counted": result.gold_answer is None and not result.votes_excluded,
        }

    return rows_in_batches(source, schema, query, row)


# Questions (admin) -----------------------------------------------------------------------------------------

QUESTIONS_SCHEMA = pa.schema(
    [
        ("question_id", pa.int64()),
        ("image_sha256", pa.string()),
        ("class_index", pa.int32()),
        ("class_key", pa.string()),
        ("class_name", pa.string()),
        ("outcome", pa.bool_()),
        ("decided_at", TIMESTAMP),
        ("gold_answer", pa.bool_()),
        ("yes_votes", pa.int32()),
        ("no_votes", pa.int32()),
    ]
)


def _questions_batches(source: ExportSource, schema: pa.Schema) -> Iterator[pa.RecordBatch]:
    """Every question (image, class) with its outcome (null while open) and its counted votes."""

    def query(session: Session, after: tuple | None) -> Sequence[Row]:
        statement = (
            select(Question, Image.sha256)
            .join(Image, Image.id == Question.image_id)
            .where(Question.competition_id == source.competition.id)
            .order_by(Question.id)
            .limit(BATCH_ROWS)
        )
        if after is not None:
            statement = statement.where(Question.id > after[0])
        return session.execute(statement).all()

    def row(result, competition: Competition) -> tuple[tuple, dict]:
        question = result.Question
        return (question.id,), {
            "question_id": question.id,
            "image_sha256": result.sha256,
            "class_index": question.class_index,
            "class_key": str(competition.class_keys[question.class_index]),
            "class_name": str(competition.class_names[question.class_index]),
            "outcome": question.outcome,
            "decided_at": question.decided_at,
            "gold_answer": question.gold_answer,
            "yes_votes": question.yes_votes,
            "no_votes": question.no_votes,
        }

    return rows_in_batches(source, schema, query, row)


# Subsets (admin) -----------------------------------------------------------------------------------------

SUBSETS_SCHEMA = pa.schema(
    [
        ("classifier_a_id", pa.int64()),
        ("classifier_a", pa.string()),
        ("classifier_b_id", pa.int64()),
        ("classifier_b", pa.string()),
        ("subset_created_at", TIMESTAMP),
        ("position", pa.int32()),
        ("role", pa.string()),
        ("image_sha256", pa.string()),
        ("distance", pa.float64()),
        ("label_a", pa.int32()),
        ("label_a_key", pa.string()),
        ("label_b", pa.int32()),
        ("label_b_key", pa.string()),
        ("prob_a", pa.float64()),
        ("prob_b", pa.float64()),
        ("below_threshold", pa.bool_()),
        ("outcome_a", pa.bool_()),
        ("outcome_b", pa.bool_()),
        ("image_source_uri", pa.string()),
        ("image_source_url", pa.string()),
        ("image_license", pa.string()),
        ("image_author", pa.string()),
    ]
)


def _subsets_batches(source: ExportSource, schema: pa.Schema) -> Iterator[pa.RecordBatch]:
    """Every pair's images in selection order (selected, reserve, discarded) with both predictions, whether
    a `fill` selection took the image below T, their decided outcomes (does the image contain label_a /
    label_b; null while open), when the pair was selected (the ranking history counts a pair image from the
    later of its decisions and its selection) and the image's provenance (where it was imported from; source
    page, license and author)."""
    classifier_a, classifier_b = aliased(Classifier), aliased(Classifier)

    def query(session: Session, after: tuple | None) -> Sequence[Row]:
        statement = (
            with_pair_questions(
                select(
                    PairImage,
                    PairSubset.classifier_a_id,
                    classifier_a.name.label("classifier_a"),
                    PairSubset.classifier_b_id,
                    classifier_b.name.label("classifier_b"),
                    PairSubset.created_at.label("subset_created_at"),
                    Image,
                    QUESTION_A.outcome.label("outcome_a"),
                    QUESTION_B.outcome.label("outcome_b"),
                )
                .join(PairSubset, PairSubset.id == PairImage.subset_id)
                .join(classifier_a, classifier_a.id == PairSubset.classifier_a_id)
                .join(classifier_b, classifier_b.id == PairSubset.classifier_b_id)
                .join(Image, Image.id == PairImage.image_id),
                decided=False,
            )
            .where(PairSubset.competition_id == source.competition.id)
            .order_by(PairImage.subset_id, PairImage.position)
            .limit(BATCH_ROWS)
        )
        if after is not None:
            statement = statement.where(tuple_(PairImage.subset_id, PairImage.position) > after)
        return session.execute(statement).all()

    def row(result, competition: Competition) -> tuple[tuple, dict]:
        pair_image, image = result.PairImage, result.Image
        keys = competition.class_keys
        return (pair_image.subset_id, pair_image.position), {
            "classifier_a_id": result.classifier_a_id,
            "classifier_a": result.classifier_a,
            "classifier_b_id": result.classifier_b_id,
            "classifier_b": result.classifier_b,
            "subset_created_at": result.subset_created_at,
            "position": pair_image.position,
            "role": pair_image.role.value,
            "image_sha256": image.sha256,
            "distance": pair_image.distance,
            "label_a": pair_image.label_a,
            "label_a_key": str(keys[pair_image.label_a]),
            "label_b": pair_image.label_b,
            "label_b_key": str(keys[pair_image.label_b]),
            "prob_a": pair_image.prob_a,
            "prob_b": pair_image.prob_b,
            "below_threshold": pair_image.below_threshold,
            "outcome_a": result.outcome_a,
            "outcome_b": result.outcome_b,
            "image_source_uri": image.source_uri,
            "image_source_url": image.source_url,
            "image_license": image.license,
            "image_author": image.author,
        }

    return rows_in_batches(source, schema, query, row)


# Adjudications (admin) -----------------------------------------------------------------------------------

ADJUDICATIONS_SCHEMA = pa.schema(
    [
        ("adjudication_id", pa.int64()),
        ("kind", pa.string()),
        ("image_sha256", pa.string()),
        ("question_id", pa.int64()),
        ("class_key", pa.string()),
        ("verdict", pa.string()),
        ("panel_outcome", pa.bool_()),
        ("outcome", pa.bool_()),
        ("reason", pa.string()),
        ("decided_by", pa.string()),
        ("created_at", TIMESTAMP),
    ]
)


def _adjudications_batches(source: ExportSource, schema: pa.Schema) -> Iterator[pa.RecordBatch]:
    """Every verdict by id; outcomes are the question's for a split decision, whether the image is
    discarded for an image."""

    def query(session: Session, after: tuple | None) -> Sequence[Row]:
        statement = (
            select(Adjudication, Image.sha256, Question.class_index)
            .join(Image, Image.id == Adjudication.image_id)
            .outerjoin(Question, Question.id == Adjudication.question_id)
            .where(Adjudication.competition_id == source.competition.id)
            .order_by(Adjudication.id)
            .limit(BATCH_ROWS)
        )
        if after is not None:
            statement = statement.where(Adjudication.id > after[0])
        return session.execute(statement).all()

    def row(result, competition: Competition) -> tuple[tuple, dict]:
        verdict, sha256, class_index = result.Adjudication, result.sha256, result.class_index
        return (verdict.id,), {
            "adjudication_id": verdict.id,
            "kind": verdict.kind.value,
            "image_sha256": sha256,
            "question_id": verdict.question_id,
            "class_key": None if class_index is None else str(competition.class_keys[class_index]),
            "verdict": verdict.verdict.value,
            "panel_outcome": verdict.panel_outcome,
            "outcome": verdict.outcome,
            "reason": verdict.reason,
            "decided_by": verdict.decided_by,
            "created_at": verdict.created_at,
        }

    return rows_in_batches(source, schema, query, row)


# Prediction summaries (admin) ----------------------------------------------------------------------------

PREDICTIONS_SCHEMA = pa.schema(
    [
        ("classifier_id", pa.int64()),
        ("classifier", pa.string()),
        ("ordinal", pa.int64()),
        ("image_sha256", pa.string()),
        ("top1", pa.int32()),
        ("prob", pa.float32()),
        ("entropy_bits", pa.float32()),
    ]
)


def _predictions_batches(source: ExportSource, schema: pa.Schema) -> Iterator[pa.RecordBatch]:
    """Per classifier (registration order) and image (ordinal order) with a prediction: top-1 label, its
    probability and the softmax entropy in bits (NaN when the source gave none). A classifier whose shards
    have a gap (new images still being predicted) is left out until they are complete."""
    with source.sessions() as session:
        classifiers = list_classifiers(db_session=session, competition_id=source.competition.id)
        n_images = competition_image_count(db_session=session, competition_id=source.competition.id)
    for classifier in classifiers:
        predictions = readable_predictions(source.settings, classifier, n_images)
        for start in range(0, n_images, BATCH_ROWS):
            end = min(start + BATCH_ROWS, n_images)
            predicted = np.flatnonzero(predictions.top1[start:end] >= 0) + start
            if not len(predicted):
                continue
            sha256_of = _hashes_of_ordinals(source, start, end)
            yield pa.RecordBatch.from_arrays(
                [
                    pa.array(np.full(len(predicted), classifier.id, dtype=np.int64)),
                    pa.array([classifier.name] * len(predicted), pa.string()),
                    pa.array(predicted),
                    pa.array([sha256_of[int(ordinal)] for ordinal in predicted], pa.string()),
                    pa.array(predictions.top1[predicted]),
                    pa.array(predictions.prob[predicted]),
                    pa.array(predictions.entropy_bits[predicted]),
                ],
                schema=schema,
            )


def _hashes_of_ordinals(source: ExportSource, start: int, end: int) -> dict[int, str]:
    """{ordinal: sha256} of the competition's images with ordinals in [start, end)."""
    with source.sessions() as session:
        return dict(
            session.execute(
                select(CompetitionImage.ordinal, Image.sha256)
                .join(Image, Image.id == CompetitionImage.image_id)
                .where(
                    CompetitionImage.competition_id == source.competition.id,
                    CompetitionImage.ordinal >= start,
                    CompetitionImage.ordinal < end,
                )
            ).all()
        )


TABLES = {
    table.name: table
    for table in (
        ExportTable("votes", VOTES_SCHEMA, _votes_batches),
        ExportTable("questions", QUESTIONS_SCHEMA, _questions_batches),
        ExportTable("subsets", SUBSETS_SCHEMA, _subsets_batches),
        ExportTable("predictions", PREDICTIONS_SCHEMA, _predictions_batches),
        ExportTable("adjudications", ADJUDICATIONS_SCHEMA, _adjudications_batches),
    )
}


# Encoders --------------------------------------------------------------------------------------------------


def encode(table: ExportTable, source: ExportSource, export_format: ExportFormat) -> Iterator[bytes]:
    """The table's bytes in the format, produced batch by batch."""
    batches = table.batches(source, table.schema)
    if export_format == "csv":
        return _csv(batches, table.schema)
    if export_format == "jsonl":
        return _json_lines(batches)
    return _parquet(batches, table.schema)


def _csv(batches: Iterator[pa.RecordBatch], schema: pa.Schema) -> Iterator[bytes]:
    """A header, then each batch's rows (empty field = null; booleans true/false; times in UTC; text that a
    spreadsheet would run as a formula starts with an apostrophe)."""
    buffer = io.BytesIO()
    pa_csv.write_csv(pa.Table.from_batches([], schema=schema), buffer)
    yield buffer.getvalue()
    for batch in batches:
        buffer = io.BytesIO()
        pa_csv.write_csv(neutralised_batch(batch), buffer, pa_csv.WriteOptions(include_header=False))
        yield buffer.getvalue()


def _json_row(row: dict) -> str:
    """A row as one line of JSON: times in ISO 8601, NaN as null."""
    return json.dumps(
        {
            key: value.isoformat()
            if isinstance(value, datetime)
            else None
            if isinstance(value, float) and np.isnan(value)
            else value
            for key, value in row.items()
        },
        ensure_ascii=False,
    )


def _json_lines(batches: Iterator[pa.RecordBatch]) -> Iterator[bytes]:
    """One JSON object per row and line."""
    for batch in batches:
        yield "".join(_json_row(row) + "\n" for row in batch.to_pylist()).encode()


def _parquet(batches: Iterator[pa.RecordBatch], schema: pa.Schema) -> Iterator[bytes]:
    """A Parquet file with a row group per batch, spooled to a temporary file and then streamed."""
    with tempfile.TemporaryFile(prefix="mad-export-") as spool:
        writer = pq.ParquetWriter(spool, schema)
        for batch in batches:
            writer.write_batch(batch)
        writer.close()
        spool.seek(0)
        while chunk := spool.read(STREAM_CHUNK_BYTES):
            yield chunk
