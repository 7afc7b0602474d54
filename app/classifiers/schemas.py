"""Response bodies for classifiers."""

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, PositiveFloat

from app.classifiers.models import ClassifierSource, ClassifierStatus


class DataConfig(BaseModel):
    """Preprocessing that overrides the architecture's pretrained config, for weights trained differently."""

    model_config = ConfigDict(extra="forbid")

    input_size: tuple[Literal[3], int, int] | None = Field(default=None, description="(3, height, width)")
    crop_pct: float | None = Field(default=None, gt=0, le=1)
    crop_mode: Literal["center", "squash", "border"] | None = None
    interpolation: Literal["bilinear", "bicubic", "nearest"] | None = None
    mean: tuple[float, float, float] | None = None
    std: tuple[PositiveFloat, PositiveFloat, PositiveFloat] | None = None

    def overlay(self) -> dict:
        """The fields that are set, as a timm pretrained_cfg overlay."""
        return self.model_dump(exclude_none=True)


class ClassifierRead(BaseModel):
    """A classifier of a competition, where its predictions come from, and its state."""

    model_config = ConfigDict(from_attributes=True)

    id: int
    competition_id: int
    name: str
    source: ClassifierSource
    architecture: str | None
    pretrained_tag: str | None
    weights_sha256: str | None
    data_config: dict | None
    reported_accuracy: float | None
    status: ClassifierStatus
    error: str | None
    created_at: datetime
    retired_at: datetime | None
