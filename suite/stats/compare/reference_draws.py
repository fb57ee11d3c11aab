"""The reference Multi-Bootstrap's random draws (`multibootstrap.py`, google-research/language),
made at once: per replicate, `randint(0, k, size=k)` of numpy's legacy `RandomState` for each
bound k in turn. Replicate for replicate the same numbers as that loop, which is what the
Multi-Bootstrap's tests hold it to.

Why by hand: a grid of 80 blocks of 125 runs a side makes 160,000 such calls of a few
microseconds each, most of them call overhead. numpy's legacy stream is frozen (NEP 19), and its
bounded integers are masked rejection sampling: each attempt takes one 32-bit word of the
Mersenne Twister, masks it to the bits of k - 1 and keeps it unless it exceeds k - 1. So the
words are drawn once and each call's values are the next k kept words under its mask."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

MOST_VALUES = 2_000_000  # more draws than this in all: None (the loop's calls are then long)


def randint_rows(seed: int, bounds: Sequence[int], nboot: int) -> list[np.ndarray] | None:
    """For each bound k: (nboot, k) int64 values, as `RandomState(seed)` draws them with
    `randint(0, k, size=k)` for each replicate and, within it, each bound in turn (a bound of 1
    or less draws nothing: zeros). None where they would be more than MOST_VALUES."""
    total = nboot * sum(k for k in bounds if k > 1)
    if total > MOST_VALUES:
        return None
    words = max(4096, int(2.2 * total))  # an attempt is kept with probability above 1/2
    while (found := _rows(seed, bounds, nboot, words)) is None:
        words *= 2
    return found


def _rows(seed: int, bounds: Sequence[int], nboot: int, words: int) -> list[np.ndarray] | None:
    """`randint_rows` from the first `words` words of the stream; None if they run out."""
    stream = np.random.RandomState(seed).randint(0, 2**32, size=words, dtype=np.uint32)
    kept = {}  # bound -> (its mask, the positions of the words it keeps)
    for k in {k for k in bounds if k > 1}:
        mask = np.uint32((1 << (k - 1).bit_length()) - 1)
        kept[k] = mask, np.flatnonzero((stream & mask) <= k - 1)
    drawing = [(k, kept[k][1], len(kept[k][1]) - k) for k in bounds if k > 1]  # (bound, words, last start)
    firsts = []  # per replicate and drawing bound in turn, its first kept word
    at = 0  # the next word of the stream
    for _ in range(nboot):  # the loop's own cost: each draw starts where the last ended
        for k, positions, last in drawing:
            first = int(positions.searchsorted(at))
            if first > last:
                return None
            firsts.append(first)
            at = int(positions[first + k - 1]) + 1
    starts = np.zeros((len(bounds), nboot), dtype=np.int64)  # per draw (bound), its first kept word
    starts[[j for j, k in enumerate(bounds) if k > 1]] = np.reshape(firsts, (nboot, len(drawing))).T
    out = []
    for j, k in enumerate(bounds):
        if k <= 1:
            out.append(np.zeros((nboot, max(k, 0)), dtype=np.int64))
            continue
        mask, positions = kept[k]
        picked = positions[starts[j][:, None] + np.arange(k)]
        out.append((stream[picked] & mask).astype(np.int64))
    return out
