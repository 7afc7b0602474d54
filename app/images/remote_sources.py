"""Import sources beyond one local path: every object under an s3:// prefix, and manifests.

A manifest is a CSV or Parquet table with a `uri` column — a local path inside the manifest's folder, an
s3:// key or an http(s):// URL — and optional `source_url`, `license` and `author` columns, kept with each
image as its provenance (URLs without their credentials and signatures: url_fetch.without_credentials).
Objects and URLs are read by the import's threads, within the same byte limit as files, each URL within a
deadline and only at addresses url_fetch's policy permits, each s3:// key only in the storage's bucket and
prefix or a location MAD_IMPORT_ALLOWED_S3 names (the server's credentials may read much more); S3
credentials and endpoint come from the AWS environment (app.storage.s3).
"""

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
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
from app.images.url_fetch import deadline, without_credentials

MANIFEST_COLUMNS = ("uri", "source_url", "license", "author")
MAX_LENGTHS = {"uri": 2048, "source_url": 2048, "license": 255, "author": 255}
UNREACHABLE = (
    "cannot be downloaded: its address is not one imports may reach (MAD_IMPORT_ALLOWED_HOSTS), "
    "or nothing answered there"
)
"""The one reason given for a refused address, a failed name lookup and a failed connection alike, so that
per-row errors tell nothing about what listens on the server's network."""


OUTSIDE_S3_LOCATIONS = (
    "not read: manifests may read S3 objects only in the storage's bucket and prefix (MAD_STORAGE_URL) and "
    "the locations MAD_IMPORT_ALLOWED_S3 names"
)


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


def _read_url(http: httpx.Client, url: str, name: str, max_bytes: int, deadline_s: float) -> ImportEntry:
    """A URL's body, streamed and cut off past max_bytes or deadline_s seconds, or why it cannot be had."""
    try:
        with deadline(deadline_s), http.stream("GET", url) as response:
            if not response.is_success:
                return Rejected(name, f"HTTP {response.status_code} from the URL")
            declared = int(response.headers.get("content-length") or 0)
            if declared > max_bytes:
                return Rejected(name, too_large_reason(declared, max_bytes))
            body = bytearray()
            for chunk in response.iter_bytes():
                body += chunk
                if len(body) > max_bytes:
                    return Rejected(name, too_large_reason(len(body), max_bytes))
    except (httpx.ConnectError, httpx.ConnectTimeout):
        return Rejected(name, UNREACHABLE)
    except httpx.TimeoutException:
        return Rejected(name, f"not downloaded within {deadline_s:g} s (MAD_IMPORT_URL_DEADLINE_S)")
    except httpx.HTTPError as error:
        return Rejected(name, f"cannot be downloaded ({type(error).__name__})")
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


@dataclass(frozen=True)
class RemoteReads:
    """How a manifest's remote rows are read: URLs through the guarded client (url_fetch.guarded_client),
    each within deadline_s seconds; s3:// keys only inside s3_locations (s3://bucket/prefix)."""

    http: httpx.Client
    deadline_s: float
    s3_locations: Sequence[str]


def in_s3_locations(uri: str, locations: Sequence[str]) -> bool:
    """Whether s3://bucket/key lies inside one of the s3://bucket/prefix locations: in its bucket, under
    its prefix up to a '/', with no empty, '.' or '..' part that a client or a store could read as a way
    out."""
    path = uri.removeprefix("s3://")
    if any(part in ("", ".", "..") for part in path.split("/")):
        return False
    return any(path.startswith(location.removeprefix("s3://").rstrip("/") + "/") for location in locations)


def manifest_entries(
    path: Path, table: pa.Table, max_bytes: int, remote: RemoteReads
) -> Iterator[Pending | Rejected]:
    """One entry per manifest row, in order; a row with a missing or overlong value is refused by line."""
    folder = path.resolve().parent
    line = 1
    for batch in table.to_batches():
        for row in batch.to_pylist():
            line += 1
            yield _manifest_entry(row, line, folder, max_bytes, remote)


def _is_url(uri: str) -> bool:
    """Whether a manifest value is an http(s) URL."""
    return uri.startswith(("http://", "https://"))


def _manifest_entry(
    row: dict, line: int, folder: Path, max_bytes: int, remote: RemoteReads
) -> Pending | Rejected:
    """The file of one manifest row, with its provenance (empty values are none; URLs kept and named
    without credentials); an s3:// key outside the allowed locations is refused unread, so its reason is
    the same whether it exists or not."""
    values = {column: (row.get(column) or "").strip() or None for column in MANIFEST_COLUMNS}
    uri = values["uri"]
    if uri is None:
        return Rejected(f"row {line}", "no uri")
    try:
        public_uri = without_credentials(uri) if _is_url(uri) else uri
        source_url = without_credentials(values["source_url"]) if values["source_url"] else None
    except ValueError:
        return Rejected(f"row {line}", "uri or source_url is not a valid URL")
    name = printable(public_uri)
    for column, limit in MAX_LENGTHS.items():
        if len(values[column] or "") > limit:
            return Rejected(name, f"{column} is longer than {limit} characters")
    if source_url and not _is_url(source_url):
        return Rejected(name, "source_url is not an http(s) URL")
    provenance = Provenance(public_uri, source_url, values["license"], values["author"])
    if uri.startswith("s3://"):
        if not in_s3_locations(uri, remote.s3_locations):
            return Rejected(name, OUTSIDE_S3_LOCATIONS)
        from app.storage.s3 import s3_filesystem

        read = partial(_read_object, s3_filesystem(), uri.removeprefix("s3://"), name, max_bytes)
    elif _is_url(uri):
        read = partial(_read_url, remote.http, uri, name, max_bytes, remote.deadline_s)
    else:
        file = (folder / uri).resolve()
        if not file.is_relative_to(folder):
            return Rejected(name, "path outside the manifest's folder")
        read = partial(read_file_entry, folder, file, name, max_bytes)
    return Pending(name, provenance, read)
