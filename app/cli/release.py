"""`mad release`: write a competition's release bundle (Parquet tables and a dataset card)."""

from pathlib import Path

import typer

from app.cli.common import console, database_session, load_settings


def release(
    competition: str = typer.Option(..., "--competition", "-c", help="The competition's name."),
    out: Path = typer.Option(..., "--out", help="A new or empty directory to write the bundle into."),
    license_id: str = typer.Option(
        "other",
        "--license",
        help="The bundle's license as a Hugging Face license id (cc-by-4.0, …); each image keeps its own "
        "license in images.parquet.",
    ),
) -> None:
    """Write what a lab publishes: the images with provenance, pair subsets with reserves, questions, votes
    (annotators pseudonymised), predictions, the leaderboard and its snapshots as Parquet tables, and a
    dataset card README.md in the Hugging Face datasets format. The bundle is written to a temporary
    directory beside --out and renamed into place at the end, so a failure leaves nothing behind."""
    from app.competitions.service import get_competition_by_name
    from app.release.bundle import read_as_one_snapshot, refuse_unusable_destination, write_release

    settings = load_settings()
    with database_session(settings) as session:
        read_as_one_snapshot(session)
        refuse_unusable_destination(out)
        found = get_competition_by_name(db_session=session, name=competition)
        written = write_release(
            db_session=session, competition=found, settings=settings, out=out, license_id=license_id
        )
    for name, rows in written.rows.items():
        console.print(f"{name}.parquet: {rows} rows")
    console.print(f"Wrote the release of [bold]{competition}[/] to {written.path} (dataset card: README.md).")
