"""`mad worker` runs jobs; `mad jobs` shows how far a competition's predictions and selections are."""

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

import typer
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Column, Table

from app.cli.common import console, database_session, fail, load_settings

if TYPE_CHECKING:
    from app.jobs.schemas import PairSelectionRead


@contextmanager
def _service(url: str | None, token: str | None) -> Iterator[tuple[str, str]]:
    """The remote service given by --url/--token, or this machine's, served privately in this process."""
    if url:
        if not token:
            fail("--url needs --token (a worker token: `mad users add NAME --role worker --token`)")
        yield url, token
        return
    from app.main import create_app  # the web app loads only when this machine serves itself
    from app.serving import serve_in_thread
    from app.users import service as users_service

    settings = load_settings()
    with database_session(settings) as session:
        token = users_service.local_worker_token(db_session=session)
    with serve_in_thread(create_app(settings)) as embedded_url:
        yield embedded_url, token


def worker(
    url: str = typer.Option(
        None, envvar="MAD_WORKER_URL", help="Service URL. Omit to work on this machine's database directly."
    ),
    token: str = typer.Option(None, envvar="MAD_WORKER_TOKEN", help="Worker token, with --url."),
    device: str = typer.Option("auto", help="auto (GPU when present), cpu, cuda or cuda:N."),
    batch_size: int = typer.Option(64, min=1, help="Images per forward pass."),
    loader_workers: int = typer.Option(
        None, min=0, help="Decoding processes (default: by device and cores)."
    ),
    compile: bool = typer.Option(
        False,
        "--compile",
        help="torch.compile models when on a GPU (slow start; ignored on CPU).",
    ),
    cache_dir: Path = typer.Option(None, help="Downloaded weights (default: MAD_DATA_DIR/worker-cache)."),
    exit_when_idle: bool = typer.Option(False, "--exit-when-idle", help="Stop when no job is left."),
    name: str = typer.Option(None, help="Worker name shown in job listings (default host:pid)."),
) -> None:
    """Compute predictions and pair selections: claim leased jobs, run them, report them, repeat.

    With --url and --token the worker can run on any machine (e.g. a GPU box); without, it serves this
    machine's database privately and works on it. Ctrl-C stops; unfinished jobs are taken over by other
    workers when their lease expires.
    """
    from workers.client import ServiceError
    from workers.worker import WorkerOptions, run_worker  # torch loads only when a worker runs

    options = WorkerOptions(
        device=device,
        batch_size=batch_size,
        loader_workers=loader_workers,
        compile=compile,
        cache_dir=cache_dir or load_settings().data_dir / "worker-cache",
    )
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with (
        _service(url, token) as (service_url, service_token),
        Progress(*columns, console=console) as progress,
    ):
        task = progress.add_task("waiting for jobs", total=None)

        def report(label: str, done: int, total: int) -> None:
            progress.update(task, description=label, completed=done, total=total)

        console.print(f"Worker on {options.torch_device()} working for {service_url}")
        try:
            finished = run_worker(
                url=service_url,
                token=service_token,
                options=options,
                exit_when_idle=exit_when_idle,
                report=report,
                name=name,
            )
        except ServiceError as error:
            fail(str(error))
        except KeyboardInterrupt:
            fail("stopped; jobs in hand return to the queue when their leases expire", code=130)
    console.print(f"Finished {finished} jobs.")


def jobs(
    competition: str = typer.Option(..., "--competition", "-c", help="Competition to report on."),
) -> None:
    """Progress of a competition: images predicted per classifier, pairs selected (each pair's diagnosis:
    its disagreements, how many pass the threshold and others, and why one selected fewer than k), jobs by
    status, errors, and the workers seen lately (with a warning when none has been seen for a job lease)."""
    from app.competitions.service import get_competition_by_name
    from app.jobs import service as jobs_service
    from app.jobs.enums import JobStatus
    from app.jobs.progress import competition_progress

    settings = load_settings()
    with database_session(settings) as session:
        target = get_competition_by_name(db_session=session, name=competition)
        progress = competition_progress(
            db_session=session, competition_id=target.id, lost_after_s=settings.job_lease_s
        )
        failed = jobs_service.list_jobs(
            db_session=session, competition_id=target.id, status=JobStatus.failed, limit=20
        )
        failures = [(job.key, job.error or "") for job in failed]
    table = _wrapping_table("classifier", "status", "images predicted", "empty pairs", "error")
    for row in progress["classifiers"]:
        table.add_row(
            row["name"],
            row["status"],
            f"{row['images_predicted']}/{row['images_total']}",
            f"{row['pairs_empty']} of {row['pairs_selected']}",
            row["error"] or "",
        )
    console.print(table)
    short = f" ({progress['pairs_empty']} empty, {progress['pairs_short']} short of k)"
    console.print(
        f"Pairs selected: {progress['pairs_selected']}/{progress['pairs_total']}"
        + (short if progress["pairs_empty"] or progress["pairs_short"] else "")
    )
    if progress["pairs"]:
        console.print(_pairs_table(progress["pairs"]))
    console.print(
        "Jobs: " + (", ".join(f"{n} {s}" for s, n in sorted(progress["jobs_by_status"].items())) or "none")
    )
    for key, error in failures:
        console.print(f"failed {key}: {error}", markup=False, highlight=False, style="red")
    seen = ", ".join(f"{w['worker']} {w['seen_ago']} ago" for w in progress["workers"]) or "none yet"
    console.print(f"Workers last seen: {seen}", markup=False, highlight=False)
    if progress["worker_warning"]:
        console.print(progress["worker_warning"], markup=False, highlight=False, style="yellow")


def _pairs_table(pairs: list["PairSelectionRead"]) -> Table:
    """Each selected pair: images selected of k, its disagreements, how many pass the threshold and others,
    and why it selected fewer than k."""
    from app.jobs.selections import survivors_line

    table = _wrapping_table("pair", "selected", "disagreements", "pass", "would pass", "why fewer than k")
    for pair in pairs:
        found = pair.diagnosis
        below = f" ({pair.below_threshold} below T)" if pair.below_threshold else ""
        table.add_row(
            escape(f"{pair.classifier_a} vs {pair.classifier_b}"),
            f"{pair.selected} of {pair.k}{below}",
            "—" if found is None else str(found.disagreements),
            "—" if found is None else str(found.confident),
            survivors_line(pair),
            pair.shortfall or "",
        )
    return table


def _wrapping_table(*headers: str) -> Table:
    """A table whose cells wrap, a word too long for its column folding onto the next line, rather than
    being cut with '…' (piped output and 80-column terminals)."""
    return Table(*(Column(header, overflow="fold") for header in headers))
