"""`mad images import`: add a folder, an archive or single files to a competition's corpus."""

import json
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

from app.cli.common import console, database_session, fail, load_settings
from app.competitions.service import get_competition_by_name
from app.images.service import ImageLimits, ImportReport, import_entries
from app.images.sources import count_archive_members, count_folder_files, path_entries
from app.images.store import ImageStore
from app.jobs.service import enqueue_competition_predictions

images_app = typer.Typer(help="Import images into a competition's corpus.", no_args_is_help=True)

SHOWN_PER_KIND = 50


def _expected_total(path: Path) -> int | None:
    """How many files the import will look at, when that is cheap to know."""
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


@images_app.command("import")
def import_images(
    path: Path = typer.Argument(
        ..., help="A folder (searched recursively), a .zip/.tar(.gz) archive, or one image."
    ),
    competition: str = typer.Option(
        ..., "--competition", "-c", help="Name of the competition to add them to."
    ),
    threads: int = typer.Option(2, min=1, max=64, help="Threads that hash, decode and thumbnail images."),
    report: Path | None = typer.Option(None, help="Write the full per-file report here as JSON."),
) -> None:
    """Store JPEG, PNG and WebP images once by SHA-256 and give each a stable ordinal in the competition.

    Duplicates are stored once and listed; bad files (not an image, truncated, too large, over the pixel
    limit, links leaving the folder, archive members with '..') are listed by name and skipped.
    Work is committed every few hundred files, so an interrupted import can simply be run again.
    """
    if not path.exists():
        fail(f"{path} does not exist")
    settings = load_settings()
    limits = ImageLimits(settings.max_image_bytes, settings.max_image_pixels, settings.thumbnail_size)
    store = ImageStore(settings.data_dir)
    columns = (TextColumn("Importing"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn())
    with (
        database_session(settings) as session,
        ThreadPoolExecutor(threads) as executor,
        Progress(*columns, console=console, transient=True) as progress,
    ):
        target = get_competition_by_name(db_session=session, name=competition)
        task = progress.add_task("import", total=_expected_total(path))

        def commit_batch(partial: ImportReport) -> None:
            session.commit()
            progress.update(task, completed=partial.processed)

        result = import_entries(
            db_session=session,
            store=store,
            competition=target,
            entries=path_entries(path, limits.max_bytes),
            limits=limits,
            executor=executor,
            on_batch=commit_batch,
        )
        queued = enqueue_competition_predictions(
            db_session=session,
            competition_id=target.id,
            max_attempts=settings.job_max_attempts,
            shard_size=settings.predict_shard_size,
        )
    _print_list("Duplicates, stored once", result.duplicates, "yellow")
    _print_list("Rejected", result.rejected, "red")
    if queued:
        console.print(f"Queued {len(queued)} prediction jobs for the new images: run `mad worker`.")
    console.print(
        f"[bold]{len(result.added)}[/] added, {len(result.duplicates)} duplicates, "
        f"{len(result.rejected)} rejected → competition [bold]{competition}[/]."
    )
    if report is not None:
        sections = {"added": result.added, "duplicates": result.duplicates, "rejected": result.rejected}
        payload = {kind: [{"name": n, "detail": d} for n, d in rows] for kind, rows in sections.items()}
        report.write_text(json.dumps(payload, indent=2, ensure_ascii=False))
