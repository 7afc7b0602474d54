"""Core results as the API writes them, to compare the two."""

import numpy as np


def as_served(values) -> list:
    """A numpy array (any depth) as nested lists with NaN as None: the API's null for no score, no rank,
    no a_ij of a pair without labels."""
    return [
        as_served(value) if np.ndim(value) else (None if np.isnan(value) else value.item())
        for value in values
    ]


def close(served: list, values) -> bool:
    """Whether the API's numbers (nested lists, None: null) equal these (NaN: none) up to float noise."""
    given = np.array(served, dtype=np.float64)  # None becomes NaN
    return given.shape == np.shape(values) and bool(np.allclose(given, values, equal_nan=True))
