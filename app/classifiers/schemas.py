"""Response bodies for classifiers."""

from datetime import datetime
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

from app.classifiers.enums import ClassifierSource, ClassifierStatus

MAX_INPUT_SIDE = 1024
"""Largest input side a classifier may ask for: a batch of 256 such images is 0.8 GB as uint8."""
InputSide = Annotated[int, Field(ge=1, le=MAX_INPUT_SIDE)]
ChannelMean = Annotated[float, Field(ge=0, le=1, description="On the 0–1 pixel scale.")]
ChannelStd = Annotated[float, Field(gt=0, le=10, allow_inf_nan=False)]


class DataConfig(BaseModel):
    """Preprocessing that overrides the architecture's pretrained config, for weights trained differently."""

    model_config = ConfigDict(extra="forbid")

    input_size: tuple[Literal[3], InputSide, InputSide] | None = Field(
        default=None, description=f"(3, height, width), each side 1 to {MAX_INPUT_SIDE} pixels"
    )
    crop_pct: float | None = Field(default=None, gt=0, le=1)
    crop_mode: Literal["center", "squash", "border"] | None = None
    interpolation: Literal["bilinear", "bicubic", "nearest"] | None = None
    mean: tuple[ChannelMean, ChannelMean, ChannelMean] | None = None
    std: tuple[ChannelStd, ChannelStd, ChannelStd] | None = None

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
    error: str | None = Field(description="Why it failed, in one line (a worker's last error line).")
    error_detail: str | None = Field(
        default=None, description="The whole error a worker reported (a traceback); shown to admins only."
    )
    created_at: datetime
    retired_at: datetime | None

    @classmethod
    def shown_to(cls, classifier, *, admin: bool) -> "ClassifierRead":
        """The classifier as a caller sees it: anyone the one-line reason of a failure, admins the detail."""
        read = cls.model_validate(classifier)
        return read.model_copy(
            update={
                "error": one_line_reason(classifier.error),
                "error_detail": classifier.error if admin else None,
            }
        )


MAX_REASON_CHARS = 300


def one_line_reason(error: str | None) -> str | None:
    """The last non-blank line of an error (a traceback ends with 'Kind: message'), at most 300 characters."""
    if not error:
        return error
    lines = [line.strip() for line in error.splitlines() if line.strip()]
    reason = lines[-1] if lines else error.strip()
    return reason if len(reason) <= MAX_REASON_CHARS else reason[: MAX_REASON_CHARS - 1] + "…"
