"""Request and response bodies for competitions."""

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

NAME_PATTERN = r"^[a-z0-9][a-z0-9_-]{0,63}$"
TaxonomyKind = Literal["imagenet-1k", "imagenet-a", "wordnet", "custom"]


class CompetitionCreate(BaseModel):
    """A new competition: its label set (taxonomy) and the MAD parameters of paper Sec. 3.1."""

    name: str = Field(pattern=NAME_PATTERN, examples=["imagenet-flickr"], description="Lowercase slug.")
    description: str = Field(default="", max_length=2000)
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
        default=0.8, ge=0, le=1, description="T: both top-1 probabilities ≥ T."
    )
    max_per_label: int = Field(
        default=3, ge=1, description="At most this many images per predicted label per pair."
    )
    panel_size: int = Field(
        default=5, ge=1, le=99, description="Annotators per question (odd); majority decides."
    )
    smoothing: float = Field(
        default=1.0,
        gt=0,
        description="Laplace pseudo-count α > 0: (correct + α) / (n + 2α); α = 0 leaves a pair where one "
        "classifier is never right without a dominance b_ij and the ranking undefined.",
    )
    gold_rate: float = Field(
        default=0.0, ge=0, lt=1, description="Share of gold questions mixed into labelling."
    )

    @field_validator("panel_size")
    @classmethod
    def _odd_panel(cls, value: int) -> int:
        """A strict majority needs an odd panel."""
        if value % 2 == 0:
            raise ValueError("panel_size must be odd so that a strict majority always exists")
        return value


class CompetitionRead(BaseModel):
    """A competition as the API shows it."""

    model_config = ConfigDict(from_attributes=True)

    id: int
    name: str
    description: str
    taxonomy: str
    num_classes: int
    k: int
    confidence_threshold: float
    max_per_label: int
    panel_size: int
    smoothing: float
    gold_rate: float
    created_at: datetime
    image_count: int


class ClassRead(BaseModel):
    """One class of the label set: its index (the models' output index), key and display name."""

    index: int
    key: str
    name: str
