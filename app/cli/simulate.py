"""`mad simulate`: simulated MAD competitions with known accuracies; how well is the ranking recovered?"""

import json
from typing import TYPE_CHECKING

import typer
from rich.console import Console
from rich.table import Table

if TYPE_CHECKING:
    from app.core.simulate import SimulationStudy


def simulate(
    classifiers: int = typer.Option(11, min=2, help="Simulated classifiers, accuracies spread like Table 1."),
    k: int = typer.Option(30, "--k", min=1, help="Images selected per pair of classifiers."),
    noise: float = typer.Option(0.05, min=0.0, max=0.5, help="Chance that an annotator flips an answer."),
    seeds: int = typer.Option(5, min=1, help="Simulated competitions, with seeds 0 … seeds−1."),
    json_output: bool = typer.Option(False, "--json", help="Print the whole study as JSON."),
) -> None:
    """Run selection → labelling → Perron rank on simulated classifiers and report SRCC with the truth."""
    from app.core.simulate import SimulationConfig, run_study

    study = run_study(SimulationConfig(classifiers=classifiers, k=k, noise=noise, seeds=seeds))
    if json_output:
        typer.echo(json.dumps(study.to_dict(), indent=2))
    else:
        print_study(study)


def print_study(study: "SimulationStudy") -> None:
    """True accuracy and rank of each simulated classifier beside its recovered rank per seed."""
    table = Table(title=f"Simulated MAD competitions on {study.taxonomy}")
    table.add_column("model", justify="right")
    table.add_column("true accuracy", justify="right")
    table.add_column("true rank", justify="right")
    for result in study.results:
        table.add_column(f"seed {result.seed}", justify="right")
    for index, (accuracy, rank) in enumerate(zip(study.accuracies, study.true_ranks, strict=True)):
        recovered = [str(result.recovered_ranks[index]) for result in study.results]
        table.add_row(f"f{index + 1}", f"{accuracy:.2%}", str(rank), *recovered)
    table.add_row("SRCC", "", "", *(f"{result.srcc:.3f}" for result in study.results), end_section=True)
    console = Console()
    console.print(table)
    config = study.config
    console.print(
        f"k = {config.k}, annotator noise = {config.noise}, panel of {config.panel_size}, "
        f"{config.images:,} images, {len(study.true_ranks)} classifiers"
    )
    console.print(f"median SRCC over {len(study.results)} seeds: [bold]{study.srcc_median:.3f}[/]")
