"""`mad simulate --compare`: both labelling policies on the same seeds, measured against full MAD.

Full MAD (perfect labels on all k images of every pair) is what the method estimates; the simulated
accuracies are what MAD itself only approximates, which both policies share. So the comparison reports,
per policy, the SRCC against both, and the paired difference against full MAD seed by seed (same corpora,
selections and crowds: common random numbers), its standard error and the share of seeds in which active
does worse (docs/architecture.md, Active sampling; issue 33).
"""

from __future__ import annotations

from dataclasses import asdict, replace

import numpy as np

from app.core.simulate import SimulationConfig, SimulationStudy, run_study
from app.core.taxonomy import Taxonomy
from app.core.taxonomy_sources import imagenet_1k

POLICY_FIGURES = (
    "votes",
    "srcc_vs_full_mad",
    "srcc_vs_truth",
    "interval_width",
    "coverage_full_mad",
    "coverage_truth",
    "confident_swap_seeds",
    "wrong_decisions",
)


def paired_difference(active: SimulationStudy, uniform: SimulationStudy) -> dict:
    """Mean ± standard error over seeds of SRCC_active − SRCC_uniform against full MAD, and the share of
    seeds where active is below uniform."""
    difference = np.array(
        [a.srcc_full_mad - u.srcc_full_mad for a, u in zip(active.results, uniform.results, strict=True)]
    )
    error = float(difference.std(ddof=1) / np.sqrt(len(difference))) if len(difference) > 1 else float("nan")
    return {
        "srcc_vs_full_mad_difference": float(difference.mean()),
        "srcc_vs_full_mad_difference_se": error,
        "seeds_active_worse": float(np.mean(difference < 0)),
    }


def two_vote_floor(active: SimulationStudy, uniform: SimulationStudy) -> float:
    """2 × questions active decided / uniform's votes (means over seeds): the votes ratio if every question
    active decided took the two agreeing votes an early decision needs at the least (app.core.active,
    decided_early; a strict majority takes three), gold aside. No policy that decides as many questions
    under that rule spends less; what active spends above it is its vetting and its third votes."""
    return 2 * active.decided_mean / uniform.votes_mean


def compare_policies(config: SimulationConfig, taxonomy: Taxonomy | None = None) -> dict:
    """Both policies on the same seeds: each one's figures (`SimulationStudy.summary`) as
    `<figure>_<policy>`, their ratio of votes and its two-vote floor, and the paired difference against full
    MAD."""
    taxonomy = imagenet_1k() if taxonomy is None else taxonomy
    studies = {
        policy: run_study(replace(config, policy=policy), taxonomy) for policy in ("active", "uniform")
    }
    figures = {
        f"{name}_{policy}": value
        for policy, study in studies.items()
        for name, value in study.summary().items()
    }
    return {
        "config": {key: value for key, value in asdict(config).items() if key != "policy"},
        "seeds": config.seeds,
        **figures,
        "votes_ratio": studies["active"].votes_mean / studies["uniform"].votes_mean,
        "two_vote_floor_ratio": two_vote_floor(studies["active"], studies["uniform"]),
        **paired_difference(studies["active"], studies["uniform"]),
        "per_seed": {
            policy: {
                "votes": [result.votes for result in study.results],
                "srcc_vs_full_mad": [result.srcc_full_mad for result in study.results],
                "confident_swaps": [result.confident_swaps for result in study.results],
            }
            for policy, study in studies.items()
        },
    }
