"""Request and response bodies for competitions."""

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from app.competitions.models import MAX_SMOOTHING, MIN_SMOOTHING, Sampling
from app.core.threshold_rule import ThresholdRule

NAME_PATTERN = r"^[a-z0-9][a-z0-9_-]{0,63}$"
GUIDELINES_MAX = 20_000
GOLD_THRESHOLD = Field(
    default=0.0,
    ge=0,
    le=1,
    allow_inf_nan=False,
    description="Quality control: an annotator whose accuracy on gold questions falls below this share is "
    "paused in the competition until an admin decides (0 never pauses).",
)
GOLD_MIN_ANSWERS = Field(
    default=10,
    ge=1,
    le=10_000,
    description="Gold answers an annotator gives before their gold accuracy can pause them.",
)
TaxonomyKind = Literal["imagenet-1k", "imagenet-a", "wordnet", "custom"]


class CompetitionCreate(BaseModel):
    """A new competition: its label set (taxonomy) and the MAD parameters of paper Sec. 3.1."""

    name: str = Field(pattern=NAME_PATTERN, examples=["imagenet-flickr"], description="Lowercase slug.")
    description: str = Field(default="", max_length=2000)
    guidelines: str = Field(
        default="",
        max_length=GUIDELINES_MAX,
        description="What annotators should know (what counts as a yes, when to flag or skip); plain text, "
        "paragraphs separated by blank lines, shown on the competition's guidelines page.",
    )
    taxonomy: TaxonomyKind = Field(
        default="imagenet-1k",
        description="imagenet-1k / imagenet-a: shipped WordNet hierarchy; wordnet: a list of noun synsets "
        "(needs WordNet data for nltk); custom: a taxonomy file's text in taxonomy_source.",
    )
    taxonomy_source: str | None = Field(
        default=None,
        max_length=5_000_000,
        description="custom: a YAML/JSON taxonomy file; wordnet: synsets (n01440764, dog.n.01), one a line.",
    )
    k: int = Field(default=30, ge=1, le=10_000, description="Images selected per classifier pair.")
    confidence_threshold: float = Field(
        default=0.8,
        ge=0,
        le=1,
        description="T: both top-1 probabilities ≥ T (absolute), or each ≥ its classifier's own T-quantile.",
    )
    threshold_rule: ThresholdRule = Field(
        default=ThresholdRule.absolute,
        description="absolute: p ≥ T, the paper's rule, which empties pairs of classifiers whose confidence "
        "stays low (label smoothing, mixup); quantile: p ≥ the T-quantile of the classifier's own top-1 "
        "probabilities over the corpus, so each classifier's most confident 1 − T passes whatever its "
        "calibration; fill: the images passing p ≥ T first, then the pair's other disagreements (by "
        "distance, then the higher min(p_a, p_b)) until k, each marked as below T.",
    )
    max_per_label: int = Field(
        default=3, ge=1, description="At most this many images per predicted label per pair."
    )
    panel_size: int = Field(
        default=5, ge=1, le=99, description="Annotators per question (odd); majority decides."
    )
    smoothing: float = Field(
        default=1.0,
        ge=MIN_SMOOTHING,
        le=MAX_SMOOTHING,
        allow_inf_nan=False,
        description=f"Laplace pseudo-count α in [{MIN_SMOOTHING}, {MAX_SMOOTHING:g}]: "
        "(correct + α) / (n + 2α); α = 0 leaves a pair where one classifier is never right without a "
        "dominance b_ij and the ranking undefined, and beyond these bounds a_ij / a_ji overflows.",
    )
    gold_rate: float = Field(
        default=0.0,
        ge=0,
        lt=1,
        description="Probability that an image handed to an annotator is a gold one (drawn each time).",
    )
    gold_threshold: float = GOLD_THRESHOLD
    gold_min_answers: int = GOLD_MIN_ANSWERS
    members_only: bool = Field(
        default=False,
        description="Open to every annotator (false) or only to the competition's members (true).",
    )
    sampling: Sampling = Field(
        default=Sampling.uniform,
        description="How the labelling queue picks images: uniform (the paper's protocol) or active (the "
        "pairs that can still change the ranking first, until it is settled); PUT …/labelling/sampling "
        "changes it.",
    )

    @field_validator("panel_size")
    @classmethod
    def _odd_panel(cls, value: int) -> int:
        """A strict majority needs an odd panel."""
        if value % 2 == 0:
            raise ValueError("panel_size must be odd so that a strict majority always exists")
        return value


SELECTION_FIELDS = ("k", "confidence_threshold", "threshold_rule", "max_per_label")
"""The settings a pair's selection depends on: changing one selects every pair again."""


class CompetitionUpdate(BaseModel):
    """What can change once a competition runs: its description, its guidelines for annotators, its
    quality control, who may label, and the selection settings (k, T, the threshold rule, the per-label cap),
    whose change selects every pair again from the stored predictions. The label set is fixed."""

    description: str | None = Field(default=None, max_length=2000)
    guidelines: str | None = Field(default=None, max_length=GUIDELINES_MAX)
    gold_threshold: float | None = Field(default=None, ge=0, le=1, allow_inf_nan=False)
    gold_min_answers: int | None = Field(default=None, ge=1, le=10_000)
    members_only: bool | None = None
    k: int | None = Field(default=None, ge=1, le=10_000, description="Images selected per classifier pair.")
    confidence_threshold: float | None = Field(
        default=None, ge=0, le=1, allow_inf_nan=False, description="T (see threshold_rule)."
    )
    threshold_rule: ThresholdRule | None = Field(
        default=None, description="absolute, quantile or fill, as at creation."
    )
    max_per_label: int | None = Field(
        default=None, ge=1, description="At most this many images per predicted label per pair."
    )
    dry_run: bool = Field(
        default=False,
        description="Change nothing: say what the change of selection settings would keep and drop.",
    )
    confirm: bool = Field(
        default=False,
        description="Apply a change of selection settings that drops votes (on images no longer selected); "
        "without it such a change is refused with 409, saying how many it would keep and drop.",
    )

    def selection_change(self, competition_values: dict[str, object]) -> dict[str, object]:
        """The selection settings given that differ from the competition's current `competition_values`."""
        given = self.model_dump(include=set(SELECTION_FIELDS), exclude_none=True)
        return {name: value for name, value in given.items() if competition_values[name] != value}


class ReselectionRead(BaseModel):
    """What a change of selection settings does (or, on a dry run, would do) to the votes: every vote on a
    question the new selection still asks is kept, the others are dropped with their questions."""

    applied: bool = Field(description="Whether the change was made (false on a dry run).")
    votes_kept: int = Field(description="Votes on questions the new selection still asks.")
    votes_dropped: int = Field(description="Votes on questions of images no longer selected.")
    study_votes_dropped: int = Field(
        default=0,
        description="Of the dropped votes, those that count as crowd-study participants' work: their images "
        "answered, active time and bonuses are counted from their votes, so they would drop too.",
    )
    select_jobs: int = Field(
        description="Select jobs queued to select the pairs again (on a dry run: that it would queue)."
    )


class CompetitionRead(BaseModel):
    """A competition as the API shows it."""

    model_config = ConfigDict(from_attributes=True)

    id: int
    name: str
    description: str
    guidelines: str
    taxonomy: str
    num_classes: int
    k: int
    confidence_threshold: float
    threshold_rule: ThresholdRule
    max_per_label: int
    panel_size: int
    smoothing: float
    gold_rate: float
    gold_threshold: float
    gold_min_answers: int
    members_only: bool
    sampling: Sampling
    created_at: datetime
    image_count: int


class CompetitionUpdated(CompetitionRead):
    """A competition after a change, with what a change of its selection settings did to the votes."""

    reselection: ReselectionRead | None = Field(
        default=None, description="Present when the selection settings changed (or on a dry run)."
    )


class MemberRead(BaseModel):
    """An annotator who may label in a members-only competition."""

    user_id: int
    username: str
    added_at: datetime


class ClassRead(BaseModel):
    """One class of the label set: its index (the models' output index), key, display name and what it
    means (a WordNet gloss or a custom taxonomy's description; empty when the taxonomy gives none)."""

    index: int
    key: str
    name: str
    definition: str


class TranslationsRead(BaseModel):
    """A competition's class names per language: what an import took, and the share of classes each language
    names."""

    imported: dict[str, int] = Field(
        default_factory=dict,
        examples=[{"de": 1000}],
        description="Rows taken per language by this import (each replaces that language's earlier import).",
    )
    coverage: dict[str, float] = Field(
        examples=[{"en": 1.0, "de": 1.0, "es": 0.25}],
        description="Per language the pages come in: the share of classes with a name in it (from the "
        "taxonomy file or an import); annotators are asked in English about the others.",
    )
