"""`mad simulate`: simulated MAD competitions with known accuracies; how well is the ranking recovered, at
what cost in votes, under the paper's uniform labelling or Active MAD?"""

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
    panel: int = typer.Option(5, min=1, help="Annotators per question (odd): the strict majority decides."),
    careless: float = typer.Option(
        0.0, min=0.0, max=1.0, help="Share of annotators who answer at random (0.2: one in five)."
    ),
    seeds: int = typer.Option(5, min=1, help="Simulated competitions, with seeds 0 … seeds−1."),
    policy: str = typer.Option(
        "uniform",
        help="Labelling: uniform (every question to a strict majority, the paper) or active (Active MAD).",
    ),
    compare: bool = typer.Option(
        False,
        "--compare",
        help="Run both policies on the same seeds; print votes, SRCC and coverage of each.",
    ),
    json_output: bool = typer.Option(False, "--json", help="Print the study (or the comparison) as JSON."),
) -> None:
    """Run selection → labelling → Perron rank on simulated classifiers and report SRCC with the truth, the
    votes cast and the coverage of the 95% rank intervals."""
    from app.core.simulate import POLICIES, SimulationConfig, compare_policies, run_study

    if policy not in POLICIES:
        raise typer.BadParameter(f"must be one of {', '.join(POLICIES)}", param_hint="--policy")
    if panel % 2 == 0:
        raise typer.BadParameter("must be odd, so that a strict majority always exists", param_hint="--panel")
    config = SimulationConfig(
        classifiers=classifiers,
        k=k,
        noise=noise,
        seeds=seeds,
        panel_size=panel,
        careless=careless,
        policy=policy,
    )
    if compare:
        comparison = compare_policies(config)
        typer.echo(json.dumps(comparison, indent=2) if json_output else comparison_text(comparison))
        return
    study = run_study(config)
    if json_output:
        typer.echo(json.dumps(study.to_dict(), indent=2))
    else:
        print_study(study)


def comparison_text(comparison: dict) -> str:
    """Both policies' votes, median SRCC and interval coverage, one line each."""
    lines = [
        f"{name:>8}: {comparison[f'votes_{name}']:9.1f} votes per competition, "
        f"median SRCC {comparison[f'srcc_median_{name}']:.3f}, "
        f"95% rank intervals cover the true rank {comparison[f'coverage_{name}']:.1%}"
        for name in ("uniform", "active")
    ]
    return "\n".join([*lines, f"active / uniform votes: {comparison['votes_ratio']:.3f}"])


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
    table.add_row("votes", "", "", *(f"{result.votes:,}" for result in study.results))
    console = Console()
    console.print(table)
    config = study.config
    console.print(
        f"{config.policy} labelling, k = {config.k}, annotator noise = {config.noise}, "
        f"careless annotators = {config.careless:.0%}, panel of {config.panel_size}, "
        f"{config.images:,} images, {len(study.true_ranks)} classifiers"
    )
    console.print(f"median SRCC over {len(study.results)} seeds: [bold]{study.srcc_median:.3f}[/]")
    console.print(
        f"votes per competition: {study.votes_mean:,.1f}; the 95% rank intervals contain the true rank "
        f"{study.coverage:.1%} of the time"
    )
