"""Simulated MAD competitions: does selection → labelling → Perron rank recover a known ranking?

A simulated corpus over a taxonomy (ImageNet-1k by default): each image shows one object of a uniformly
drawn class and, with probability `second_object_rate`, a second one (the source of Case I). Images have a
shared difficulty z ~ N(0, 1) and classifier i is right on x when z + σ·ε_ix < Φ⁻¹(acc_i)·√(1 + σ²),
ε ~ N(0, 1), σ = `difficulty_noise` (a probit item-response model: marginal accuracy acc_i, errors shared
on hard images as real classifiers' are). A right classifier names one of the present objects; a wrong one
names a class c drawn with P(c | y) ∝ exp(−d(y, c) / confusion_scale), so mistakes stay near the true
class y in the hierarchy. Confidence is Beta(6, 1) when right and Beta(2, 2) when wrong.

Every question (image, class) of the selected images is put to a panel of annotators. How the
votes are asked is the labelling policy (app/core/simulate_labelling.py): `uniform`, the paper's strict
majority of the full panel on every question; or `active`, Active MAD through the functions the service's
queue calls. Each competition reports its SRCC with the true ranking, the votes cast, and whether each
classifier's true rank lies in its 95% bootstrap rank interval (ranking.bootstrap_perron, the leaderboard's).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np
from scipy.special import ndtri

from app.core.active import DEFAULT_GOLD_RATE, DEFAULT_REFRESH_EVERY, DEFAULT_UNIFORM_FLOOR
from app.core.analysis import CaseShares, case_shares, srcc
from app.core.ranking import (
    DEFAULT_ALPHA,
    PairCounts,
    bootstrap_perron,
    dominance_matrix,
    pairwise_accuracy,
    perron_rank,
    ranks_from_scores,
)
from app.core.selection import PairSelection, select_all_pairs
from app.core.simulate_crowd import CrowdConfig, simulate_crowd
from app.core.simulate_labelling import (
    UNDECIDED,
    ActiveSettings,
    LabellingDesign,
    counts_of,
    label_active,
    label_uniform,
)
from app.core.taxonomy import Taxonomy
from app.core.taxonomy_sources import imagenet_1k

# Paper Table 1, ImageNet top-1 accuracy of the eleven classifiers, best first.
TABLE_1_ACCURACIES = (0.8544, 0.8448, 0.8274, 0.8251, 0.8130, 0.7885, 0.7840, 0.7819, 0.7737, 0.7336, 0.7331)
RIGHT_CONFIDENCE = (6.0, 1.0)  # Beta parameters of p(top-1) when the prediction is right
WRONG_CONFIDENCE = (2.0, 2.0)  # ... and when it is wrong
POLICIES = ("uniform", "active")


@dataclass(frozen=True)
class SimulationConfig:
    """Everything one simulated study depends on, besides the taxonomy."""

    classifiers: int = 11
    k: int = 30
    seeds: int = 5
    first_seed: int = 0
    """Seeds first_seed … first_seed + seeds − 1: a block the defaults were not chosen on (README,
    Simulation)."""
    images: int = 20_000
    panel_size: int = 5
    threshold: float = 0.8
    max_per_label: int = 3
    second_object_rate: float = 0.005
    confusion_scale: float = 0.2
    difficulty_noise: float = 0.3
    policy: str = "uniform"
    crowd: CrowdConfig = CrowdConfig()
    order_bias: bool = False
    interval_resamples: int = 1000
    refresh_every: int = DEFAULT_REFRESH_EVERY
    uniform_floor: float = DEFAULT_UNIFORM_FLOOR
    gold_rate: float = DEFAULT_GOLD_RATE


@dataclass(frozen=True)
class SeedResult:
    """One simulated competition: the recovered MAD ranks and their 95% rank intervals, full MAD's ranks
    and the pairs of classifiers its own intervals separate, the votes cast and the decided questions."""

    seed: int
    recovered_ranks: tuple[int, ...]
    srcc: float
    srcc_full_mad: float
    full_mad_ranks: tuple[int, ...]
    confident_swaps: int
    """Pairs of classifiers that full MAD's 95% rank intervals separate and the policy orders otherwise."""
    discordant_pairs: int
    """Pairs of classifiers that the recovered ranking orders otherwise than full MAD."""
    forecast_swaps: float
    """What the policy expected of that when it stopped: Labelling.forecast_swaps."""
    cases: CaseShares
    votes: int
    rank_low: tuple[int, ...]
    rank_high: tuple[int, ...]
    decided: int
    wrong: int
    """Decided questions whose answer is not the truth."""


@dataclass(frozen=True)
class SimulationStudy:
    """Repeated simulated competitions over seeds first_seed … first_seed + seeds − 1 with the same true
    accuracies."""

    config: SimulationConfig
    taxonomy: str
    accuracies: tuple[float, ...]
    true_ranks: tuple[int, ...]
    results: tuple[SeedResult, ...]

    def _per_seed(self, name: str) -> np.ndarray:
        """One field of every seed's result."""
        return np.array([getattr(result, name) for result in self.results], dtype=np.float64)

    @property
    def srcc_median(self) -> float:
        """Median over seeds of SRCC(true ranks, recovered ranks)."""
        return float(np.median(self._per_seed("srcc")))

    @property
    def votes_mean(self) -> float:
        """Mean over seeds of the votes cast in one competition."""
        return float(self._per_seed("votes").mean())

    @property
    def decided_mean(self) -> float:
        """Mean over seeds of the questions decided in one competition."""
        return float(self._per_seed("decided").mean())

    def _intervals(self) -> tuple[np.ndarray, np.ndarray]:
        """seeds×m lowest and highest rank of each 95% rank interval."""
        return self._per_seed("rank_low"), self._per_seed("rank_high")

    @property
    def coverage(self) -> float:
        """Share of (seed, classifier) whose true rank lies in its 95% rank interval."""
        low, high = self._intervals()
        true = np.array(self.true_ranks)
        return float(np.mean((low <= true) & (true <= high)))

    @property
    def coverage_full_mad(self) -> float:
        """Share of (seed, classifier) whose full-MAD rank lies in its 95% rank interval."""
        low, high = self._intervals()
        full = self._per_seed("full_mad_ranks")
        return float(np.mean((low <= full) & (full <= high)))

    @property
    def interval_width(self) -> float:
        """Mean number of ranks in a 95% rank interval (rank_high − rank_low + 1)."""
        low, high = self._intervals()
        return float(np.mean(high - low + 1))

    @property
    def confident_swap_seeds(self) -> float:
        """Share of seeds with a pair that full MAD's intervals separate and the policy orders otherwise."""
        return float(np.mean(self._per_seed("confident_swaps") > 0))

    @property
    def wrong_decisions(self) -> float:
        """Share of decided questions, over all seeds, whose answer is not the truth."""
        return float(self._per_seed("wrong").sum() / max(1.0, self._per_seed("decided").sum()))

    def summary(self) -> dict:
        """The study's figures (issue 33): votes, SRCC against truth and full MAD, intervals, the pairs
        ordered otherwise than full MAD beside what the stop expected (means over seeds), decisions (the
        share wrong, and the questions decided per competition)."""
        return {
            "votes": self.votes_mean,
            "srcc_vs_full_mad": float(self._per_seed("srcc_full_mad").mean()),
            "srcc_vs_truth": float(self._per_seed("srcc").mean()),
            "srcc_median_vs_truth": self.srcc_median,
            "interval_width": self.interval_width,
            "coverage_full_mad": self.coverage_full_mad,
            "coverage_truth": self.coverage,
            "confident_swap_seeds": self.confident_swap_seeds,
            "discordant_pairs": float(self._per_seed("discordant_pairs").mean()),
            "forecast_swaps": float(self._per_seed("forecast_swaps").mean()),
            "wrong_decisions": self.wrong_decisions,
            "decided": self.decided_mean,
        }

    def to_dict(self) -> dict:
        """A JSON-ready summary."""
        return {
            "config": asdict(self.config),
            "taxonomy": self.taxonomy,
            "accuracies": list(self.accuracies),
            "true_ranks": list(self.true_ranks),
            "seeds": [
                {
                    "seed": result.seed,
                    "recovered_ranks": list(result.recovered_ranks),
                    "full_mad_ranks": list(result.full_mad_ranks),
                    "srcc": result.srcc,
                    "srcc_full_mad": result.srcc_full_mad,
                    "confident_swaps": result.confident_swaps,
                    "discordant_pairs": result.discordant_pairs,
                    "forecast_swaps": result.forecast_swaps,
                    "cases": asdict(result.cases),
                    "votes": result.votes,
                    "rank_low": list(result.rank_low),
                    "rank_high": list(result.rank_high),
                    "decided": result.decided,
                    "wrong": result.wrong,
                }
                for result in self.results
            ],
            **self.summary(),
            "coverage": self.coverage,
        }


def table_1_accuracies(classifiers: int) -> np.ndarray:
    """`classifiers` accuracies spread over paper Table 1's range, best first (Table 1 itself for 11)."""
    return np.interp(np.linspace(0, 10, classifiers), np.arange(11), TABLE_1_ACCURACIES)


def confusion_cdf(distance: np.ndarray, scale: float) -> np.ndarray:
    """Row-wise CDF of P(c | y) ∝ exp(−d(y, c) / scale) over c ≠ y: hierarchy-following mistakes."""
    off_diagonal = np.where(np.eye(len(distance), dtype=bool), np.inf, distance)
    weights = np.exp(-(off_diagonal - off_diagonal.min(axis=1, keepdims=True)) / scale)
    cdf = np.cumsum(weights / weights.sum(axis=1, keepdims=True), axis=1)
    cdf[:, -1] = 1.0
    return cdf


def sample_confusions(true_classes: np.ndarray, cdf: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """One wrong class per entry of `true_classes` by inverse-CDF sampling, grouped by true class."""
    wrong = np.empty(len(true_classes), dtype=np.int64)
    uniform = rng.random(len(true_classes))
    order = np.argsort(true_classes, kind="stable")
    classes, starts = np.unique(true_classes[order], return_index=True)
    for true_class, members in zip(classes, np.split(order, starts[1:]), strict=True):
        wrong[members] = np.searchsorted(cdf[true_class], uniform[members], side="right")
    return wrong


@dataclass(frozen=True)
class SimulatedCorpus:
    """Objects present in each image (second = −1 when alone) and every classifier's top-1 and confidence."""

    first_object: np.ndarray
    second_object: np.ndarray
    labels: np.ndarray
    probs: np.ndarray


def simulate_corpus(
    accuracies: np.ndarray, distance: np.ndarray, config: SimulationConfig, rng: np.random.Generator
) -> SimulatedCorpus:
    """Images with one or two objects; classifiers right per the item-response model, else a nearby class."""
    n_classes, n = len(distance), config.images
    first = rng.integers(0, n_classes, n)
    second = np.where(rng.random(n) < config.second_object_rate, rng.integers(0, n_classes, n), -1)
    second = np.where(second == first, -1, second)
    difficulty = rng.standard_normal(n)
    spread = np.sqrt(1 + config.difficulty_noise**2)
    slip = config.difficulty_noise * rng.standard_normal((len(accuracies), n))
    threshold = ndtri(accuracies)[:, None] * spread
    if config.order_bias:
        threshold = threshold + order_bias_shift(distance, first, len(accuracies))
    right = difficulty + slip < threshold
    named_object = np.where((second >= 0) & (rng.random((len(accuracies), n)) < 0.5), second, first)
    cdf = confusion_cdf(distance, config.confusion_scale)
    wrong = sample_confusions(np.broadcast_to(first, right.shape).ravel(), cdf, rng).reshape(right.shape)
    labels = np.where(right, named_object, wrong)
    confidence_if_right = rng.beta(*RIGHT_CONFIDENCE, right.shape)
    probs = np.where(right, confidence_if_right, rng.beta(*WRONG_CONFIDENCE, right.shape))
    return SimulatedCorpus(first, second, labels.astype(np.int32), probs)


ORDER_BIAS_SHIFT = 1.0
"""Probit shift of each classifier's accuracy on either half of the classes under `order_bias`."""


def order_bias_shift(distance: np.ndarray, true_class: np.ndarray, classifiers: int) -> np.ndarray:
    """classifiers×images probit shifts: +ORDER_BIAS_SHIFT for even-numbered classifiers on classes whose
    nearest other class is far (their mistakes sort to the top of a pair's list) and −ORDER_BIAS_SHIFT on
    the others, the reverse for odd-numbered ones."""
    nearest = np.where(np.eye(len(distance), dtype=bool), np.inf, distance).min(axis=1)
    far = (nearest > np.median(nearest))[true_class]
    parity = np.where(np.arange(classifiers) % 2 == 0, 1.0, -1.0)[:, None]
    return ORDER_BIAS_SHIFT * parity * np.where(far, 1.0, -1.0)[None, :]


def labelling_design(
    selections: dict[tuple[int, int], PairSelection], corpus: SimulatedCorpus, m: int, n_classes: int
) -> LabellingDesign:
    """The distinct questions (image, named class) of every pair's selected images, with their truth."""
    pairs = tuple(selections)
    asked_images = np.concatenate([np.r_[s.selected, s.selected] for s in selections.values()])
    asked_classes = np.concatenate(
        [np.r_[s.labels_i[: s.n_selected], s.labels_j[: s.n_selected]] for s in selections.values()]
    )
    questions, where = np.unique(asked_images * n_classes + asked_classes, return_inverse=True)
    image, named = np.divmod(questions, n_classes)
    truth = (corpus.first_object[image] == named) | (corpus.second_object[image] == named)
    bounds = np.cumsum([2 * selections[pair].n_selected for pair in pairs])[:-1]
    blocks = np.split(where, bounds)
    return LabellingDesign(
        m=m,
        pairs=pairs,
        questions_i=tuple(block[: len(block) // 2] for block in blocks),
        questions_j=tuple(block[len(block) // 2 :] for block in blocks),
        images=tuple(selections[pair].selected for pair in pairs),
        truth=truth,
        image_of_question=image,
    )


def run_seed(taxonomy: Taxonomy, accuracies: np.ndarray, config: SimulationConfig, seed: int) -> SeedResult:
    """One competition: corpus, Algorithm 1 on every pair, labelling under the policy, Perron rank and its
    bootstrap intervals, against the truth and against full MAD (every selected image labelled right)."""
    corpus_rng, panel_rng, queue_rng = np.random.default_rng(seed).spawn(3)
    distance = taxonomy.distance_matrix()
    corpus = simulate_corpus(accuracies, distance, config, corpus_rng)
    selections = select_all_pairs(
        corpus.labels,
        corpus.probs,
        distance,
        k=config.k,
        threshold=config.threshold,
        max_per_label=config.max_per_label,
        reserve_size=0,
    )
    design = labelling_design(selections, corpus, len(accuracies), len(distance))
    crowd = simulate_crowd(design.truth, design.image_of_question, config.panel_size, config.crowd, panel_rng)
    if config.policy == "active":
        settings = ActiveSettings(config.refresh_every, config.uniform_floor, DEFAULT_ALPHA, config.gold_rate)
        labelling = label_active(design, crowd, settings, queue_rng)
    else:
        labelling = label_uniform(crowd)
    counts = counts_of(design, labelling.answers)
    recovered = mad_ranks(counts)
    intervals = bootstrap_perron(counts, n_resamples=config.interval_resamples, seed=seed)
    full_counts = counts_of(design, design.truth.astype(np.int8))
    full = mad_ranks(full_counts)
    full_intervals = bootstrap_perron(full_counts, n_resamples=config.interval_resamples, seed=seed)
    decided = labelling.answers != UNDECIDED
    return SeedResult(
        seed=seed,
        recovered_ranks=tuple(recovered.tolist()),
        srcc=srcc(ranks_from_scores(accuracies), recovered),
        srcc_full_mad=srcc(full, recovered),
        full_mad_ranks=tuple(full.tolist()),
        confident_swaps=confident_swaps(full_intervals.rank_low, full_intervals.rank_high, recovered),
        discordant_pairs=discordant_pairs(full, recovered),
        forecast_swaps=labelling.forecast_swaps,
        cases=case_shares(counts),
        votes=labelling.votes,
        rank_low=tuple(intervals.rank_low.tolist()),
        rank_high=tuple(intervals.rank_high.tolist()),
        decided=int(decided.sum()),
        wrong=int((labelling.answers[decided] != design.truth[decided]).sum()),
    )


def mad_ranks(counts: PairCounts) -> np.ndarray:
    """The MAD ranks (Perron scores, Eq. 5) of these counts, classifiers without evidence last."""
    scores = perron_rank(dominance_matrix(pairwise_accuracy(counts))).scores
    return ranks_from_scores(scores, counts.without_evidence)


def confident_swaps(full_low: np.ndarray, full_high: np.ndarray, ranks: np.ndarray) -> int:
    """Pairs (a, b) that full MAD's rank intervals separate (full_high_a < full_low_b: a surely above b)
    while `ranks` put b above a."""
    separated = full_high[:, None] < full_low[None, :]
    return int((separated & (ranks[:, None] > ranks[None, :])).sum())


def discordant_pairs(ranks: np.ndarray, other: np.ndarray) -> int:
    """Pairs (a, b) that the two rankings order differently (Kendall's distance; a tie in either is no
    order)."""
    apart = np.sign(ranks[:, None] - ranks[None, :]) * np.sign(other[:, None] - other[None, :])
    return int((apart < 0).sum() // 2)


def run_study(config: SimulationConfig, taxonomy: Taxonomy | None = None) -> SimulationStudy:
    """Seeds first_seed … first_seed + seeds − 1 of `run_seed` with Table-1-like accuracies; SRCC per seed and
    its median."""
    if config.classifiers < 2 or config.seeds < 1:
        raise ValueError("a study needs at least two classifiers and one seed")
    if config.first_seed < 0:
        raise ValueError("seeds start at 0 or later")
    if config.panel_size % 2 == 0:
        raise ValueError("panel_size must be odd so that a strict majority always exists")
    if config.policy not in POLICIES:
        raise ValueError(f"policy must be one of {', '.join(POLICIES)}")
    taxonomy = imagenet_1k() if taxonomy is None else taxonomy
    accuracies = table_1_accuracies(config.classifiers)
    seeds = range(config.first_seed, config.first_seed + config.seeds)
    results = tuple(run_seed(taxonomy, accuracies, config, seed) for seed in seeds)
    return SimulationStudy(
        config=config,
        taxonomy=taxonomy.key,
        accuracies=tuple(float(a) for a in accuracies),
        true_ranks=tuple(ranks_from_scores(accuracies).tolist()),
        results=results,
    )
