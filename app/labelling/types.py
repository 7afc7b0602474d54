"""What labelling hands out and takes in: answers, presented items, results, and the annotator and
competition as labelling reads them."""

from dataclasses import dataclass
from datetime import datetime
from typing import Literal, Protocol

from app.competitions.models import Competition, Sampling
from app.core.active import DEFAULT_GOLD_RATE
from app.labelling import rules
from app.users.models import Role

PairEntry = tuple[int, float, int, int, float, float]
"""One image of a pair's selection: (image_id, distance, label_a, label_b, prob_a, prob_b)."""


@dataclass(frozen=True)
class Answer:
    """One annotator's yes/no answer to one question and the seconds it took, as the client claims them (None:
    not sent; the server's clock bounds them, answers.timed_seconds)."""

    question_id: int
    answer: bool
    seconds: float | None


@dataclass(frozen=True)
class PresentedQuestion:
    """A question as an annotator sees it: the class name and what it means, never which model predicted
    it."""

    question_id: int
    class_index: int
    class_name: str
    definition: str
    language: str
    """The language of the class name: the annotator's when the class has a name in it, else English."""


@dataclass(frozen=True)
class PresentedItem:
    """An image leased to an annotator with the questions they still have to answer on it."""

    item_id: int
    image_sha256: str
    width: int
    height: int
    questions: list[PresentedQuestion]
    lease_expires_at: datetime


NextItemStatus = Literal["item", "busy", "skipped", "finished", "settled"]
"""Whether there is a next item, and if not why: all leased to others, only skipped ones left, none left,
nothing useful left (active sampling: the ranking is settled)."""


@dataclass(frozen=True)
class NextItem:
    """The next item, or None with why: every open image is leased to others (busy) or none is left."""

    item: PresentedItem | None
    status: NextItemStatus


@dataclass(frozen=True)
class SubmitResult:
    """What a submission stored: answers recorded, questions decided meanwhile, whether the item is done,
    why the annotator is now paused if these answers paused them, and how many more annotators the image
    waits for."""

    recorded: int
    already_decided: list[int]
    item_done: bool
    paused: str | None
    annotators_needed: int
    decided: int = 0
    """Regular questions these answers decided (active sampling counts them towards the policy's rerun)."""


@dataclass(frozen=True)
class UndoResult:
    """What undo took back (an answer to question_id, or a flag), the item to answer again, and how many
    later flags of the annotator stay (on images the panel has discarded: undo stepped past them)."""

    undone: str
    question_id: int | None
    item: PresentedItem | None
    flags_kept: int = 0


@dataclass(frozen=True)
class AnnotatorStats:
    """One annotator's progress in a competition and their accuracy on gold questions."""

    user_id: int
    username: str
    is_active: bool
    votes_excluded: bool
    answered_total: int
    answered_today: int
    flagged: int
    gold_answered: int
    gold_correct: int
    mean_seconds: float | None

    @property
    def gold_accuracy(self) -> float | None:
        """Share of gold questions answered correctly; None before the first."""
        return self.gold_correct / self.gold_answered if self.gold_answered else None


@dataclass(frozen=True)
class Labeller:
    """The account behind a labelling request, as much of it as labelling reads."""

    id: int
    role: Role
    votes_excluded: bool
    locale: str
    """The language questions are asked in: the account's setting, else the request's Accept-Language
    (app.i18n.choose_locale)."""
    weight: float | None = None
    """Under active sampling, what the account's vote carries in an early decision in the competition
    (AnnotatorReliability.weight): None when not vetted (or not read)."""


@dataclass(frozen=True)
class LabellingSettings:
    """What labelling reads of a competition: its id, its creation time and translations version (which
    key the cached class names), the panel size, the gold rate and the gold accuracy that pauses an
    annotator, its sampling, and the share of "yes" among decided questions (None before it) and whether
    the ranking was settled at the active policy's last refresh."""

    id: int
    created_at: datetime
    panel_size: int
    gold_rate: float
    gold_threshold: float
    gold_min_answers: int
    translations_version: int
    sampling: Sampling = Sampling.uniform
    yes_share: float | None = None
    settled: bool = False

    @classmethod
    def of(cls, competition: Competition) -> "LabellingSettings":
        """The labelling settings of a competition's row."""
        return cls(
            competition.id,
            competition.created_at,
            competition.panel_size,
            competition.gold_rate,
            competition.gold_threshold,
            competition.gold_min_answers,
            competition.translations_version,
            Sampling(competition.sampling),
            competition.yes_share,
            competition.settled,
        )


class Sampled(Protocol):
    """A competition as active sampling reads it (LabellingSettings, or its row)."""

    @property
    def panel_size(self) -> int: ...
    @property
    def sampling(self) -> Sampling: ...
    @property
    def yes_share(self) -> float | None: ...
    @property
    def settled(self) -> bool: ...


def actively_sampled(competition: Sampled) -> bool:
    """Whether the competition samples actively (issue 24)."""
    return competition.sampling == Sampling.active


def nothing_useful_left(competition: Sampled) -> bool:
    """Under active sampling, the ranking is settled: the queue offers nothing more."""
    return actively_sampled(competition) and competition.settled


def early_rule(competition: Sampled) -> rules.EarlyRule | None:
    """What decides a question early under active sampling (rules.EarlyRule at the competition's share of
    "yes"); None under uniform sampling and before the policy's first refresh."""
    if not actively_sampled(competition) or competition.yes_share is None:
        return None
    return rules.EarlyRule.of(competition.yes_share)


def handed_out_gold_rate(competition: LabellingSettings) -> float:
    """The chance that an image handed out is gold: the competition's gold rate, or under active sampling
    DEFAULT_GOLD_RATE when it sets none (gold, where the competition has any, is what vets annotators on
    their own: app.core.reliability)."""
    if competition.gold_rate > 0 or not actively_sampled(competition):
        return competition.gold_rate
    return DEFAULT_GOLD_RATE
