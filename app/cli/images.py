"""`mad images import`: add a folder, an archive or single files to a competition's corpus."""

import json
import os
from collections.abc import Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

import typer
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    ProgressColumn,
    Task,
    TextColumn,
    TimeRemainingColumn,
)
from rich.text import Text

from app.cli.common import console, database_session, fail, load_settings

if TYPE_CHECKING:
    from app.images.service import ImportReport
    from app.images.sources import ImportItem
    from app.settings import Settings

images_app = typer.Typer(help="Import images into a competition's corpus.", no_args_is_help=True)

SHOWN_PER_KIND = 50


def _expected_total(path: Path) -> int | None:
    """How many files the import will look at, when that is cheap to know."""
    from app.images.sources import count_archive_members, count_folder_files

    if path.is_dir():
        return count_folder_files(path)
    if path.is_file():
        with path.open("rb") as stream:
            return count_archive_members(stream) or 1
    return None


def _print_list(title: str, rows: list[tuple[str, str]], style: str) -> None:
    """Print up to SHOWN_PER_KIND rows of a report section."""
    if not rows:
        return
    console.print(f"[{style}]{title} ({len(rows)}):[/]")
    for name, detail in rows[:SHOWN_PER_KIND]:
        console.print(f"  {name}: {detail}", markup=False, highlight=False)
    if len(rows) > SHOWN_PER_KIND:
        console.print(f"  … and {len(rows) - SHOWN_PER_KIND} more (see --report)")


class RateColumn(ProgressColumn):
    """Files per second, as rich estimates it."""

    def render(self, task: Task) -> Text:
        return Text(f"{task.speed or 0:,.0f} files/s", style="progress.data.speed")


@contextmanager
def _import_source(source: str, settings: "Settings") -> Iterator[tuple[Iterable["ImportItem"], int | None]]:
    """The entries of an import source and how many there are when that is cheap to know."""
    from app.images.remote_sources import (
        ManifestError,
        RemoteReads,
        bucket_entries,
        is_bucket_url,
        is_manifest_name,
        manifest_entries,
        read_manifest,
    )
    from app.images.sources import ReadLimits, path_entries
    from app.images.url_fetch import AddressPolicy, guarded_client

    limits = ReadLimits.from_settings(settings)
    if is_bucket_url(source):
        try:
            entries = list(bucket_entries(source, limits.max_file_bytes))
        except OSError as error:
            fail(f"cannot list {source}: {error}")
        yield entries, len(entries)
        return
    path = Path(source)
    if not path.exists():
        fail(f"{path} does not exist")
    if is_manifest_name(path.name) and path.is_file():
        try:
            table = read_manifest(path)
        except ManifestError as error:
            fail(str(error))
        policy = AddressPolicy.allowing(settings.import_allowed_hosts)
        with guarded_client(policy, settings.import_url_deadline_s) as http:
            remote = RemoteReads(http, settings.import_url_deadline_s, settings.import_s3_locations)
            yield manifest_entries(path, table, limits.max_file_bytes, remote), table.num_rows
        return
    yield path_entries(path, limits), _expected_total(path)


@images_app.command("import")
def import_images(
    source: str = typer.Argument(
        ...,
        help="A folder (searched recursively), a .zip/.tar(.gz) archive, one image, an s3://bucket/prefix, "
        "or a CSV/Parquet manifest whose 'uri' column lists paths, s3:// keys or http(s) URLs (optional "
        "columns: source_url, license, author).",
    ),
    competition: str = typer.Option(
        ..., "--competition", "-c", help="Name of the competition to add them to."
    ),
    threads: int = typer.Option(
        2, min=1, max=64, help="Threads that read and hash files, and write them to S3 (more for S3 or URLs)."
    ),
    processes: int = typer.Option(
        len(os.sched_getaffinity(0)),
        min=1,
        max=256,
        help="Processes that decode, check, thumbnail and pHash images and write them to a local store.",
        show_default="one per CPU core",
    ),
    report: Path | None = typer.Option(None, help="Write the full per-file report here as JSON."),
) -> None:
    """Store JPEG, PNG and WebP images once by SHA-256 and give each a stable ordinal in the competition.

    Duplicates are stored once and listed, and so are near-duplicates (pHashes within 4 of 64 bits); bad
    files (not an image, truncated, too large, over the pixel limit, links leaving the folder, archive
    members with '..', paths outside a manifest's folder, URLs at addresses that are not public, a
    manifest's s3:// keys outside the storage's bucket and prefix and MAD_IMPORT_ALLOWED_S3) are listed by
    name and skipped. Work is committed every 32 files, with no transaction open while
    files are read, downloaded or decoded, and a re-run skips the files an earlier run imported without
    reading them: an interrupted import can simply be run again.
    """
    from app.competitions.service import get_competition_by_name
    from app.images.decode import checking_processes
    from app.images.service import ImageLimits, import_entries
    from app.images.store import ImageStore
    from app.jobs.service import enqueue_competition_predictions

    settings = load_settings()
    limits = ImageLimits(settings.max_image_bytes, settings.max_image_pixels, settings.thumbnail_size)
    columns = (
        TextColumn("Importing"),
        BarColumn(),
        MofNCompleteColumn(),
        RateColumn(),
        TimeRemainingColumn(),
    )
    with (
        checking_processes(processes) as checker,  # first: forked before any thread starts
        _import_source(source, settings) as (entries, total),
        database_session(settings) as session,
        ThreadPoolExecutor(threads) as executor,
        Progress(*columns, console=console, transient=True) as progress,
    ):
        store = ImageStore(settings.blob_store)  # after the fork: an S3 store may start a thread
        target = get_competition_by_name(db_session=session, name=competition)
        task = progress.add_task("import", total=total)

        def show_progress(partial: "ImportReport") -> None:
            progress.update(task, completed=partial.processed)

        result = import_entries(
            db_session=session,
            store=store,
            competition=target,
            entries=entries,
            limits=limits,
            executor=executor,
            checker=checker,
            commit_batches=True,
            on_batch=show_progress,
            ahead=2 * threads,
        )
        queued = enqueue_competition_predictions(
            db_session=session,
            competition_id=target.id,
            max_attempts=settings.job_max_attempts,
            shard_size=settings.predict_shard_size,
        )
    _print_list("Duplicates, stored once", result.duplicates, "yellow")
    _print_list("Near-duplicates (pHash within 4 of 64 bits), both kept", result.near_duplicates, "yellow")
    _print_list("Rejected", result.rejected, "red")
    if queued:
        console.print(f"Queued {len(queued)} prediction jobs for the new images: run `mad worker`.")
    console.print(
        f"[bold]{len(result.added)}[/] added, {len(result.duplicates)} duplicates, "
        f"{len(result.rejected)} rejected, {len(result.near_duplicates)} near-duplicates, "
        f"{len(result.skipped)} skipped (imported before) → competition [bold]{competition}[/]."
    )
    if report is not None:
        sections = {
            "added": result.added,
            "duplicates": result.duplicates,
            "near_duplicates": result.near_duplicates,
            "rejected": result.rejected,
            "skipped": result.skipped,
        }
        payload = {kind: [{"name": n, "detail": d} for n, d in rows] for kind, rows in sections.items()}
        report.write_text(json.dumps(payload, indent=2, ensure_ascii=False))
