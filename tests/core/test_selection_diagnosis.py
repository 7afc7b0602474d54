"""A threshold that survives calibration (each classifier's own confidence quantile) and each pair's
diagnosis: its disagreements, how many pass its threshold and others, and why it selected fewer than k."""

import json

import numpy as np
import pytest

from app.core.selection import (
    DIAGNOSED_THRESHOLDS,
    PairDiagnosis,
    ThresholdRule,
    confidence_cutoffs,
    diagnose_pair,
    diagnosis_quantiles,
    own_quantiles,
    select_pair,
)
from app.core.shortfall import shortfall, survivors_text
from app.core.taxonomy_sources import imagenet_1k
from app.i18n import ENGLISH, translations

N, K, CAP = 3000, 30, 3


@pytest.fixture(scope="module")
def distance() -> np.ndarray:
    return imagenet_1k().distance_matrix()


def low_confidence_pair(seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Two ImageNet classifiers that disagree on about a third of the images, as label smoothing and mixup
    leave them: top-1 probabilities around 0.35 and 0.25, never above 0.6, each its own calibration."""
    rng = np.random.default_rng(seed)
    labels_a = rng.integers(0, 1000, N)
    labels_b = np.where(rng.random(N) < 0.3, rng.integers(0, 1000, N), labels_a)
    return labels_a, rng.uniform(0.1, 0.6, N), labels_b, rng.uniform(0.05, 0.45, N)


def reference_candidates(labels_a, probs_a, labels_b, probs_b, cutoff_a, cutoff_b, excluded=None) -> set[int]:
    """Algorithm 1's candidates row by row: both predict, labels differ, p ≥ each cutoff, not excluded."""
    return {
        x
        for x in range(len(labels_a))
        if labels_a[x] >= 0
        and labels_b[x] >= 0
        and labels_a[x] != labels_b[x]
        and probs_a[x] >= cutoff_a
        and probs_b[x] >= cutoff_b
        and (excluded is None or not excluded[x])
    }


def test_low_confidence_empties_the_absolute_threshold_and_the_quantile_rule_fills_k(distance):
    labels_a, probs_a, labels_b, probs_b = low_confidence_pair()
    absolute = select_pair(labels_a, probs_a, labels_b, probs_b, distance, k=K, threshold=0.8)
    found = diagnose_pair(labels_a, probs_a, labels_b, probs_b, selected=absolute.n_selected, threshold=0.8)
    assert absolute.n_selected == 0 and found.confident == 0 and found.disagreements > 800
    assert found.most_confident == pytest.approx(
        max(min(a, b) for a, b, la, lb in zip(probs_a, probs_b, labels_a, labels_b, strict=True) if la != lb)
    )
    why = shortfall(found, K, CAP, ENGLISH)
    assert why is not None and why.startswith(
        f"none of its {found.disagreements} disagreements passes T = 0.8"
    )
    assert why.endswith(f"; T = 0.3 would give {K} images")  # the strictest absolute T that fills k

    quantile = select_pair(
        labels_a, probs_a, labels_b, probs_b, distance, k=K, threshold=0.8, rule=ThresholdRule.quantile
    )
    cutoff_a, cutoff_b = np.quantile(probs_a, 0.8), np.quantile(probs_b, 0.8)
    assert quantile.n_selected == K
    assert (quantile.probs_i >= cutoff_a).all() and (quantile.probs_j >= cutoff_b).all()
    candidates = reference_candidates(labels_a, probs_a, labels_b, probs_b, cutoff_a, cutoff_b)
    assert set(quantile.ordinals.tolist()) <= candidates
    found = diagnose_pair(
        labels_a, probs_a, labels_b, probs_b, selected=K, threshold=0.8, rule=ThresholdRule.quantile
    )
    assert found.confident == len(candidates) and found.cutoffs == (cutoff_a, cutoff_b)
    assert shortfall(found, K, CAP, ENGLISH) is None


def test_the_quantile_rule_does_not_depend_on_calibration(distance):
    """A monotone change of one classifier's probabilities (sharpening, temperature) moves its quantiles
    with it: the quantile rule has the same candidates (all of them selected or in reserve here), the absolute
    threshold does not."""
    labels_a, probs_a, labels_b, probs_b = low_confidence_pair(seed=1)
    calibrations = ((probs_a, probs_b), (probs_a**0.2, probs_b**0.1))  # 0.1 → 0.63, 0.45 → 0.92
    chosen = {
        rule: [
            select_pair(labels_a, p_a, labels_b, p_b, distance, k=K, threshold=0.8, rule=rule).ordinals
            for p_a, p_b in calibrations
        ]
        for rule in ThresholdRule
    }
    before, after = chosen[ThresholdRule.quantile]
    assert K < len(before) < 2 * K and sorted(before) == sorted(after)
    before, after = chosen[ThresholdRule.absolute]
    assert len(before) == 0 and len(after) == 2 * K


def test_quantiles_ignore_unpredicted_and_excluded_images():
    labels = np.array([0, 1, -1, 2, 3])
    probs = np.array([0.1, 0.2, 0.99, 0.3, 0.98])
    excluded = np.array([False, False, False, False, True])
    assert own_quantiles(labels, probs, [0.0, 0.5, 1.0], excluded).tolist() == [0.1, 0.2, 0.3]
    assert own_quantiles(np.full(3, -1), np.ones(3) / 2, [0.8], None).tolist() == [1.0]
    cutoffs = confidence_cutoffs(
        np.stack([labels, labels]), np.stack([probs, probs / 2]), 0.5, ThresholdRule.quantile, excluded
    )
    assert cutoffs.tolist() == [0.2, 0.1]
    assert confidence_cutoffs(
        np.stack([labels]), np.stack([probs]), 0.8, ThresholdRule.absolute
    ).tolist() == [0.8]
    with pytest.raises(ValueError, match="quantile"):
        own_quantiles(labels, probs, [1.5], None)


@pytest.mark.parametrize("rule", [ThresholdRule.absolute, ThresholdRule.quantile])
@pytest.mark.parametrize("seed", range(4))
def test_diagnosis_counts_equal_a_row_by_row_count(rule, seed, distance):
    rng = np.random.default_rng(seed)
    n = 400
    labels_a = np.where(rng.random(n) < 0.05, -1, rng.integers(0, 20, n))
    labels_b = np.where(rng.random(n) < 0.5, labels_a, rng.integers(0, 20, n))
    probs_a, probs_b = rng.random(n), rng.random(n) ** 2
    excluded = rng.random(n) < 0.1
    threshold = float(rng.choice([0.3, 0.6, 0.75]))
    chosen = select_pair(
        labels_a, probs_a, labels_b, probs_b, distance, k=K, threshold=threshold, rule=rule, excluded=excluded
    )
    found = diagnose_pair(
        labels_a,
        probs_a,
        labels_b,
        probs_b,
        selected=chosen.n_selected,
        threshold=threshold,
        rule=rule,
        excluded=excluded,
    )

    def cutoffs(rule_, level):
        if rule_ == ThresholdRule.absolute:
            return level, level
        own = [~excluded & (labels >= 0) for labels in (labels_a, labels_b)]
        return np.quantile(probs_a[own[0]], level), np.quantile(probs_b[own[1]], level)

    count = lambda rule_, level: len(  # noqa: E731
        reference_candidates(labels_a, probs_a, labels_b, probs_b, *cutoffs(rule_, level), excluded)
    )
    assert found.disagreements == count(ThresholdRule.absolute, 0.0)
    assert found.confident == count(rule, threshold) >= chosen.n_selected == found.selected
    assert set(chosen.ordinals.tolist()) <= reference_candidates(
        labels_a, probs_a, labels_b, probs_b, *cutoffs(rule, threshold), excluded
    )
    expected = [(r, level, count(r, level)) for r, levels in DIAGNOSED_THRESHOLDS for level in levels]
    assert [(s.rule, s.threshold, s.images) for s in found.survivors] == expected
    assert PairDiagnosis.from_dict(json.loads(json.dumps(found.as_dict()))) == found

    kept = tuple(  # what a worker keeps per classifier gives the same selection and diagnosis
        diagnosis_quantiles(labels, probs, threshold, excluded)
        for labels, probs in ((labels_a, probs_a), (labels_b, probs_b))
    )
    same = dict(threshold=threshold, rule=rule, excluded=excluded, quantiles=kept)
    again = select_pair(labels_a, probs_a, labels_b, probs_b, distance, k=K, **same)
    assert again.ordinals.tolist() == chosen.ordinals.tolist()
    assert diagnose_pair(labels_a, probs_a, labels_b, probs_b, selected=chosen.n_selected, **same) == found


def diagnosis(**fields) -> PairDiagnosis:
    """A diagnosis under T = 0.8 with the given counts (survivors: absolute 0.5 and quantile 0.8)."""
    survivors = fields.pop("survivors", {})
    base = dict(
        rule="absolute",
        threshold=0.8,
        cutoffs=[0.8, 0.8],
        disagreements=68,
        confident=0,
        most_confident=0.46,
        selected=0,
    )
    base.update(fields)
    base["survivors"] = [
        {"rule": rule, "threshold": level, "images": survivors.get((rule, level), 0)}
        for rule, level in (("absolute", 0.5), ("quantile", 0.8))
    ]
    return PairDiagnosis.from_dict(base)


def test_each_kind_of_short_pair_says_why():
    assert shortfall(diagnosis(selected=30, confident=45), 30, 3, ENGLISH) is None
    assert shortfall(diagnosis(disagreements=0, most_confident=None), 30, 3, ENGLISH) == (
        "the two classifiers never disagree: they give the same label to every image both predict"
    )
    assert shortfall(diagnosis(), 30, 3, ENGLISH) == (
        "none of its 68 disagreements passes T = 0.8 (the most confident has both probabilities ≥ 0.46); "
        "threshold_rule fill at T = 0.8 would give 30 images"
    )
    assert shortfall(diagnosis(survivors={("absolute", 0.5): 12, ("quantile", 0.8): 40}), 30, 3, ENGLISH) == (
        "none of its 68 disagreements passes T = 0.8 (the most confident has both probabilities ≥ 0.46); "
        "T = 0.5 would give 12 images; threshold_rule fill at T = 0.8 would give 30 images"
    )  # the absolute rule's offers are absolute thresholds, not the quantile rule's
    assert shortfall(
        diagnosis(confident=5, selected=5, survivors={("absolute", 0.5): 32}), 30, 3, ENGLISH
    ) == ("only 5 of its 68 disagreements pass T = 0.8; T = 0.5 would give 30 images")
    assert shortfall(
        diagnosis(confident=1, selected=1, survivors={("absolute", 0.5): 2}), 30, 3, ENGLISH
    ) == (
        "only 1 of its 68 disagreements passes T = 0.8; T = 0.5 would give 2 images; "
        "threshold_rule fill at T = 0.8 would give 30 images"
    )
    assert shortfall(diagnosis(disagreements=1, confident=1, selected=1), 30, 3, ENGLISH) == (
        "the two classifiers disagree on only 1 image"
    )
    assert shortfall(diagnosis(confident=45, selected=21), 30, 3, ENGLISH) == (
        "the cap of 3 images per label leaves 21 of the 45 disagreements that pass T = 0.8"
    )
    quantile = diagnosis(
        rule="quantile", cutoffs=[0.593, 0.6124], confident=4, selected=4, survivors={("quantile", 0.8): 4}
    )
    assert shortfall(quantile, 30, 3, ENGLISH) == (
        "only 4 of its 68 disagreements pass each classifier's own 0.8 quantile (p_a ≥ 0.593, p_b ≥ 0.612); "
        "threshold_rule fill at T = 0.8 would give 30 images"
    )
    quantile = diagnosis(
        rule="quantile", confident=0, survivors={("quantile", 0.8): 40, ("absolute", 0.5): 9}
    )
    assert shortfall(quantile, 30, 3, ENGLISH) == (
        "none of its 68 disagreements passes each classifier's own 0.8 quantile (p_a ≥ 0.8, p_b ≥ 0.8); "
        "each classifier's own 0.8 quantile would give 30 images"
    )  # its own terms: quantiles, no absolute probability
    filled = diagnosis(rule="fill", confident=0, selected=20, disagreements=20)
    assert shortfall(filled, 30, 3, ENGLISH) == "the two classifiers disagree on only 20 images"
    assert shortfall(diagnosis(rule="fill", selected=25), 30, 3, ENGLISH) == (
        "the cap of 3 images per label leaves 25 of the 68 disagreements"
    )
    assert survivors_text(diagnosis(survivors={("quantile", 0.8): 40})) == "T 0.5: 0 | quantile 0.8: 40"


def test_a_short_pair_says_why_in_the_readers_language_with_its_plurals():
    german, spanish = translations("de"), translations("es")
    assert shortfall(diagnosis(), 30, 3, german) == (
        "keine seiner 68 Abweichungen erreicht T = 0.8 (die sicherste hat beide Wahrscheinlichkeiten "
        "≥ 0.46); threshold_rule fill bei T = 0.8 ergäbe 30 Bilder"
    )
    assert shortfall(diagnosis(disagreements=1, most_confident=None), 30, 3, german) == (
        "seine 1 Abweichung erreicht T = 0.8 nicht; threshold_rule fill bei T = 0.8 ergäbe 1 Bild"
    )
    assert shortfall(
        diagnosis(confident=1, selected=1, survivors={("absolute", 0.5): 2}), 30, 1, spanish
    ) == (
        "solo 1 de sus 68 desacuerdos supera T = 0.8; T = 0.5 daría 2 imágenes; "
        "threshold_rule fill con T = 0.8 daría 30 imágenes"
    )
    quantile = diagnosis(rule="quantile", confident=45, selected=1)
    assert shortfall(quantile, 30, 1, spanish) == (
        "el límite de 1 imagen por etiqueta deja 1 de los 45 desacuerdos que superan el cuantil 0.8 propio "
        "de cada clasificador (p_a ≥ 0.8, p_b ≥ 0.8)"
    )
    assert shortfall(diagnosis(disagreements=0), 30, 3, spanish) == (
        "los dos clasificadores nunca discrepan: dan la misma etiqueta a cada imagen que ambos predicen"
    )
