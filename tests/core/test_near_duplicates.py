"""Near-duplicate search by pHash: the pigeonhole search finds exactly the pairs a brute force finds."""

import numpy as np
import pytest

from app.core.near_duplicates import hamming_distances, near_duplicate_pairs


def brute_force(hashes: np.ndarray, is_new: np.ndarray, max_bits: int) -> list[tuple[int, int, int]]:
    distances = hamming_distances(hashes, hashes)
    return sorted(
        (int(i), int(j), int(distances[i, j]))
        for i, j in zip(*np.nonzero(distances <= max_bits), strict=True)
        if i < j and (is_new[i] or is_new[j])
    )


@pytest.mark.parametrize("max_bits", [0, 4, 9])
def test_the_segment_search_finds_exactly_the_close_pairs(max_bits):
    rng = np.random.default_rng(max_bits)
    hashes = rng.integers(0, 2**63, 2000, dtype=np.int64).astype(np.uint64) << np.uint64(1)
    for _ in range(60):  # plant copies with 0..max_bits + 2 flipped bits
        source, target = rng.integers(0, len(hashes), 2)
        flips = rng.choice(64, int(rng.integers(0, max_bits + 3)), replace=False).astype(np.uint64)
        hashes[target] = hashes[source] ^ np.bitwise_or.reduce(np.uint64(1) << flips, initial=np.uint64(0))
    hashes[:50] = hashes[50]  # a large group of identical hashes
    is_new = rng.random(len(hashes)) < 0.3

    found = near_duplicate_pairs(hashes, is_new, max_bits)

    assert found == brute_force(hashes, is_new, max_bits) and len(found) > 50
    assert all(is_new[i] or is_new[j] for i, j, _ in found)


def test_a_threshold_outside_the_hash_is_refused():
    with pytest.raises(ValueError, match="between 0 and 63"):
        near_duplicate_pairs(np.zeros(2, np.uint64), np.ones(2, bool), 64)
