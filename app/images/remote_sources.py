"""Import sources beyond one local path: every object under an s3:// prefix, and manifests.

A manifest is a CSV or Parquet table with a `uri` column — a local path (relative to the manifest's
folder), an s3:// key or an http(s):// URL — and optional `source_url`, `license` and `author` columns,
kept with each image as its provenance. Objects and URLs are read by the import's threads, within the
same byte limit as files; S3 credentials and endpoint come from the AWS environment (app.storage.s3).
"""

from collections.abc import Iterator
from functools import partial
from pathlib import Path

import httpx
import pyarrow as pa
import pyarrow.csv as pa_csv
import pyarrow.parquet as pq

from app.images.sources import (
    Candidate,
    ImportEntry,
    Pending,
    Provenance,
    Rejected,
    printable,
    read_file_entry,
    too_large_reason,
)

MANIFEST_COLUMNS = ("uri", "source_url", "license", "author")
MAX_LENGTHS = {"uri": 2048, "source_url": 2048, "license": 255, "author": 255}
HTTP_TIMEOUT = httpx.Timeout(60.0, connect=10.0)


class ManifestError(ValueError):
    """The manifest cannot be used; the message says why."""


def is_bucket_url(source: str) -> bool:
    """Whether an import source names an S3 prefix."""
    return source.startswith("s3://")


def is_manifest_name(source: str) -> bool:
    """Whether an import source is a CSV or Parquet manifest."""
    return source.lower().endswith((".csv", ".parquet"))


def bucket_entries(url: str, max_bytes: int) -> Iterator[Pending | Rejected]:
    """Every object under s3://bucket/prefix, sorted by key; names are keys below the prefix."""
    from app.storage.s3 import s3_filesystem  # botocore loads only for an S3 source

    filesystem = s3_filesystem()
    base = url.removeprefix("s3://").rstrip("/")
    for path, info in sorted(filesystem.find(base, detail=True).items()):
        name = printable(path.removeprefix(base).lstrip("/") or path.rsplit("/", 1)[-1])
        if any(part.startswith(".") for part in name.split("/")):
            continue
        if info["size"] > max_bytes:
            yield Rejected(name, too_large_reason(info["size"], max_bytes))
            continue
        read = partial(_read_object, filesystem, path, name, max_bytes)
        yield Pending(name, Provenance(f"s3://{path}"), read, info["size"])


def _read_object(filesystem, path: str, name: str, max_bytes: int) -> ImportEntry:
    """One object's bytes, or why they cannot be had."""
    try:
        data = filesystem.cat_file(path)
    except OSError as error:
        return Rejected(name, f"cannot be read ({error})")
    return (
        Candidate(name, data)
        if len(data) <= max_bytes
        else Rejected(name, too_large_reason(len(data), max_bytes))
    )


def _read_url(http: httpx.Client, url: str, name: str, max_bytes: int) -> ImportEntry:
    """A URL's body, streamed and cut off past max_bytes, or why it cannot be had."""
    try:
        with http.stream("GET", url) as response:
            if not response.is_success:
                return Rejected(name, f"HTTP {response.status_code} from the URL")
            body = bytearray()
            for chunk in response.iter_bytes():
                body += chunk
                if len(body) > max_bytes:
                    return Rejected(name, too_large_reason(len(body), max_bytes))
    except httpx.HTTPError as error:
        return Rejected(name, f"cannot be downloaded ({type(error).__name__}: {error})")
    return Candidate(name, bytes(body))


def read_manifest(path: Path) -> pa.Table:
    """The manifest's table with its known columns as strings; ManifestError if it has no uri column."""
    try:
        table = pq.read_table(path) if path.suffix.lower() == ".parquet" else pa_csv.read_csv(path)
    except (pa.ArrowInvalid, OSError) as error:
        raise ManifestError(f"manifest {path.name} cannot be read: {error}") from None
    if "uri" not in table.column_names:
        raise ManifestError(
            f"manifest {path.name} has no 'uri' column (columns: {', '.join(table.column_names)})"
        )
    columns = [name for name in MANIFEST_COLUMNS if name in table.column_names]
    return table.select(columns).cast(pa.schema([(name, pa.string()) for name in columns]))


def manifest_entries(
    path: Path, table: pa.Table, max_bytes: int, http: httpx.Client
) -> Iterator[Pending | Rejected]:
    """One entry per manifest row, in order; a row with a missing or overlong value is refused by line."""
    folder = path.resolve().parent
    line = 1
    for batch in table.to_batches():
        for row in batch.to_pylist():
            line += 1
            yield _manifest_entry(row, line, folder, max_bytes, http)


def _manifest_entry(
    row: dict, line: int, folder: Path, max_bytes: int, http: httpx.Client
) -> Pending | Rejected:
    """The file of one manifest row, with its provenance (empty values are none)."""
    values = {column: (row.get(column) or "").strip() or None for column in MANIFEST_COLUMNS}
    uri = values["uri"]
    if uri is None:
        return Rejected(f"row {line}", "no uri")
    name = printable(uri)
    for column, limit in MAX_LENGTHS.items():
        if len(values[column] or "") > limit:
            return Rejected(name, f"{column} is longer than {limit} characters")
    if values["source_url"] and not values["source_url"].startswith(("http://", "https://")):
        return Rejected(name, "source_url is not an http(s) URL")
    provenance = Provenance(uri, values["source_url"], values["license"], values["author"])
    if uri.startswith("s3://"):
        from app.storage.s3 import s3_filesystem

        read = partial(_read_object, s3_filesystem(), uri.removeprefix("s3://"), name, max_bytes)
    elif uri.startswith(("http://", "https://")):
        read = partial(_read_url, http, uri, name, max_bytes)
    else:
        file = (folder / uri).resolve()
        read = partial(read_file_entry, file.parent, file, name, max_bytes)
    return Pending(name, provenance, read)
