"""`mad competitions`: create a competition, list them, change their selection settings, and import class
names in other languages."""

from pathlib import Path

import typer
from rich.table import Table

from app.cli.common import console, database_session, fail, load_settings
from app.core.threshold_rule import ThresholdRule

competitions_app = typer.Typer(
    help="Create and list MAD competitions, change their selection settings, and import their class names in "
    "other languages.",
    no_args_is_help=True,
)


def _taxonomy_spec(taxonomy: str) -> tuple[str, str | None]:
    """(kind, source) from --taxonomy: a shipped name, wordnet:FILE, or a custom taxonomy file."""
    if taxonomy in ("imagenet-1k", "imagenet-a"):
        return taxonomy, None
    kind, path = (
        ("wordnet", Path(taxonomy[len("wordnet:") :]))
        if taxonomy.startswith("wordnet:")
        else (
            "custom",
            Path(taxonomy),
        )
    )
    if not path.is_file():
        fail(f"--taxonomy {taxonomy!r}: use imagenet-1k, imagenet-a, wordnet:FILE or a taxonomy file's path")
    return kind, path.read_text(encoding="utf-8")


@competitions_app.command("create")
def create(
    name: str = typer.Argument(..., help="Lowercase slug, e.g. imagenet-flickr."),
    taxonomy: str = typer.Option(
        "imagenet-1k",
        help="imagenet-1k or imagenet-a (shipped WordNet hierarchy), wordnet:FILE (one synset per line, "
        "needs WordNet data for nltk), or the path of a custom YAML/JSON taxonomy file.",
    ),
    description: str = typer.Option("", help="Shown on the home page."),
    guidelines: Path = typer.Option(
        None,
        exists=True,
        dir_okay=False,
        help="A text file of guidelines for annotators (paragraphs separated by blank lines), shown on the "
        "competition's guidelines page; the admin page can change them later.",
    ),
    k: int = typer.Option(30, help="Images selected per classifier pair (paper: 30)."),
    threshold: float = typer.Option(
        0.8,
        help="Confidence threshold T: both top-1 probabilities ≥ T (paper: 0.8), or see --threshold-rule.",
    ),
    threshold_rule: ThresholdRule = typer.Option(
        ThresholdRule.absolute,
        help="absolute: p ≥ T (the paper); quantile: p ≥ the T-quantile of each classifier's own top-1 "
        "probabilities, for classifiers whose confidence stays low (label smoothing, mixup); fill: the "
        "images passing p ≥ T first, then the pair's other disagreements until k, each marked as below T.",
    ),
    max_per_label: int = typer.Option(
        3, help="At most this many selected images per predicted label (paper: 3)."
    ),
    panel: int = typer.Option(5, help="Annotators per question, odd; the majority decides (paper: 5)."),
    smoothing: float = typer.Option(1.0, help="Laplace pseudo-count α in (correct + α) / (n + 2α)."),
    sampling: str = typer.Option(
        "uniform",
        help="uniform: every selected image to a panel majority (the paper); active: the pairs that can "
        "still change the ranking first, until it is settled (README, Active sampling). The admin page "
        "and PUT …/labelling/sampling change it later.",
    ),
) -> None:
    """Create a competition: its label set comes from the taxonomy, in the classifiers' output order."""
    from app.competitions import service
    from app.competitions.schemas import CompetitionCreate

    kind, source = _taxonomy_spec(taxonomy)
    try:
        spec = CompetitionCreate(
            name=name,
            description=description,
            guidelines=guidelines.read_text(encoding="utf-8") if guidelines else "",
            taxonomy=kind,
            taxonomy_source=source,
            k=k,
            confidence_threshold=threshold,
            threshold_rule=threshold_rule,
            max_per_label=max_per_label,
            panel_size=panel,
            smoothing=smoothing,
            sampling=sampling,
        )
    except ValueError as error:
        fail(str(error))
    with database_session(load_settings()) as session:
        competition = service.create_competition(db_session=session, spec=spec)
        classes = len(competition.class_keys)
    console.print(f"Created competition [bold]{name}[/] with {classes} classes ({kind}).")
    console.print(f"Next: mad images import PATH --competition {name}")


@competitions_app.command("select")
def select_again(
    name: str = typer.Argument(..., help="The competition."),
    k: int = typer.Option(None, help="Images selected per classifier pair."),
    threshold: float = typer.Option(None, help="Confidence threshold T (see --threshold-rule)."),
    threshold_rule: ThresholdRule = typer.Option(
        None,
        help="absolute: p ≥ T (the paper); quantile: p ≥ each classifier's own T-quantile; fill: the images "
        "passing p ≥ T first, then the pair's other disagreements until k, each marked as below T.",
    ),
    max_per_label: int = typer.Option(None, help="At most this many selected images per predicted label."),
    yes: bool = typer.Option(False, "--yes", help="Drop the votes the change drops without asking."),
) -> None:
    """Change the selection settings and select every pair again from the stored predictions (no inference:
    `mad worker` runs the select jobs, `mad jobs` shows them). Votes on questions the new selection still
    asks are kept; the command says how many it keeps and drops, and asks before dropping any."""
    from app.competitions import service
    from app.competitions.schemas import CompetitionUpdate
    from app.jobs import reselection

    given = dict(
        k=k, confidence_threshold=threshold, threshold_rule=threshold_rule, max_per_label=max_per_label
    )
    try:
        update = CompetitionUpdate(**{key: value for key, value in given.items() if value is not None})
    except ValueError as error:
        fail(str(error))
    settings = load_settings()
    with database_session(settings) as session:
        competition = service.get_competition_by_name(db_session=session, name=name)
        preview = reselection.update_competition(
            db_session=session,
            settings=settings,
            competition=competition,
            update=update.model_copy(update={"dry_run": True}),
        )
    if preview is None:
        fail(
            f"{name} already selects with these settings: give a --k, --threshold, --threshold-rule or "
            "--max-per-label that differs"
        )
    said = reselection.dropped_text(preview)
    console.print(f"{said[0].upper()}{said[1:]}; it queues {preview.select_jobs} select jobs.")
    if preview.votes_dropped and not yes:
        typer.confirm(f"Drop {preview.votes_dropped} votes?", abort=True)
    with database_session(settings) as session:
        competition = service.get_competition_by_name(db_session=session, name=name)
        done = reselection.update_competition(
            db_session=session,
            settings=settings,
            competition=competition,
            update=update.model_copy(update={"confirm": True}),
        )
    assert done is not None
    console.print(
        f"Kept {done.votes_kept} votes, dropped {done.votes_dropped}; queued {done.select_jobs} select jobs: "
        "`mad worker` selects the pairs again from the stored predictions."
    )


@competitions_app.command("list")
def list_competitions() -> None:
    """Show every competition with its parameters and image count."""
    from app.competitions import service
    from app.core.shortfall import threshold_text
    from app.i18n import ENGLISH
    from app.images.service import image_counts

    with database_session(load_settings()) as session:
        counts = image_counts(db_session=session)
        rows = [
            service.to_read(c, counts.get(c.id, 0)) for c in service.list_competitions(db_session=session)
        ]
    if not rows:
        fail("no competitions yet: create one with `mad competitions create NAME`")
    table = Table("id", "name", "taxonomy", "classes", "images", "k", "threshold", "panel", "sampling")
    for row in rows:
        table.add_row(
            str(row.id),
            row.name,
            row.taxonomy,
            str(row.num_classes),
            str(row.image_count),
            str(row.k),
            threshold_text(row.threshold_rule, row.confidence_threshold, ENGLISH),
            str(row.panel_size),
            row.sampling.value,
        )
    console.print(table)


@competitions_app.command("translate")
def translate(
    name: str = typer.Argument(..., help="The competition."),
    file: Path = typer.Argument(
        ...,
        exists=True,
        dir_okay=False,
        help="CSV with the header class_id,locale,name,description (by its .csv name), else YAML or JSON: a "
        "list of mappings with those keys. class_id is a class key of the label set (`mad taxonomy` or GET "
        "…/classes shows them), locale a language the pages come in other than en.",
    ),
) -> None:
    """Import class names and descriptions in other languages: each language in the file replaces that
    language's earlier import, and annotators are asked in their language from their next image on. A file
    over MAD_MAX_TRANSLATION_BYTES is refused unread."""
    from app.competitions import service, translations

    settings = load_settings()
    with database_session(settings) as session:
        translations.check_file_size(file.stat().st_size, settings.max_translation_bytes)
        rows = translations.parse_translation_file(file.read_bytes(), file.name)
        competition = service.get_competition_by_name(db_session=session, name=name)
        taken = translations.import_translations(db_session=session, competition=competition, rows=rows)
        shares = translations.coverage(
            translations.competition_translations(db_session=session, competition=competition),
            len(competition.class_keys),
        )
    for locale, count in taken.items():
        console.print(f"{locale}: {count} class names imported.")
    console.print(
        "Classes named per language: " + ", ".join(f"{lang} {share:.0%}" for lang, share in shares.items())
    )
