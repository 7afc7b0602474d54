"""How the threshold T makes a classifier confident on an image (docs/architecture.md, The method: selection).

Kept apart from `selection.py`, which needs numpy, so that the command line can offer the choice without
loading it."""

from enum import StrEnum


class ThresholdRule(StrEnum):
    """How the threshold T makes a classifier confident on an image (module docstring)."""

    absolute = "absolute"
    """p ≥ T, the paper's rule (Sec. 3.1)."""
    quantile = "quantile"
    """p ≥ the T-quantile of the classifier's own top-1 probabilities over the corpus."""
    fill = "fill"
    """p ≥ T first (absolute), then the pair's other disagreements until k, each marked as below T."""
