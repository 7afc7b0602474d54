"""Response bodies of the leaderboard: standings, matrices, history, snapshots, pair galleries, analyses."""

from datetime import datetime

from pydantic import BaseModel, ConfigDict, Field

from app.classifiers.enums import ClassifierStatus
from app.jobs.schemas import PairSelectionRead
from app.labelling.schemas import EarlyDecisionsRead


class BootstrapSettings(BaseModel):
    """How the intervals were made: a seeded bootstrap over each pair's labelled images; percentile intervals
    for scores, step-down simultaneous tests of score differences for ranks (docs/architecture.md)."""

    n_resamples: int
    level: float = Field(description="Coverage of the intervals, e.g. 0.95.")
    seed: int = Field(description="Fixed, so the same votes always give the same intervals.")


class ClassifierStanding(BaseModel):
    """One compared classifier: its MAD (Perron) score and rank with intervals, the other rankings, Table 1.
    Every rank and score is null while it has no labelled image (then `no_rank` says why)."""

    classifier_id: int
    name: str
    status: ClassifierStatus
    mad_score: float | None = Field(
        description="Perron score r_i (Eq. 5); the scores of the ranked classifiers sum to 1."
    )
    mad_rank: int | None = Field(
        description="1 = best among the classifiers with labelled images; scores equal to 6 decimals share "
        "the better rank."
    )
    score_low: float | None
    score_high: float | None
    rank_low: int | None = Field(description="Best rank of the 95% rank interval: 1 + those surely better.")
    rank_high: int | None = Field(
        description="Worst rank of the 95% rank interval: 1 + those not surely worse."
    )
    provisional: bool = Field(
        description="The rank is not settled yet, or there is none (see provisional_rule)."
    )
    no_rank: str | None = Field(
        default=None,
        description="Why nothing ranks it yet: no labelled image in any of its pairs (they selected no "
        "image, wait for votes, or are not selected yet). Every rank and score is then null, the others are "
        "ranked among themselves, and it is listed in `unranked` too. Null once it has a labelled image.",
    )
    hodge_score: float | None
    hodge_rank: int | None
    bradley_terry_score: float | None = Field(description="Bradley–Terry log-strength from Case II wins.")
    bradley_terry_rank: int | None
    win_rate: float | None = Field(
        description="Share of its Case II images it won; null without any Case II image."
    )
    win_rate_rank: int | None = Field(description="Rank by win rate among the classifiers that have one.")
    labelled_images: int = Field(description="Labelled images over all its pairs (an image per pair).")
    fewest_labelled_in_a_pair: int
    reported_accuracy: float | None = Field(description="Reported top-1 accuracy, % (ImageNet in the paper).")
    accuracy_rank: int | None = Field(
        description="Rank by reported accuracy among those that report one and have labelled images."
    )
    mad_rank_among_reported: int | None = Field(
        description="MAD rank among the classifiers that report an accuracy and have labelled images (the "
        "rank Δrank compares)."
    )
    delta_rank: int | None = Field(description="Δrank = accuracy rank − MAD rank (paper Table 1).")


class UnrankedClassifier(BaseModel):
    """A classifier without a rank: waiting for predictions or selections, failed, or without any labelled
    image (then also in `classifiers`, with null ranks and scores)."""

    classifier_id: int
    name: str
    status: ClassifierStatus
    reason: str


class CaseSharesRead(BaseModel):
    """Shares of labelled pair images in Case I (both right), II (exactly one), III (neither)."""

    case_i: float
    case_ii: float
    case_iii: float
    images: int = Field(description="Labelled pair images (an image selected by two pairs counts twice).")


class MatricesRead(BaseModel):
    """Pairwise matrices over the compared classifiers (`classifiers`, ranked or not), rows and columns in
    classifier_ids order."""

    classifier_ids: list[int]
    accuracy: list[list[float | None]] = Field(
        description="A: a_ij = (correct_ij + α) / (n_ij + 2α); null where the pair has no labelled image "
        "(n_ij = 0, the diagonal too), where the ranking takes a_ij = ½."
    )
    dominance: list[list[float | None]] = Field(
        description="B: b_ij = a_ij / a_ji; null where n_ij = 0, where the ranking takes b_ij = 1."
    )
    labelled: list[list[int]] = Field(description="n_ij: labelled images of pair (i, j).")
    selected: list[list[int]] = Field(
        default_factory=list,
        description="Images selected for pair (i, j), at most k (empty in snapshots frozen before it was "
        "recorded).",
    )
    below_threshold: list[list[int]] = Field(
        default_factory=list,
        description="Of pair (i, j)'s selected images, those a `fill` selection took below T (0 under the "
        "absolute and quantile rules; empty in snapshots frozen before it was recorded).",
    )


class PairWithoutLabels(BaseModel):
    """A pair of compared classifiers with no labelled image yet, and what it waits for."""

    classifier_a_id: int
    classifier_b_id: int
    selected: bool = Field(description="Whether the pair's images are selected yet (a worker's select job).")
    annotators_needed: int | None = Field(
        description="More annotators who must answer before the pair's first image is labelled (a question "
        "needs a strict majority of the panel); null before the selection, or when it found no image."
    )


class InformativePair(BaseModel):
    """A pair the active policy still wants images of."""

    classifier_a_id: int
    classifier_a: str
    classifier_b_id: int
    classifier_b: str


class ActiveSamplingRead(BaseModel):
    """What active sampling settled and what it cost (issue 24; README, Active sampling)."""

    settled: bool = Field(
        description="The policy's stop rule holds at its last run: full MAD (every selected image labelled) "
        "is expected to reverse at most 0.5 pairs of neighbours of the ranking, and none with a chance above "
        "25% (docs/architecture.md, Active sampling); the queue then offers nothing more. While false, every "
        "classifier is provisional."
    )
    status: str = Field(description="`settled` or `provisional`, as `settled` says.")
    votes_used: int = Field(description="Votes stored on the competition's regular questions.")
    full_design_votes: int = Field(description="Estimated votes of the full design (`full_design`).")
    share_of_full_design: float | None = Field(description="votes_used / full_design_votes.")
    full_design: str = Field(description="How the full design's votes are estimated.")
    informative_pairs: list[InformativePair] = Field(
        description="Pairs still worth labelling at the policy's last run, most informative first."
    )
    expected_swaps: float | None = Field(
        description="At the policy's last run: the pairs of neighbours in the ranking that full MAD is "
        "expected to order the other way (null before its first run)."
    )
    early_decisions: EarlyDecisionsRead = Field(
        description="What questions decided before a strict majority of the panel rely on."
    )
    refreshed_at: datetime | None = Field(description="When the policy last ran.")


class LeaderboardRead(BaseModel):
    """The MAD ranking of a competition from its decided questions, with uncertainty and comparisons."""

    competition_id: int
    competition_name: str
    smoothing: float = Field(description="Laplace pseudo-count α of the competition.")
    bootstrap: BootstrapSettings
    provisional_rule: str
    classifiers: list[ClassifierStanding] = Field(
        description="Compared classifiers (ready, or with pair selections) in registration order; those "
        "without any labelled image have null ranks and scores."
    )
    unranked: list[UnrankedClassifier] = Field(
        description="Every classifier without a rank, with why: waiting, failed, or without labelled images."
    )
    lambda_max: float | None = Field(
        description="Largest eigenvalue of B over the ranked classifiers; their number m when B is fully "
        "consistent. Null while no pair has a labelled image."
    )
    consistency_index: float | None = Field(
        description="Saaty's CI = (λmax − m) / (m − 1) over the ranked classifiers; null with λmax."
    )
    srcc: float | None = Field(description="Spearman ρ between MAD rank and accuracy rank.")
    krcc: float | None = Field(description="Kendall τ-b between MAD rank and accuracy rank.")
    correlated_classifiers: int = Field(
        description="Classifiers that report an accuracy and have labelled images (SRCC, KRCC)."
    )
    panel_size: int | None = Field(
        default=None,
        description="Annotators per question; a strict majority decides (null in snapshots frozen before "
        "it was recorded).",
    )
    pairs_without_labels: list[PairWithoutLabels] = Field(
        default_factory=list, description="Pairs of compared classifiers with no labelled image yet."
    )
    short_pairs: list[PairSelectionRead] = Field(
        default_factory=list,
        description="Pairs of compared classifiers that selected fewer than k images, each with its "
        "threshold diagnosis and why (empty in snapshots frozen before it was recorded).",
    )
    case_shares: CaseSharesRead
    matrices: MatricesRead
    active: ActiveSamplingRead | None = Field(
        default=None,
        description="Under active sampling: whether the ranking is settled, the votes used and their share "
        "of the full design's, the pairs still informative (null under uniform sampling).",
    )


class HistoryPoint(BaseModel):
    """The ranking as it stood once `labelled_images` pair images were decided."""

    as_of: datetime
    labelled_images: int
    classifier_ids: list[int]
    mad_scores: list[float | None] = Field(description="Null for a classifier without a labelled image yet.")
    mad_ranks: list[int | None]


class HistoryRead(BaseModel):
    """How the ranking formed: the current labels replayed in the order their questions were decided."""

    competition_id: int
    classifier_names: dict[int, str]
    points: list[HistoryPoint]


class SnapshotCreate(BaseModel):
    """A note saying why the leaderboard is frozen now."""

    note: str = Field(default="", max_length=2000)


class SnapshotRead(BaseModel):
    """A frozen leaderboard: its permalink slug, when and by whom it was frozen."""

    model_config = ConfigDict(from_attributes=True)

    slug: str
    competition_id: int
    note: str
    created_at: datetime
    created_by: str | None
    url: str
    api_url: str


class SnapshotWithLeaderboard(SnapshotRead):
    """A frozen leaderboard with its stored numbers, unchanged since it was frozen."""

    leaderboard: LeaderboardRead


class ClassifierRef(BaseModel):
    """A classifier by id and name."""

    id: int
    name: str


class GalleryImage(BaseModel):
    """One image of a pair's selection with both predictions and, once decided, whether each is right."""

    position: int
    image_sha256: str
    image_url: str
    thumbnail_url: str
    distance: float
    label_a: str
    label_b: str
    prob_a: float
    prob_b: float
    below_threshold: bool = Field(
        default=False, description="Whether a `fill` selection took the image below T (false otherwise)."
    )
    correct_a: bool | None = Field(description="The image contains label_a (null until decided).")
    correct_b: bool | None
    case: int | None = Field(description="1: both right, 2: one right, 3: neither (null until both decided).")


class PairGalleryRead(BaseModel):
    """A pair's selected images S_ab (paper Fig. 1c) and the ones discarded as too difficult."""

    competition_id: int
    classifier_a: ClassifierRef
    classifier_b: ClassifierRef
    selected: list[GalleryImage] = Field(
        description="Selected images with no open question and no gold question, in order."
    )
    discarded: list[GalleryImage]
    withheld: int = Field(
        description="Selected images not listed: a question on them is open, or they have a gold question "
        "(predictions are shown once every question on an image is decided, so annotators cannot tell which "
        "model asked what; never on gold images, which annotators are still handed)."
    )
    reserve: int = Field(description="Images waiting in reserve to replace discarded ones.")
    labelled: int
    correct_a: int
    correct_b: int
    selection: PairSelectionRead = Field(
        description="How the pair's selection went: images selected of k, its diagnosis and, if short, why."
    )


class GroupPrecisionRead(BaseModel):
    """Precision of a classifier's top-1 on the MAD-labelled images it put in a class or superclass."""

    key: str
    name: str
    precision: float
    support: int


class PerplexityImage(BaseModel):
    """An image of the classifier's pairs with its C-perplexity (and X-perplexity on MAD labels)."""

    image_sha256: str
    thumbnail_url: str
    c_perplexity: float = Field(description="2^(mean entropy in bits over the ranked classifiers).")
    x_perplexity: float | None = Field(
        description="Share of classifiers judged on it (their top-1 question decided) that are wrong."
    )
    label: str = Field(description="This classifier's top-1 label.")
    prob: float
    correct: bool | None


class StabilityRead(BaseModel):
    """SRCC between the ranking from each pair's first k labelled images and from its first k' (Fig. 5)."""

    k: int
    k_prime: list[int]
    srcc: list[float | None]


class ClassifierAnalysisRead(BaseModel):
    """Where one classifier fails on MAD labels, its most perplexing images, and the ranking's stability."""

    competition_id: int
    classifier: ClassifierRef
    status: ClassifierStatus
    labelled_predictions: int = Field(
        description="Images of its pairs whose question on its own label is decided and that have no open "
        "question and no gold question (a prediction is public once its image is decided, never on a gold "
        "image)."
    )
    worst_classes: list[GroupPrecisionRead]
    worst_superclasses: list[GroupPrecisionRead]
    min_class_support: int
    min_superclass_support: int
    perplexing_images: list[PerplexityImage]
    stability: StabilityRead


class AnnotatorReliabilityRead(BaseModel):
    """One annotator's agreement with the panel and Dawid–Skene reliability, over their counted answers to
    the competition's questions that another annotator answered too (gold questions left out)."""

    user_id: int
    username: str
    answers: int = Field(description="Their counted answers.")
    shared_answers: int = Field(
        description="Those on questions with two or more counted answers: what their estimates rest on "
        "(none: no estimates)."
    )
    alpha_against_others: float | None = Field(
        default=None,
        description="Krippendorff's α between their answers and the majority of the other answers to the "
        "same questions (ties left out); null when undefined.",
    )
    dawid_skene_accuracy: float | None = Field(
        default=None, description="π·sensitivity + (1 − π)·specificity; null without shared answers."
    )
    dawid_skene_sensitivity: float | None = Field(
        default=None,
        description="Estimated P(they answer yes | the answer is yes); null without shared answers.",
    )
    dawid_skene_specificity: float | None = Field(
        default=None,
        description="Estimated P(they answer no | the answer is no); null without shared answers.",
    )


class RankingComparisonRead(BaseModel):
    """One classifier's MAD (Perron) rank from the panel's majority outcomes and from Dawid–Skene labels."""

    classifier_id: int
    name: str
    majority_rank: int | None = Field(description="Null for a classifier without labelled images.")
    dawid_skene_rank: int | None
    majority_score: float | None
    dawid_skene_score: float | None


class QualityRead(BaseModel):
    """Agreement and reliability of a competition's votes, and whether label noise moves its ranking."""

    competition_id: int
    questions: int = Field(description="Questions with a counted vote (gold questions left out).")
    questions_shared: int = Field(
        description="Those with two or more counted votes: the only ones agreement and Dawid–Skene are "
        "measured on (one answer agrees with nothing)."
    )
    votes: int = Field(description="Counted votes on them (annotators whose votes are excluded left out).")
    needs_more: str | None = Field(
        default=None,
        description="Why there are no agreement figures (no question has two counted answers yet: agreement "
        "needs at least two annotators per question); null when there are.",
    )
    alpha: float | None = Field(
        default=None,
        description="Krippendorff's α (nominal) over the questions with two or more counted votes; 1 is "
        "perfect agreement, 0 what chance gives; null when undefined.",
    )
    dawid_skene_prior_yes: float | None = Field(
        default=None,
        description="Dawid–Skene estimate of the share of yes answers (over the shared questions).",
    )
    dawid_skene_iterations: int | None = None
    labels_changed: int | None = Field(
        default=None,
        description="Decided shared questions whose Dawid–Skene label differs from the panel's majority "
        "outcome.",
    )
    annotators: list[AnnotatorReliabilityRead]
    rankings: list[RankingComparisonRead] = Field(
        default=[],
        description="Each ranked classifier's rank from majority outcomes and from Dawid–Skene labels "
        "(shared questions relabelled, the others keep their outcome); empty without agreement figures.",
    )
    srcc_majority_vs_dawid_skene: float | None = Field(
        default=None,
        description="Spearman's ρ between the MAD scores from majority outcomes and from Dawid–Skene labels "
        "(classifiers with labelled images); null when undefined.",
    )
