"""`mad studies`: open a paid crowd study (Prolific) for a competition, list, close and reopen studies, give
one a new link, read its participants and bonus file, delete it with its platform ids."""

from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import TYPE_CHECKING

import typer
from rich.table import Table

from app.cli.common import console, database_session, fail, load_settings
from app.studies.enums import BonusRule

if TYPE_CHECKING:
    from app.studies.service import StudyLink

studies_app = typer.Typer(
    help="Paid crowd studies (Prolific and the like): a study link in, completion codes out, bonuses that "
    "match the work (README, Running a Prolific study).",
    no_args_is_help=True,
)

BASE_URL_HELP = "The address participants reach this service at, for the link."


@studies_app.command("create")
def create(
    competition: str = typer.Argument(..., help="The competition's name."),
    name: str = typer.Option(..., help="The study's name, for you (e.g. 'Pilot, 20 images')."),
    participants: int = typer.Option(..., help="How many participants the study takes."),
    required: int = typer.Option(..., help="Images a participant answers to complete."),
    max_images: int = typer.Option(
        None, help="The most a participant may answer (default: --required); beyond it earns per_image."
    ),
    time_limit: int = typer.Option(60, help="Minutes from consent until a participant is sent back."),
    consent: Path = typer.Option(
        ..., exists=True, dir_okay=False, help="A text file shown before the first image, with 'I agree'."
    ),
    completed_code: str = typer.Option(..., help="The platform's code for participants who completed."),
    no_work_left_code: str = typer.Option(..., help="… for those who found nothing left to label."),
    screened_out_code: str = typer.Option(..., help="… for those quality control paused (gold accuracy)."),
    timed_out_code: str = typer.Option(..., help="… for those whose time ran out first."),
    platform: str = typer.Option("prolific", help="prolific, or another platform's short name."),
    participant_parameter: str = typer.Option(None, help="Its participant id's query parameter."),
    study_parameter: str = typer.Option(None, help="Its study id's query parameter."),
    session_parameter: str = typer.Option(None, help="Its session id's query parameter."),
    completion_url: str = typer.Option(
        None, help="Where participants go back to, {code} for the code (Prolific's by default)."
    ),
    bonus_rule: BonusRule = typer.Option(
        BonusRule.none, help="per_image: each image beyond --required; per_minute: each active minute."
    ),
    bonus_rate: str = typer.Option("0", help="The bonus per image or minute, in the study's currency."),
    base_url: str = typer.Option("http://127.0.0.1:8000", help=BASE_URL_HELP),
) -> None:
    """Open a study of a competition and print its secret link (shown once: only a hash of it is kept). Give
    it to the platform as the study's URL, with its URL parameters on."""
    from pydantic import ValidationError

    from app.competitions.service import get_competition_by_name
    from app.studies import service
    from app.studies.schemas import StudyCreate

    with database_session(load_settings()) as session:
        found = get_competition_by_name(db_session=session, name=competition)
        try:
            spec = StudyCreate(
                competition_id=found.id,
                name=name,
                platform=platform,
                participant_parameter=participant_parameter,
                study_parameter=study_parameter,
                session_parameter=session_parameter,
                completion_url=completion_url,
                codes={
                    "completed": completed_code,
                    "no_work_left": no_work_left_code,
                    "screened_out": screened_out_code,
                    "timed_out": timed_out_code,
                },
                required_images=required,
                max_images=max_images,
                time_limit_minutes=time_limit,
                max_participants=participants,
                consent_text=consent.read_text(encoding="utf-8"),
                bonus_rule=bonus_rule,
                bonus_rate=_rate(bonus_rate),
            )
        except ValidationError as error:
            fail("; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in error.errors()))
        study, link = service.create_study(db_session=session, spec=spec, base_url=base_url)
        study_id = study.id
    console.print(f"Opened study {study_id} ({name}). Its link (shown once), for the platform's study URL:")
    _print_link(link)


def _print_link(link: "StudyLink") -> None:
    """The link, and the same with Prolific's URL parameters (which Prolific adds itself when told to)."""
    console.print(link.url, soft_wrap=True, highlight=False)
    console.print("With Prolific's URL parameters (added by Prolific when you choose them):")
    console.print(link.url_with_parameters, soft_wrap=True, highlight=False)


def _rate(text: str) -> Decimal:
    """--bonus-rate as a decimal, or a clean failure."""
    try:
        return Decimal(text)
    except InvalidOperation:
        fail(f"--bonus-rate {text!r} is not a number (e.g. 0.05)")


@studies_app.command("list")
def list_studies(
    competition: str = typer.Option(None, "--competition", "-c", help="Only this competition's studies."),
) -> None:
    """Show every study: its competition, platform, state, participants and their outcomes."""
    from app.competitions.service import get_competition_by_name, list_competitions
    from app.studies import service

    with database_session(load_settings()) as session:
        competition_id = (
            get_competition_by_name(db_session=session, name=competition).id if competition else None
        )
        names = {c.id: c.name for c in list_competitions(db_session=session)}
        rows = [
            (study, *service.outcome_counts(db_session=session, study=study))
            for study in service.list_studies(db_session=session, competition_id=competition_id)
        ]
    if not rows:
        fail("no studies yet: open one with `mad studies create COMPETITION …`")
    table = Table("id", "name", "competition", "platform", "state", "participants", "outcomes")
    for study, count, outcomes in rows:
        table.add_row(
            str(study.id),
            study.name,
            names[study.competition_id],
            study.platform,
            "open" if study.is_open else "closed",
            f"{count} of {study.max_participants}",
            ", ".join(f"{n} {outcome}" for outcome, n in sorted(outcomes.items())),
        )
    console.print(table)


def _set_open(study_id: int, is_open: bool) -> None:
    """Close a study to new participants, or reopen it."""
    from app.studies import service
    from app.studies.schemas import StudyUpdate

    with database_session(load_settings()) as session:
        study = service.get_study(db_session=session, study_id=study_id)
        service.update_study(db_session=session, study=study, change=StudyUpdate(is_open=is_open))
    console.print(f"Study {study_id} is {'open' if is_open else 'closed to new participants'}.")


@studies_app.command("close")
def close(study_id: int = typer.Argument(..., help="The study's id (`mad studies list`).")) -> None:
    """Take no new participants (those in the study go on to the end); `mad studies open` reopens it."""
    _set_open(study_id, False)


@studies_app.command("open")
def reopen(study_id: int = typer.Argument(..., help="The study's id.")) -> None:
    """Take new participants again."""
    _set_open(study_id, True)


@studies_app.command("link")
def new_link(
    study_id: int = typer.Argument(..., help="The study's id."),
    base_url: str = typer.Option("http://127.0.0.1:8000", help=BASE_URL_HELP),
) -> None:
    """Print a new secret link for the study (shown once); the old one stops working at once (a leaked
    link): put the new one on the platform."""
    from app.studies import service

    with database_session(load_settings()) as session:
        study = service.get_study(db_session=session, study_id=study_id)
        link = service.new_link(db_session=session, study=study, base_url=base_url)
    _print_link(link)


@studies_app.command("participants")
def participants(
    study_id: int = typer.Argument(..., help="The study's id."),
    out: Path = typer.Option(None, help="Write them as CSV to this file instead of showing a table."),
) -> None:
    """Each participant: platform id, images answered, active time by the server's clock, gold accuracy,
    outcome and bonus."""
    from app.db.base import utcnow
    from app.studies import payments, service

    with database_session(load_settings()) as session:
        study = service.get_study(db_session=session, study_id=study_id)
        rows = payments.participant_rows(db_session=session, study=study, now=utcnow())
    if out is not None:
        out.write_text(payments.participants_csv(rows), encoding="utf-8")
        console.print(f"Wrote {len(rows)} participants to {out}.")
        return
    table = Table("participant id", "images", "active", "gold", "outcome", "bonus")
    for row in rows:
        gold = f"{row.gold_accuracy:.0%} of {row.gold_answered}" if row.gold_accuracy is not None else "—"
        outcome = row.outcome.value if row.outcome else "labelling"
        minutes, seconds = divmod(round(row.active_seconds), 60)
        table.add_row(
            row.participant_id, str(row.images), f"{minutes}:{seconds:02d}", gold, outcome, str(row.bonus)
        )
    console.print(table)


@studies_app.command("bonuses")
def bonuses(
    study_id: int = typer.Argument(..., help="The study's id."),
    out: Path = typer.Option(None, help="Write the file here (default: print it)."),
) -> None:
    """The platform's bulk bonus file: `participant_id,amount` a line for every bonus above zero (Prolific:
    paste it into the study's "Bulk bonus payments")."""
    from app.db.base import utcnow
    from app.studies import payments, service

    with database_session(load_settings()) as session:
        study = service.get_study(db_session=session, study_id=study_id)
        text = payments.bonus_file(payments.participant_rows(db_session=session, study=study, now=utcnow()))
    if out is None:
        typer.echo(text, nl=False)
    else:
        out.write_text(text, encoding="utf-8")
        console.print(f"Wrote {text.count(chr(10))} bonuses to {out}.")


@studies_app.command("delete")
def delete(
    study_id: int = typer.Argument(..., help="The study's id."),
    yes: bool = typer.Option(False, "--yes", help="Delete without asking."),
) -> None:
    """Delete a study with every participant's platform id (personal data, on request): their votes stay
    under usernames that name nobody; the participants table and bonus file go too (save them first)."""
    from app.studies import service

    if not yes:
        typer.confirm(f"Delete study {study_id} and its participants' platform ids?", abort=True)
    with database_session(load_settings()) as session:
        study = service.get_study(db_session=session, study_id=study_id)
        count = service.delete_study(db_session=session, study=study)
    console.print(f"Deleted study {study_id} and the platform ids of its {count} participants.")
