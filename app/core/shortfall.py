"""Why a pair selected fewer than k images, in words, from its diagnosis (app/core/selection.py), with the
change that would give it more in its own rule's terms."""

from app.core.selection import DIAGNOSED_THRESHOLDS, PairDiagnosis, Survivors
from app.core.threshold_rule import ThresholdRule


def threshold_text(rule: ThresholdRule, threshold: float, cutoffs: tuple[float, float] | None = None) -> str:
    """A threshold in words: 'T = 0.8' (absolute, fill) or 'each classifier's own 0.8 quantile', followed by
    the cutoffs it came to when given ('(p_a ≥ 0.593, p_b ≥ 0.612)')."""
    if rule != ThresholdRule.quantile:
        return f"T = {threshold:g}"
    text = f"each classifier's own {threshold:g} quantile"
    return text if cutoffs is None else f"{text} (p_a ≥ {cutoffs[0]:.3g}, p_b ≥ {cutoffs[1]:.3g})"


def survivors_text(diagnosis: PairDiagnosis) -> str:
    """The survivors in one line: 'T 0.5: 12 · 0.8: 0 | quantile 0.5: 40 · 0.8: 9'."""
    return " | ".join(
        ("T " if rule == ThresholdRule.absolute else "quantile ")
        + " · ".join(f"{s.threshold:g}: {s.images}" for s in diagnosis.survivors if s.rule == rule)
        for rule, _ in DIAGNOSED_THRESHOLDS
    )


def shortfall(diagnosis: PairDiagnosis, k: int, max_per_label: int) -> str | None:
    """Why a pair selected fewer than k images, in words, with the change that would give more (a threshold
    of its own rule, else the `fill` rule); None when it selected k."""
    found = diagnosis
    if found.selected >= k:
        return None
    if found.disagreements == 0:
        return "the two classifiers never disagree: they give the same label to every image both predict"
    own = threshold_text(found.rule, found.threshold, found.cutoffs)
    fill = found.rule == ThresholdRule.fill
    candidates = found.disagreements if fill else found.confident
    if candidates >= k:
        passing = "disagreements" if fill else f"disagreements that pass {own}"
        cap = f"the cap of {max_per_label} images per label"
        return f"{cap} leaves {found.selected} of the {candidates} {passing}"
    if candidates == found.disagreements:
        return f"the two classifiers disagree on only {_count(found.disagreements, 'image')}"
    if found.confident == 0:
        reason = f"none of its {_count(found.disagreements, 'disagreement')} passes {own}"
        if found.rule == ThresholdRule.absolute and found.most_confident is not None:
            reason += f" (the most confident has both probabilities ≥ {found.most_confident:.3g})"
    else:
        verb = "passes" if found.confident == 1 else "pass"
        reason = f"only {found.confident} of its {found.disagreements} disagreements {verb} {own}"
    return f"{reason}; {_better_choice(found, k)}"


def _better_choice(diagnosis: PairDiagnosis, k: int) -> str:
    """The change that gives a pair short of candidates more images, before the per-label cap: of its own
    rule's diagnosed thresholds that pass more disagreements, the strictest that passes k, else the one that
    passes most, and then, if that is still short of k, the `fill` rule (the disagreements below T too)."""
    more = [s for s in diagnosis.survivors if s.rule == diagnosis.rule and s.images > diagnosis.confident]
    enough = [s for s in more if s.images >= k]
    better: Survivors | None = min(enough, key=lambda s: s.images) if enough else None
    if better is None and more:
        better = max(more, key=lambda s: s.images)
    offers = []
    if better is not None:
        given = _count(min(k, better.images), "image")
        offers.append(f"{threshold_text(better.rule, better.threshold)} would give {given}")
    if better is None or better.images < k:
        given = _count(min(k, diagnosis.disagreements), "image")
        offers.append(f"threshold_rule fill at T = {diagnosis.threshold:g} would give {given}")
    return "; ".join(offers)


def _count(number: int, noun: str) -> str:
    """'1 image', '3 images'."""
    return f"{number} {noun}{'' if number == 1 else 's'}"
