"""`mad simulate`: simulated MAD competitions with known accuracies; how well is the ranking recovered, at
what cost in votes, under the paper's uniform labelling or Active MAD, and against which crowd?"""

import json
from typing import TYPE_CHECKING

import typer
from rich.console import Console
from rich.table import Table

if TYPE_CHECKING:
    from app.core.simulate import SimulationStudy

COMPARED = (
    ("votes", "votes per competition", "{:,.1f}"),
    ("decided", "questions decided per competition", "{:,.1f}"),
    ("srcc_vs_full_mad", "SRCC against full MAD (mean)", "{:.4f}"),
    ("srcc_vs_truth", "SRCC against the simulated accuracies (mean)", "{:.4f}"),
    ("interval_width", "ranks in a 95% rank interval (mean)", "{:.2f}"),
    ("coverage_full_mad", "intervals holding the full-MAD rank", "{:.1%}"),
    ("confident_swap_seeds", "seeds with a confident swap", "{:.1%}"),
    ("discordant_pairs", "pairs ordered otherwise than full MAD (mean)", "{:.2f}"),
    ("forecast_swaps", "... as the policy expected when it stopped", "{:.2f}"),
    ("wrong_decisions", "decided questions answered wrong", "{:.2%}"),
)


def simulate(
    classifiers: int = typer.Option(11, min=2, help="Simulated classifiers, accuracies spread like Table 1."),
    k: int = typer.Option(30, "--k", min=1, help="Images selected per pair of classifiers."),
    noise: float = typer.Option(0.05, min=0.0, max=0.5, help="Chance that an annotator flips an answer."),
    panel: int = typer.Option(5, min=1, help="Annotators per question (odd): the strict majority decides."),
    careless: float = typer.Option(
        0.0, min=0.0, max=1.0, help="Share of annotators who answer at random (0.2: one in five)."
    ),
    spammers: float = typer.Option(0.0, min=0.0, max=1.0, help="Share of annotators who always answer no."),
    experts: float = typer.Option(
        0.0,
        min=0.0,
        max=1.0,
        help="Share of good annotators (2% flips) among mediocre ones (20% flips); replaces --noise.",
    ),
    colluders: float = typer.Option(
        0.0,
        min=0.0,
        max=1.0,
        help="Share of images whose first two votes come from two colluding accounts agreeing on a coin.",
    ),
    confusing: float = typer.Option(
        0.0, min=0.0, max=1.0, help="Share of images that every annotator gets wrong 30% of the time."
    ),
    order_bias: bool = typer.Option(
        False, "--order-bias", help="A corpus whose error types change along each pair's discrepancy order."
    ),
    seeds: int = typer.Option(5, min=1, help="Simulated competitions, one per seed."),
    first_seed: int = typer.Option(
        0,
        min=0,
        help="The first seed (seeds first-seed … first-seed + seeds − 1): check settings on seeds they were "
        "not chosen on.",
    ),
    policy: str = typer.Option(
        "uniform",
        help="Labelling: uniform (every question to a strict majority, the paper) or active (Active MAD).",
    ),
    compare: bool = typer.Option(
        False,
        "--compare",
        help="Run both policies on the same seeds and measure both against full MAD (README, Simulation).",
    ),
    json_output: bool = typer.Option(False, "--json", help="Print the study (or the comparison) as JSON."),
) -> None:
    """Run selection → labelling → Perron rank on simulated classifiers and crowds, and report the ranking
    against the simulated accuracies and against full MAD (every selected image labelled right), the votes
    cast and the 95% rank intervals."""
    from app.core.simulate import POLICIES, SimulationConfig, run_study
    from app.core.simulate_compare import compare_policies
    from app.core.simulate_crowd import CrowdConfig

    if policy not in POLICIES:
        raise typer.BadParameter(f"must be one of {', '.join(POLICIES)}", param_hint="--policy")
    if panel % 2 == 0:
        raise typer.BadParameter("must be odd, so that a strict majority always exists", param_hint="--panel")
    if careless + spammers > 1:
        raise typer.BadParameter("careless and spammers together are more than every annotator")
    crowd = CrowdConfig(
        noise=noise,
        careless=careless,
        spammers=spammers,
        experts=experts,
        colluders=colluders,
        confusing=confusing,
    )
    config = SimulationConfig(
        classifiers=classifiers,
        k=k,
        seeds=seeds,
        first_seed=first_seed,
        panel_size=panel,
        crowd=crowd,
        order_bias=order_bias,
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
    """Both policies' figures side by side, then the ratio of votes (and its two-vote floor) and the paired
    difference."""
    lines = [f"{'':45} {'active':>10} {'uniform':>10}"]
    for key, label, form in COMPARED:
        active, uniform = comparison[f"{key}_active"], comparison[f"{key}_uniform"]
        lines.append(f"{label:45} {form.format(active):>10} {form.format(uniform):>10}")
    lines.append(
        f"active / uniform votes: {comparison['votes_ratio']:.3f} (at two votes per question active"
        f" decided, the fewest an early decision takes: {comparison['two_vote_floor_ratio']:.3f})"
    )
    first = comparison["config"]["first_seed"]
    lines.append(
        f"SRCC against full MAD, active − uniform over {comparison['seeds']} paired seeds"
        f" ({first}–{first + comparison['seeds'] - 1}): "
        f"{comparison['srcc_vs_full_mad_difference']:+.4f} "
        f"± {comparison['srcc_vs_full_mad_difference_se']:.4f}"
        f" (standard error); active worse in {comparison['seeds_active_worse']:.0%} of seeds"
    )
    return "\n".join(lines)


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
    table.add_row("full MAD", "", "", *(f"{result.srcc_full_mad:.3f}" for result in study.results))
    table.add_row("votes", "", "", *(f"{result.votes:,}" for result in study.results))
    console = Console()
    console.print(table)
    config = study.config
    console.print(
        f"{config.policy} labelling, k = {config.k}, crowd {config.crowd}, panel of {config.panel_size}, "
        f"{config.images:,} images, {len(study.true_ranks)} classifiers"
    )
    summary = study.summary()
    console.print(
        f"median SRCC over {len(study.results)} seeds: [bold]{study.srcc_median:.3f}[/] against the "
        f"simulated accuracies, mean {summary['srcc_vs_full_mad']:.3f} against full MAD"
    )
    console.print(
        f"votes per competition: {study.votes_mean:,.1f}; the 95% rank intervals hold the true rank "
        f"{study.coverage:.1%} and the full-MAD rank {summary['coverage_full_mad']:.1%} of the time"
    )
