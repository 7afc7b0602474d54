"""Near-duplicate images by perceptual hash: pairs whose 64-bit hashes differ in at most `max_bits` bits.

Pigeonhole search (multi-index hashing, Norouzi et al., CVPR 2012): split the 64 bits into max_bits + 1
segments; two hashes within max_bits differ in at most max_bits segments, so they agree exactly on at
least one. Hashes are grouped by each segment's value and compared only within a group, which makes the
search near-linear for well-spread hashes instead of comparing every pair.
"""

import numpy as np

ALL_BITS = np.uint64(2**64 - 1)
GROUP_ROWS = 2048
"""A larger group of equal segment values (many near-identical images) is compared in row blocks."""


def hamming_distances(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Bits differing between every hash of a (rows) and of b (columns), as uint8."""
    return np.bitwise_count(a[:, None] ^ b[None, :])


def near_duplicate_pairs(hashes: np.ndarray, is_new: np.ndarray, max_bits: int) -> list[tuple[int, int, int]]:
    """(i, j, distance) with i < j, distance <= max_bits, and hash i or j new, sorted; hashes are uint64."""
    if not 0 <= max_bits < 64:
        raise ValueError("max_bits must be between 0 and 63")
    bounds = np.linspace(0, 64, max_bits + 2).astype(np.uint64)
    found: set[tuple[int, int, int]] = set()
    for low, high in zip(bounds[:-1], bounds[1:], strict=True):
        segment = (hashes >> low) & (ALL_BITS >> (np.uint64(64) - (high - low)))
        order = np.argsort(segment, kind="stable")
        starts = np.flatnonzero(np.r_[True, segment[order][1:] != segment[order][:-1]])
        for members in np.split(order, starts[1:]):
            if len(members) > 1 and is_new[members].any():
                found |= _close_pairs(hashes, is_new, members, max_bits)
    return sorted(found)


def _close_pairs(
    hashes: np.ndarray, is_new: np.ndarray, members: np.ndarray, max_bits: int
) -> set[tuple[int, int, int]]:
    """The close pairs among one group's members with at least one new hash, in row blocks."""
    pairs = set()
    for first in range(0, len(members), GROUP_ROWS):
        rows = members[first : first + GROUP_ROWS]
        distances = hamming_distances(hashes[rows], hashes[members])
        for r, c in zip(*np.nonzero(distances <= max_bits), strict=True):
            i, j = int(rows[r]), int(members[c])
            if i < j and (is_new[i] or is_new[j]):
                pairs.add((i, j, int(distances[r, c])))
    return pairs
