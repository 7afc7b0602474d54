"""Measure whether accounts of one person decide questions alone under active sampling (issue 33).

Two parts, each printed per scenario (`--json` for the figures):

- colluders: `mad simulate --policy active` with `CrowdConfig(colluders=SHARE, colluding_accounts=N)`, two of
  the N accounts drawn per image to cast its first two votes on one shared coin. Counted: questions decided
  with fewer votes than the panel's strict majority, every voter a colluding account, and the seeds with
  any. The simulation keeps no per-question votes, so the script counts them around
  `_Crowdwatch.decide`, the one place where a question's votes are cast and decided.
- copies: accounts answering as one person of accuracy 0.85 (the first two votes of 30% of the questions
  come from two of them) beside 12 honest annotators; each question's first two votes (its first three while
  they are not both vetted) are the agreement evidence, reliability is recomputed every 20 questions, and a
  seed counts when at any refresh the two best-weighted copies would decide a "no" alone at a base rate of
  0.35 (`decided_early`). The baseline is the same crowd with two *different* people of accuracy 0.85 in
  place of the copies: how often two honest annotators of that accuracy may decide a "no" together.

    .venv/bin/python benchmarks/collusion.py [--json] [--seeds 40] [--questions 600]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from unittest import mock

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from app.core import simulate_labelling  # noqa: E402
from app.core.active import decided_early  # noqa: E402
from app.core.reliability import CrowdEvidence, annotator_reliability, vote_weight  # noqa: E402
from app.core.simulate import SimulationConfig, run_study  # noqa: E402
from app.core.simulate_crowd import CrowdConfig  # noqa: E402
from app.core.taxonomy_sources import imagenet_1k  # noqa: E402

COLLUDER_SCENARIOS = ((2, 0.25), (3, 0.25), (4, 0.25), (3, 0.5), (4, 0.5))
COPY_SCENARIOS = ((0.97, 2), (0.85, 2), (0.97, 3), (0.85, 3))
HONEST, PERSON, SHARE, BASE_RATE, PANEL, REFRESH = 12, 0.85, 0.30, 0.35, 5, 20


def decided_alone(accounts: int, share: float, seeds: int) -> dict:
    """Questions decided by colluding accounts alone, and the seeds with any, over `seeds` simulated seeds."""
    questions = 0
    seeds_with_any: set[int] = set()
    decide = simulate_labelling._Crowdwatch.decide

    def counting(watch: simulate_labelling._Crowdwatch, question: int, panel_size: int) -> tuple[bool, int]:
        nonlocal questions
        answer, cast = decide(watch, question, panel_size)
        voters = watch.crowd.voters[question][:cast]
        if 2 * cast <= panel_size and (voters >= watch.crowd.accounts - accounts).all():
            questions += 1
            seeds_with_any.add(id(watch))
        return answer, cast

    crowd = CrowdConfig(colluders=share, colluding_accounts=accounts)
    with mock.patch.object(simulate_labelling._Crowdwatch, "decide", counting):
        run_study(SimulationConfig(seeds=seeds, policy="active", crowd=crowd), imagenet_1k())
    return {"accounts": accounts, "share": share, "questions": questions, "seeds": len(seeds_with_any)}


def two_can_decide_alone(
    honest_accuracy: float, accounts: int, questions: int, seed: int, copies: bool
) -> bool:
    """Whether at any refresh two of the `accounts` extra annotators (copies of one 0.85 person, or different
    people of that accuracy) weigh enough to decide a "no" with their two votes alone."""
    rng = np.random.default_rng(seed)
    count = HONEST + accounts
    total, agreeing = np.zeros((count, count), dtype=np.int64), np.zeros((count, count), dtype=np.int64)
    weight = np.full(count, np.nan)
    for question in range(questions):
        truth = rng.random() < BASE_RATE
        if rng.random() < SHARE:
            voters = list(HONEST + rng.choice(accounts, 2, replace=False))
            person = [truth ^ (rng.random() >= PERSON) for _ in range(1 if copies else 2)]
            votes = person * 2 if copies else person
        else:
            voters = list(rng.choice(HONEST, 2, replace=False))
            votes = [truth ^ (rng.random() >= honest_accuracy) for _ in voters]
        if not np.isfinite(weight[voters]).all():
            voters.append(int(rng.choice(np.setdiff1d(np.arange(HONEST), voters))))
            votes.append(truth ^ (rng.random() >= honest_accuracy))
        for x in range(len(voters)):
            for y in range(x + 1, len(voters)):
                a, b = sorted((voters[x], voters[y]))
                total[a, b] += 1
                agreeing[a, b] += votes[x] == votes[y]
        if question % REFRESH == REFRESH - 1:
            a, b = np.nonzero(np.triu(total, k=1))
            zeros = np.zeros(count)
            evidence = CrowdEvidence(zeros, zeros, a, b, total[a, b], agreeing[a, b])
            weight = vote_weight(annotator_reliability(evidence))
            extra = weight[HONEST:][np.isfinite(weight[HONEST:])]
            if (
                len(extra) >= 2
                and decided_early(0, 2, PANEL, float(np.sort(extra)[-2:].sum()), BASE_RATE) is not None
            ):
                return True
    return False


def copies_deciding(honest_accuracy: float, accounts: int, questions: int, seeds: int) -> dict:
    """Seeds in which copies may decide a "no" alone, and the same for different people (the baseline)."""
    counts = {
        kind: sum(
            two_can_decide_alone(honest_accuracy, accounts, questions, seed, kind == "copies")
            for seed in range(seeds)
        )
        for kind in ("copies", "different_people")
    }
    return {
        "honest_accuracy": honest_accuracy,
        "accounts": accounts,
        "questions": questions,
        "seeds": seeds,
        **counts,
    }


def main() -> None:
    """Run both parts and print a line per scenario, or the figures as JSON."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    parser.add_argument("--seeds", type=int, default=40, help="seeds per scenario (default 40)")
    parser.add_argument("--questions", type=int, default=600, help="questions per copies seed (default 600)")
    parser.add_argument(
        "--copies-only", action="store_true", help="skip the simulated colluders (4 of the 5 minutes)"
    )
    args = parser.parse_args()
    figures: dict[str, list[dict]] = {"colluders": [], "copies": []}
    for accounts, share in () if args.copies_only else COLLUDER_SCENARIOS:
        row = decided_alone(accounts, share, args.seeds)
        figures["colluders"].append(row)
        if not args.json:
            print(
                f"colluders: {accounts} accounts on {share:.0%} of images: {row['questions']} questions "
                f"decided alone in {row['seeds']} of {args.seeds} seeds",
                flush=True,
            )
    for honest_accuracy, accounts in COPY_SCENARIOS:
        row = copies_deciding(honest_accuracy, accounts, args.questions, args.seeds)
        figures["copies"].append(row)
        if not args.json:
            print(
                f"copies: {accounts} accounts of one 0.85 person beside honest at {honest_accuracy}: "
                f"{row['copies']} of {args.seeds} seeds could decide a no alone (two different 0.85 people: "
                f"{row['different_people']})",
                flush=True,
            )
    if args.json:
        print(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
