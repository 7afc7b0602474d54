"""`mad classifiers`: register classifiers (three sources) and list them."""

from pathlib import Path
from typing import Any

import typer
from rich.table import Table

from app.cli.common import console, database_session, fail, load_settings

classifiers_app = typer.Typer(
    help="Register the classifiers of a competition and list them.", no_args_is_help=True
)


def _data_config(input_size: int | None, crop_pct: float | None, interpolation: str | None) -> dict | None:
    """The preprocessing overlay from the command-line options, validated."""
    from pydantic import ValidationError

    from app.classifiers.schemas import DataConfig

    try:
        config = DataConfig(
            input_size=(3, input_size, input_size) if input_size else None,
            crop_pct=crop_pct,
            interpolation=interpolation,
        )
    except ValidationError as error:
        fail(f"preprocessing options: {error.errors()[0]['msg']}")
    return config.overlay() or None


@classifiers_app.command("add")
def add(
    name: str = typer.Argument(..., help="Name shown on the leaderboard, e.g. resnet50."),
    competition: str = typer.Option(..., "--competition", "-c", help="Competition to enter it in."),
    arch: str = typer.Option(None, help="timm architecture for --weights, e.g. resnet50."),
    weights: Path = typer.Option(
        None, help="Local weights file (.safetensors, .pth, .pt or .bin) for --arch."
    ),
    pretrained: str = typer.Option(
        None, help="timm pretrained tag, e.g. resnet50.a1_in1k (workers download it)."
    ),
    predictions: Path = typer.Option(
        None,
        help="Predictions made elsewhere: Parquet or NPZ keyed by image sha256, or the service's own "
        "predictions export (Parquet) as it is.",
    ),
    classifier: str = typer.Option(
        None,
        help="With --predictions: the classifier whose rows to take from a table of several (the "
        "`classifier` column of the predictions export); needed when it holds several.",
    ),
    accuracy: float = typer.Option(
        None, help="Reported ImageNet top-1 accuracy in %, shown beside MAD rank."
    ),
    input_size: int = typer.Option(None, min=8, help="With --weights: square input size the weights expect."),
    crop_pct: float = typer.Option(
        None, min=0.01, max=1.0, help="With --weights: center-crop fraction (1 = none)."
    ),
    interpolation: str = typer.Option(
        None, help="With --weights: resize interpolation (bilinear, bicubic, nearest)."
    ),
) -> None:
    """Enter a classifier: --arch with --weights, or --pretrained, or --predictions.

    --predictions takes columns image_sha256 (or sha256), top1, prob and optionally entropy_bits (or
    entropy), top5, top5_prob: the predictions export of a competition over the same images is entered as it
    is, one classifier of it picked by --classifier (README, "Classifiers").

    The preprocessing comes from the architecture's pretrained config; --input-size, --crop-pct and
    --interpolation override it for weights trained differently. Everything is checked first (the weights
    are loaded with the competition's class count, a predictions file is validated in full) and nothing is
    stored on error. Workers then compute its predictions and its pair selections with every other ready
    classifier (paper Algorithm 2).
    """
    from app.classifiers import service
    from app.competitions.service import get_competition_by_name
    from app.jobs.lifecycle import enqueue_classifier

    if classifier is not None and predictions is None:
        fail("--classifier picks a classifier's rows of a --predictions table: give --predictions too")
    sources = [weights is not None, pretrained is not None, predictions is not None]
    if sum(sources) != 1:
        fail("give exactly one of --weights (with --arch), --pretrained or --predictions")
    if weights is not None and not arch:
        fail("--weights needs --arch, the timm architecture the weights belong to")
    for path in (weights, predictions):
        if path is not None and not path.is_file():
            fail(f"{path} is not a file")
    settings = load_settings()
    with database_session(settings) as session:
        target = get_competition_by_name(db_session=session, name=competition)
        common: dict[str, Any] = dict(
            db_session=session, settings=settings, competition=target, name=name, reported_accuracy=accuracy
        )
        if weights is not None:
            registered = service.register_timm_weights(
                architecture=arch,
                weights_file=weights,
                weights_filename=weights.name,
                data_config=_data_config(input_size, crop_pct, interpolation),
                **common,
            )
        elif pretrained is not None:
            registered = service.register_timm_pretrained(pretrained_tag=pretrained, **common)
        else:
            registered = service.register_predictions_file(
                predictions_file=predictions, classifier_in_file=classifier, **common
            )
        enqueue_classifier(db_session=session, settings=settings, classifier=registered)
        status = registered.status.value
    work = "select its pairs" if predictions is not None else "compute its predictions"
    console.print(f"Registered classifier [bold]{name}[/] ({status}). Run `mad worker` to {work}.")


@classifiers_app.command("list")
def list_classifiers(
    competition: str = typer.Option(
        ..., "--competition", "-c", help="Competition whose classifiers to show."
    ),
) -> None:
    """Show a competition's classifiers with their source and status (and the error of a failed one)."""
    from app.classifiers import service
    from app.competitions.service import get_competition_by_name

    with database_session(load_settings()) as session:
        target = get_competition_by_name(db_session=session, name=competition)
        rows = service.list_classifiers(db_session=session, competition_id=target.id)
        table = Table("id", "name", "source", "model", "status", "error")
        for c in rows:
            table.add_row(
                str(c.id),
                c.name,
                c.source.value,
                c.pretrained_tag or c.architecture or "",
                c.status.value,
                c.error or "",
            )
    if not rows:
        fail(
            f"no classifiers in {competition!r} yet: add one with `mad classifiers add NAME -c {competition}`"
        )
    console.print(table)
