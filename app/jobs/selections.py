"""Stored pair selections as admins and the public see them: images selected of k, the reserve, the select
job's threshold diagnosis, and why a pair that selected fewer than k images did (docs/architecture.md,
Selection)."""

from collections.abc import Mapping
from typing import Any

from babel.support import NullTranslations
from sqlalchemy import Select, func, select
from sqlalchemy.orm import Session, aliased

from app.classifiers.enums import ClassifierStatus
from app.classifiers.models import Classifier
from app.competitions.models import Competition
from app.core.selection import PairDiagnosis
from app.core.shortfall import shortfall, survivors_text, threshold_text
from app.i18n import ENGLISH, rebuilt_in_language
from app.jobs.schemas import PairSelectionRead, SelectionDiagnosis
from app.labelling.models import PairImage, PairImageRole, PairSubset

INACTIVE = (ClassifierStatus.failed, ClassifierStatus.retired)


def pair_selections(*, db_session: Session, competition: Competition) -> list[PairSelectionRead]:
    """Every stored pair of the competition's active classifiers in id order, each with why it selected
    fewer than k images."""
    first, second = aliased(Classifier), aliased(Classifier)
    query = _selections(competition, first, second).where(
        first.status.notin_(INACTIVE), second.status.notin_(INACTIVE)
    )
    return [_pair_selection(competition, *row) for row in db_session.execute(query)]


def pair_selection(
    *, db_session: Session, competition: Competition, pair: tuple[int, int]
) -> PairSelectionRead:
    """The stored selection of one pair (lower classifier id first)."""
    first, second = aliased(Classifier), aliased(Classifier)
    query = _selections(competition, first, second).where(
        PairSubset.classifier_a_id == pair[0], PairSubset.classifier_b_id == pair[1]
    )
    return _pair_selection(competition, *db_session.execute(query).one())


def _selections(competition: Competition, first: type[Classifier], second: type[Classifier]) -> Select:
    """The competition's pair subsets with both classifiers' names, their stored image counts and how many of
    their selected images fell below T (a `fill` selection)."""
    images = select(func.count()).where(PairImage.subset_id == PairSubset.id).scalar_subquery()
    below = (
        select(func.count())
        .where(
            PairImage.subset_id == PairSubset.id,
            PairImage.role == PairImageRole.selected,
            PairImage.below_threshold,
        )
        .scalar_subquery()
    )
    return (
        select(PairSubset, first.name, second.name, images, below)
        .join(first, first.id == PairSubset.classifier_a_id)
        .join(second, second.id == PairSubset.classifier_b_id)
        .where(PairSubset.competition_id == competition.id)
        .order_by(PairSubset.classifier_a_id, PairSubset.classifier_b_id)
    )


def _pair_selection(
    competition: Competition, subset: PairSubset, name_a: str, name_b: str, stored: int, below: int
) -> PairSelectionRead:
    """One pair's selection: its first k stored images were selected, the rest are its reserve."""
    selected = min(stored, competition.k)
    return PairSelectionRead(
        classifier_a_id=subset.classifier_a_id,
        classifier_a=name_a,
        classifier_b_id=subset.classifier_b_id,
        classifier_b=name_b,
        selected=selected,
        k=competition.k,
        reserve=stored - selected,
        below_threshold=below,
        diagnosis=None if subset.diagnosis is None else SelectionDiagnosis.model_validate(subset.diagnosis),
        shortfall=why_short(competition, subset.diagnosis, selected, competition.k, ENGLISH),
    )


def why_short(
    competition: Competition,
    diagnosis: Mapping[str, Any] | None,
    selected: int,
    k: int,
    words: NullTranslations,
) -> str | None:
    """Why a pair selected fewer than k images, from its diagnosis (app.core.shortfall); for a pair selected
    before diagnoses were kept, what is known. None when it selected k."""
    if diagnosis is not None:
        return shortfall(PairDiagnosis.from_dict(diagnosis), k, competition.max_per_label, words)
    if selected >= k:
        return None
    threshold = threshold_text(competition.threshold_rule, competition.confidence_threshold, words)
    return words.ngettext(
        "only {selected} of its disagreements passed {threshold} and the cap of {cap} image per label "
        "(selected before the reasons were kept: no diagnosis)",
        "only {selected} of its disagreements passed {threshold} and the cap of {cap} images per label "
        "(selected before the reasons were kept: no diagnosis)",
        competition.max_per_label,
    ).format(selected=selected, threshold=threshold, cap=competition.max_per_label)


def shortfall_in_language(
    competition: Competition, pair: PairSelectionRead, words: NullTranslations
) -> str | None:
    """The pair's shortfall, sent in English, in the language of `words`: built again from its diagnosis and
    the competition's cap (app.i18n.rebuilt_in_language: as sent when the cap has changed since)."""
    if pair.shortfall is None:
        return None
    diagnosis = None if pair.diagnosis is None else pair.diagnosis.model_dump()
    return rebuilt_in_language(
        pair.shortfall,
        lambda catalogue: why_short(competition, diagnosis, pair.selected, pair.k, catalogue),
        words,
    )


def survivors_line(pair: PairSelectionRead) -> str:
    """How many of the pair's disagreements pass each diagnosed threshold, in one line ('' without a
    diagnosis)."""
    return (
        "" if pair.diagnosis is None else survivors_text(PairDiagnosis.from_dict(pair.diagnosis.model_dump()))
    )
