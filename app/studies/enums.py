"""A study's outcomes and bonus rules; shared by the models, the API and the command line (which loads no
database for its help)."""

from enum import StrEnum


class Outcome(StrEnum):
    """How a participant left a study, each with the study's completion code for it."""

    completed = "completed"
    """They answered the images the study requires (or its upper limit, or all that were left)."""
    no_work_left = "no_work_left"
    """Nothing was left for them to label before they answered the required images."""
    screened_out = "screened_out"
    """Quality control paused them: their gold accuracy fell below the competition's threshold."""
    timed_out = "timed_out"
    """The study's time limit passed before they answered the required images."""


class BonusRule(StrEnum):
    """What a participant's bonus pays for, at the study's bonus rate (in the platform's currency)."""

    none = "none"
    per_image = "per_image"
    """Each image answered beyond the required ones, up to the upper limit (participants who completed)."""
    per_minute = "per_minute"
    """Each minute of active time by the server's clock (participants who completed or ran out of work)."""
