"""Why a pair selected fewer than k images, in words, from its diagnosis (app/core/selection.py)."""

from app.core.selection import DIAGNOSED_THRESHOLDS, PairDiagnosis, Survivors
from app.core.threshold_rule import ThresholdRule


def threshold_text(rule: ThresholdRule, threshold: float) -> str:
    """A threshold in words: 'T = 0.8' (absolute) or 'each classifier's own 0.8 quantile'."""
    if rule == ThresholdRule.absolute:
        return f"T = {threshold:g}"
    return f"each classifier's own {threshold:g} quantile"


def survivors_text(diagnosis: PairDiagnosis) -> str:
    """The survivors in one line: 'T 0.5: 12 · 0.8: 0 | quantile 0.5: 40 · 0.8: 9'."""
    return " | ".join(
        ("T " if rule == ThresholdRule.absolute else "quantile ")
        + " · ".join(f"{s.threshold:g}: {s.images}" for s in diagnosis.survivors if s.rule == rule)
        for rule, _ in DIAGNOSED_THRESHOLDS
    )


def shortfall(diagnosis: PairDiagnosis, k: int, max_per_label: int) -> str | None:
    """Why a pair selected fewer than k images, in words, with a threshold that would give more; None when
    it selected k."""
    found = diagnosis
    if found.selected >= k:
        return None
    if found.disagreements == 0:
        return "the two classifiers never disagree: they give the same label to every image both predict"
    own = threshold_text(found.rule, found.threshold)
    if found.confident >= k:
        return (
            f"the cap of {max_per_label} images per label leaves {found.selected} of the "
            f"{found.confident} disagreements that pass {own}"
        )
    if found.confident == found.disagreements:
        reason = f"the two classifiers disagree on only {_count(found.disagreements, 'image')}"
    elif found.confident == 0:
        reason = (
            f"none of its {_count(found.disagreements, 'disagreement')} passes {own} (the most confident has "
            f"both probabilities ≥ {found.most_confident:.3g})"
        )
    else:
        reason = f"only {found.confident} of its {found.disagreements} disagreements pass {own}"
    better = _more_confident_choice(found, k)
    if better is None:
        return reason
    return f"{reason}; {better.images} would pass {threshold_text(better.rule, better.threshold)}"


def _more_confident_choice(diagnosis: PairDiagnosis, k: int) -> Survivors | None:
    """Of the diagnosed thresholds that pass more disagreements than the pair's own: the strictest that
    still passes k (fewest images ≥ k), else the one that passes most; None if none passes more."""
    more = [s for s in diagnosis.survivors if s.images > diagnosis.confident]
    if not more:
        return None
    enough = [s for s in more if s.images >= k]
    return min(enough, key=lambda s: s.images) if enough else max(more, key=lambda s: s.images)


def _count(number: int, noun: str) -> str:
    """'1 image', '3 images'."""
    return f"{number} {noun}{'' if number == 1 else 's'}"
