"""Simulated crowds: who casts each vote of a competition's questions, and what they answer.

A crowd is a pool of annotator accounts, each with a chance of answering "yes" when the truth is yes
(sensitivity) and "no" when it is no (specificity); a question's votes come from distinct accounts drawn
at random, in order. Both labelling policies read the same draws (common random numbers), so a comparison
measures the policies. Scenarios (issue 33, docs/architecture.md, Active sampling):

- `noise`: every honest account flips the truth with this chance (one-coin, Dawid & Skene 1979).
- `careless`: this share of the accounts answer with a fair coin.
- `spammers`: this share of the accounts always answer "no".
- `experts`: this share of the accounts flip only `EXPERT_NOISE`, the others `MEDIOCRE_NOISE` (a few good
  annotators among many mediocre ones; `noise` is then unused).
- `colluders`: two of `colluding_accounts` extra accounts (2 by default; with more, two drawn per image)
  cast the first two votes of every question of this share of the images, agreeing on a fair coin (one
  person behind several accounts, answering without looking).
- `confusing`: on this share of the images every account flips with `CONFUSING_NOISE` (classes that
  everyone confuses: errors that are correlated across annotators, which no panel size averages away).

Each account also answers gold questions, with known answers, in the same way: `gold_answers` gives the
first g of them, so a policy that asks gold at a rate sees them arrive with the account's work.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

POOL_SIZE = 20
"""Honest accounts in a simulated crowd (the panel's voters are drawn from them)."""
EXPERT_NOISE = 0.02
MEDIOCRE_NOISE = 0.2
CONFUSING_NOISE = 0.3
GOLD_PER_ACCOUNT = 400
"""Gold answers drawn in advance per account (more than any policy asks)."""
GOLD_YES_SHARE = 0.35
"""Share of gold questions whose answer is yes (about that of MAD's questions)."""


@dataclass(frozen=True)
class CrowdConfig:
    """The crowd of a simulated competition (module docstring)."""

    noise: float = 0.05
    careless: float = 0.0
    spammers: float = 0.0
    experts: float = 0.0
    colluders: float = 0.0
    confusing: float = 0.0
    colluding_accounts: int = 2


@dataclass(frozen=True)
class Crowd:
    """Q×panel voters (account ids, distinct within a row) and their votes, and each account's gold."""

    voters: np.ndarray
    votes: np.ndarray
    gold_correct: np.ndarray
    """accounts×GOLD_PER_ACCOUNT bool: whether the account's g-th gold answer is right."""

    @property
    def accounts(self) -> int:
        """Number of accounts, colluders included."""
        return len(self.gold_correct)

    def gold_after(self, votes_cast: np.ndarray, gold_rate: float) -> tuple[np.ndarray, np.ndarray]:
        """(right, answered) gold per account once each has cast `votes_cast` regular votes, gold being
        a share `gold_rate` of everything an account is handed: ⌊votes·rate / (1 − rate)⌋ answers."""
        answered = np.minimum(
            np.floor(votes_cast * gold_rate / (1.0 - gold_rate)).astype(np.int64), GOLD_PER_ACCOUNT
        )
        cumulative = np.concatenate(
            [np.zeros((self.accounts, 1), dtype=np.int64), np.cumsum(self.gold_correct, axis=1)], axis=1
        )
        return cumulative[np.arange(self.accounts), answered], answered


def account_models(config: CrowdConfig, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """(sensitivity, specificity) of the POOL_SIZE honest accounts and then the `colluding_accounts`."""
    flip = np.full(POOL_SIZE, config.noise)
    if config.experts > 0:
        flip = np.where(
            np.arange(POOL_SIZE) < round(config.experts * POOL_SIZE), EXPERT_NOISE, MEDIOCRE_NOISE
        )
    sensitivity, specificity = 1.0 - flip, 1.0 - flip
    kind = rng.permutation(POOL_SIZE)
    careless = kind < round(config.careless * POOL_SIZE)
    spam = (kind >= round(config.careless * POOL_SIZE)) & (
        kind < round((config.careless + config.spammers) * POOL_SIZE)
    )
    sensitivity = np.where(careless, 0.5, np.where(spam, 0.0, sensitivity))
    specificity = np.where(careless, 0.5, np.where(spam, 1.0, specificity))
    coin = np.full(config.colluding_accounts, 0.5)
    return np.r_[sensitivity, coin], np.r_[specificity, coin]


def colluding_two(accounts: int, images: int, rng: np.random.Generator) -> np.ndarray:
    """images×2: which two of the colluding accounts (0 … accounts−1) vote first on each image, the lower
    first (both answer the same coin, so their order changes nothing)."""
    return np.sort(np.argsort(rng.random((images, accounts)), axis=1)[:, :2], axis=1)


def simulate_crowd(
    truth: np.ndarray,
    image_of_question: np.ndarray,
    panel_size: int,
    config: CrowdConfig,
    rng: np.random.Generator,
) -> Crowd:
    """Every question's panel of distinct honest accounts in random order and their votes; the colluders
    take the first two places on a `colluders` share of the images, answering one shared coin each."""
    if config.colluding_accounts < 2:
        raise ValueError("colluding takes at least two accounts")
    if panel_size > POOL_SIZE:
        raise ValueError(f"a panel of {panel_size} needs more than the crowd's {POOL_SIZE} accounts")
    questions = len(truth)
    sensitivity, specificity = account_models(config, rng)
    voters = np.argsort(rng.random((questions, POOL_SIZE)), axis=1)[:, :panel_size]
    right_chance = np.where(truth[:, None], sensitivity[voters], specificity[voters])
    images = int(image_of_question.max()) + 1 if questions else 0
    confusing = (rng.random(images) < config.confusing)[image_of_question]
    right_chance = np.where(confusing[:, None], np.minimum(right_chance, 1.0 - CONFUSING_NOISE), right_chance)
    votes = truth[:, None] ^ (rng.random((questions, panel_size)) >= right_chance)
    colluded = (rng.random(images) < config.colluders)[image_of_question]
    if panel_size >= 2:
        shared_coin = rng.random(questions) < 0.5
        votes[colluded, :2] = shared_coin[colluded, None]
    gold_truth = rng.random((len(sensitivity), GOLD_PER_ACCOUNT)) < GOLD_YES_SHARE
    gold_chance = np.where(gold_truth, sensitivity[:, None], specificity[:, None])
    gold_correct = rng.random(gold_truth.shape) < gold_chance
    if panel_size >= 2:
        pair = colluding_two(config.colluding_accounts, images, rng)
        voters[colluded, :2] = POOL_SIZE + pair[image_of_question[colluded]]
    return Crowd(voters, votes, gold_correct)
