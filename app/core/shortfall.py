"""Why a pair selected fewer than k images, in words, from its diagnosis (app/core/selection.py), with the
change that would give it more in its own rule's terms. The words come from the catalogue passed in (a
gettext NullTranslations or one of its subclasses: English as written, or the page's language)."""

from gettext import NullTranslations

from app.core.selection import DIAGNOSED_THRESHOLDS, PairDiagnosis, Survivors
from app.core.threshold_rule import ThresholdRule


def threshold_text(
    rule: ThresholdRule, threshold: float, words: NullTranslations, cutoffs: tuple[float, float] | None = None
) -> str:
    """A threshold in words: 'T = 0.8' (absolute, fill) or 'each classifier's own 0.8 quantile', followed by
    the cutoffs it came to when given ('(p_a ≥ 0.593, p_b ≥ 0.612)')."""
    if rule != ThresholdRule.quantile:
        return f"T = {threshold:g}"
    text = words.gettext("each classifier's own {quantile} quantile").format(quantile=f"{threshold:g}")
    return text if cutoffs is None else f"{text} (p_a ≥ {cutoffs[0]:.3g}, p_b ≥ {cutoffs[1]:.3g})"


def survivors_text(diagnosis: PairDiagnosis) -> str:
    """The survivors in one line: 'T 0.5: 12 · 0.8: 0 | quantile 0.5: 40 · 0.8: 9'."""
    return " | ".join(
        ("T " if rule == ThresholdRule.absolute else "quantile ")
        + " · ".join(f"{s.threshold:g}: {s.images}" for s in diagnosis.survivors if s.rule == rule)
        for rule, _ in DIAGNOSED_THRESHOLDS
    )


def shortfall(diagnosis: PairDiagnosis, k: int, max_per_label: int, words: NullTranslations) -> str | None:
    """Why a pair selected fewer than k images, in words, with the change that would give more (a threshold
    of its own rule, else the `fill` rule); None when it selected k."""
    found = diagnosis
    if found.selected >= k:
        return None
    if found.disagreements == 0:
        return words.gettext(
            "the two classifiers never disagree: they give the same label to every image both predict"
        )
    own = threshold_text(found.rule, found.threshold, words, found.cutoffs)
    fill = found.rule == ThresholdRule.fill
    candidates = found.disagreements if fill else found.confident
    if candidates >= k:
        return _capped(found, candidates, max_per_label, own, words)
    if candidates == found.disagreements:
        return words.ngettext(
            "the two classifiers disagree on only {count} image",
            "the two classifiers disagree on only {count} images",
            found.disagreements,
        ).format(count=found.disagreements)
    return f"{_too_few_pass(found, own, words)}; {_better_choice(found, k, words)}"


def _capped(
    diagnosis: PairDiagnosis, candidates: int, max_per_label: int, own: str, words: NullTranslations
) -> str:
    """A pair with k candidates or more that the per-label cap left short, in words."""
    values = dict(cap=max_per_label, selected=diagnosis.selected, candidates=candidates, threshold=own)
    if diagnosis.rule == ThresholdRule.fill:
        template = words.ngettext(
            "the cap of {cap} image per label leaves {selected} of the {candidates} disagreements",
            "the cap of {cap} images per label leaves {selected} of the {candidates} disagreements",
            max_per_label,
        )
    else:
        template = words.ngettext(
            "the cap of {cap} image per label leaves {selected} of the {candidates} disagreements that pass "
            "{threshold}",
            "the cap of {cap} images per label leaves {selected} of the {candidates} disagreements that pass "
            "{threshold}",
            max_per_label,
        )
    return template.format(**values)


def _too_few_pass(diagnosis: PairDiagnosis, own: str, words: NullTranslations) -> str:
    """How few of a pair's disagreements pass its own threshold, in words."""
    found = diagnosis
    if found.confident > 0:
        return words.ngettext(
            "only {confident} of its {disagreements} disagreements passes {threshold}",
            "only {confident} of its {disagreements} disagreements pass {threshold}",
            found.confident,
        ).format(confident=found.confident, disagreements=found.disagreements, threshold=own)
    reason = words.ngettext(
        "none of its {count} disagreement passes {threshold}",
        "none of its {count} disagreements passes {threshold}",
        found.disagreements,
    ).format(count=found.disagreements, threshold=own)
    if found.rule == ThresholdRule.absolute and found.most_confident is not None:
        most = words.gettext("(the most confident has both probabilities ≥ {value})")
        reason += " " + most.format(value=f"{found.most_confident:.3g}")
    return reason


def _better_choice(diagnosis: PairDiagnosis, k: int, words: NullTranslations) -> str:
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
        given = min(k, better.images)
        offers.append(
            words.ngettext(
                "{threshold} would give {count} image", "{threshold} would give {count} images", given
            ).format(threshold=threshold_text(better.rule, better.threshold, words), count=given)
        )
    if better is None or better.images < k:
        given = min(k, diagnosis.disagreements)
        offers.append(
            words.ngettext(
                "threshold_rule fill at T = {threshold} would give {count} image",
                "threshold_rule fill at T = {threshold} would give {count} images",
                given,
            ).format(threshold=f"{diagnosis.threshold:g}", count=given)
        )
    return "; ".join(offers)
