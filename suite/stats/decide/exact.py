"""Exact and permutation tests on runs, vectorised over leading axes (one row in `suite compare`,
thousands in the calibration tests), and the distribution-free shift intervals.

Why permutation tests: with independent runs of one setting the runs are exchangeable under "no
effect", so a test over all C(m + n, m) splits of the pooled runs (or a random sample of them) is
exact at any n, ties included; its smallest two-sided p is 2 / C(m + n, m) (decidable.py).
Brown-Forsythe's parametric F is not: with 4 runs a side it rejected 6.8% of normal and 14.5% of
collapsing null studies, 7.4% at 8 (two middle deviations from an even-n median are always equal),
and at 3 it never rejected; its statistic under permutation is exact (<= 5.3% measured).
Two-sided p throughout: twice the smaller tail, capped at 1. The splits themselves, every one or
drawn, are splits.py's.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cache

import numpy as np
from scipy import stats

import suite.stats.decide.decidable as decidable
from suite.stats.decide.splits import RESAMPLES, Splits, index_type, split_count, splits

ALPHA = decidable.ALPHA
_CELLS = 4_000_000  # elements per chunk of permuted copies
# Pooled runs from which a test reads splits as membership, not orders: measured on 2 cores, a
# chunk of 4,000,000 took 21 ms either way at 2,000 runs; at 250, 10 ms by orders and 31 by
# membership; at 20,000, 48 and 20.
_MEMBERS_FROM = 2_000

Statistic = Callable[[np.ndarray, np.ndarray], np.ndarray]


def _tails(observed: np.ndarray, draws: Callable[[int, int], np.ndarray], total: int, chunk: int) -> tuple:
    """Counts of permuted statistics >= and <= the observed one (with a float tolerance)."""
    tol = 1e-9 * (1 + np.abs(observed))[..., None]
    hi = lo = np.zeros(observed.shape, dtype=np.int64)
    for start in range(0, total, chunk):
        t = draws(start, min(start + chunk, total))
        hi = hi + (t >= observed[..., None] - tol).sum(-1)
        lo = lo + (t <= observed[..., None] + tol).sum(-1)
    return hi, lo


def _two_sided(hi: np.ndarray, lo: np.ndarray, total: int, exact: bool) -> np.ndarray:
    tail = np.minimum(hi, lo)
    p = (
        2 * tail / total if exact else 2 * (tail + 1) / (total + 1)
    )  # a drawn sample counts the observed split
    return np.minimum(p, 1.0)


def permutation_p(
    x: np.ndarray, y: np.ndarray, statistic: Statistic, resamples: int = RESAMPLES, seed: int = 0
) -> np.ndarray:
    """Two-sided p of statistic(x, y) (arm A, arm B: last axis runs) over splits of the pooled runs.
    The median, spread and mean shifts of 1-D arms are computed in cheaper forms (`_ON_SORTED_RANKS`,
    `_sums_of_a`) that sum in another order: the same p for ranks (exact sums), and within the
    1e-9 tolerance of `_tails` on raw scores."""
    m, n = x.shape[-1], y.shape[-1]
    split = splits(m, n, resamples, seed)
    pooled = np.concatenate([x, y], axis=-1)
    chunk = max(1, _CELLS // max(pooled.size, 1))
    # the sorted-rank form of a known statistic (by identity: a statistic need not hash), 1-D arms only
    on_ranks = next((f for known, f in _ON_SORTED_RANKS if known is statistic), None)
    arms = _sorted_arms(pooled, m) if on_ranks and pooled.ndim == 1 and m and n else None
    on_sums = statistic is mean_shift and pooled.ndim == 1 and m and n

    def draws(start: int, stop: int) -> np.ndarray:
        if arms is not None:
            if split.kept is None:
                return on_ranks(*arms(split, start, stop))
            key = (split.kept, pooled.dtype.str, pooled.tobytes(), m, start, stop)
            return on_ranks(*_recent(key, lambda: arms(split, start, stop)))
        if on_sums:  # B's sum is the pool's less A's: arm A's alone
            return _mean_shift_of_sums(_sums_of_a(pooled, m, split, start, stop), pooled.sum(), m, n)
        g = pooled[..., split.orders(start, stop)]
        return statistic(g[..., :m], g[..., m:])

    hi, lo = _tails(statistic(x, y), draws, split.total, chunk)
    return _two_sided(hi, lo, split.total, split.exact)


_RECENT: dict[tuple, tuple] = {}
_RECENT_CHUNKS = 4


def _recent(key: tuple, make: Callable[[], tuple]) -> tuple:
    """The sorted-rank arms of a chunk of kept splits, for the last few chunks: a block's median
    and spread tests read the same splits of the same runs, and ranking them (a gather and two
    sorts of 16,000 x 250 integers) is most of each test's time. Keyed by the splits' name and the
    pooled values, never by an object's identity."""
    if key not in _RECENT:
        while len(_RECENT) >= _RECENT_CHUNKS:
            del _RECENT[next(iter(_RECENT))]  # the oldest
        _RECENT[key] = make()
    return _RECENT[key]


def _by_members(runs: int) -> bool:
    """Whether splits of this many pooled runs are read as arm A's membership (a pass over each
    split's runs), not as orders (a gather and a sort of each arm): from _MEMBERS_FROM runs."""
    return runs >= _MEMBERS_FROM


def _sums_of_a(pooled: np.ndarray, m: int, split: Splits, start: int, stop: int) -> np.ndarray:
    """Arm A's sums over the splits start..stop (Mann-Whitney's ranks: exact in either order)."""
    if _by_members(pooled.size):
        return split.members(start, stop) @ pooled
    return pooled[split.orders(start, stop)[:, :m]].sum(-1)


def _sorted_arms(pooled: np.ndarray, m: int) -> Callable[[Splits, int, int], tuple[np.ndarray, ...]]:
    """(splits, start, stop) -> (A's ranks, B's ranks, the pooled values ascending): each arm as
    the runs' ordinal ranks ascending, where a median's selection over float rows took 35 ms per
    20,000 splits; a median then reads two values per split, not every run's. Few runs: the ranks
    gathered by each split's order and each arm sorted. Many (`_by_members`): read off arm A's
    membership in rank order, linear in the runs where the sort took 5 ms per split of 200,000.
    The same splits: the same p."""
    by_rank = np.argsort(pooled, kind="stable")
    ascending, small = pooled[by_rank], index_type(pooled.size)  # small: kept arms take little room
    rank = np.empty(pooled.size, dtype=small)
    rank[by_rank] = np.arange(pooled.size)

    def arms(split: Splits, start: int, stop: int) -> tuple[np.ndarray, ...]:
        if not _by_members(pooled.size):
            r = rank[split.orders(start, stop)]
            r[:, :m].sort(axis=1)
            r[:, m:].sort(axis=1)
            return r[:, :m], r[:, m:], ascending
        in_rank = np.take(split.members(start, stop), by_rank, axis=1)
        offset = np.arange(len(in_rank))[:, None] * pooled.size  # each row's start in the flat order
        a, b = (np.flatnonzero(k).reshape(len(in_rank), -1) - offset for k in (in_rank, ~in_rank))
        return a.astype(small), b.astype(small), ascending

    return arms


def smallest_p(x: np.ndarray, y: np.ndarray, statistic: Statistic, resamples: int = RESAMPLES) -> float:
    """The smallest two-sided p any split of these runs can give: twice the fewer splits at the
    statistic's maximum or minimum (ties between runs, or between medians of an even number of runs,
    put several splits there: the permutation test of medians cannot reach 0.05 below 5 runs a side).
    With sampled splits, 2 / (splits + 1)."""
    m, n = x.shape[-1], y.shape[-1]
    total, exact = split_count(m, n, resamples)
    if not exact:
        return 2 / (total + 1)
    every = splits(m, n, resamples).orders(0, total)
    g = np.concatenate([x, y])[every]
    t = statistic(g[:, :m], g[:, m:])
    tol = 1e-9 * (1 + np.abs(t).max())
    return min(1.0, 2 * min(int((t >= t.max() - tol).sum()), int((t <= t.min() + tol).sum())) / len(t))


@cache
def runs_needed(statistic: Statistic) -> int | None:
    """The fewest runs per arm at which the permutation test of `statistic` can reach ALPHA, for runs
    without ties (a fixed normal sample)."""

    def at(k: int) -> float:
        values = np.random.default_rng(0).normal(size=2 * k)
        if statistic is mean_shift:  # Mann-Whitney: on ranks
            values = stats.rankdata(values)
        return smallest_p(values[:k], values[k:], statistic)

    return decidable.runs_needed(at, 2)


def ranked(x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Mid-ranks of the pooled runs (along the last axis), split back into the two arms."""
    ranks = stats.rankdata(np.concatenate([x, y], axis=-1), axis=-1)
    return ranks[..., : x.shape[-1]], ranks[..., x.shape[-1] :]


def _median(x: np.ndarray) -> np.ndarray:
    return np.median(x, axis=-1)


def _mad(x: np.ndarray, median: Callable[[np.ndarray], np.ndarray]) -> np.ndarray:
    """Mean absolute deviation from the median."""
    return np.abs(x - median(x)[..., None]).mean(-1)


def _middle_of(ranks: np.ndarray, ascending: np.ndarray) -> np.ndarray:
    """The median of an arm given as sorted ranks into the pooled values `ascending`: np.median's
    value, from the middle one or two runs."""
    k = ranks.shape[-1]
    upper = ascending[ranks[:, k // 2]]
    return upper if k % 2 else (ascending[ranks[:, k // 2 - 1]] + upper) / 2


def _mad_of(ranks: np.ndarray, ascending: np.ndarray) -> np.ndarray:
    """`_mad` of an arm given as sorted ranks: the upper half's sum less the lower half's, over
    the runs (the median's own terms cancel, for odd and even counts alike), on values less the
    pool's middle one (the spread is the same; sums of scores near 1e9 would lose their digits)."""
    k = ranks.shape[-1]
    values = ascending[ranks] - ascending[ascending.size // 2]
    return (values[:, k - k // 2 :].sum(-1) - values[:, : k // 2].sum(-1)) / k


def _mean_shift_of_sums(sum_a: np.ndarray, total: float, m: int, n: int) -> np.ndarray:
    """`mean_shift` from arm A's sums and the pool's total."""
    return (total - sum_a) / n - sum_a / m


def median_shift(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return _median(b) - _median(a)


def mean_shift(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return b.mean(-1) - a.mean(-1)


def spread_shift(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Brown-Forsythe's statistic: the difference in mean absolute deviation from each arm's median."""
    return _mad(b, _median) - _mad(a, _median)


# The same statistics on arms of sorted ranks (`_sorted_arms`), cheaper: the median exactly
# np.median's; the spread, and the mean shift from sums, summed in another order (within 1e-12,
# under `_tails`' tolerance).
_ON_SORTED_RANKS: tuple[tuple[Statistic, Callable[..., np.ndarray]], ...] = (
    (median_shift, lambda a, b, values: _middle_of(b, values) - _middle_of(a, values)),
    (spread_shift, lambda a, b, values: _mad_of(b, values) - _mad_of(a, values)),
)


def signed_rank_p(d: np.ndarray, resamples: int = 2**16, seed: int = 0) -> np.ndarray:
    """Wilcoxon signed-rank test of paired differences (zeros dropped, mid-ranks for ties), by sign
    flips: all 2^n patterns up to `resamples` (exact, zeros and ties included, to 16 pairs by
    default), else a random sample of them. scipy's `wilcoxon` (1.15 on) is exact with a zero or a
    tie only to 13 pairs (every sign flip) and past that falls back to the normal approximation."""
    n = d.shape[-1]
    zero = d == 0
    ranks = stats.rankdata(np.abs(d), axis=-1) - zero.sum(-1, keepdims=True)
    ranks = np.where(zero, 0.0, ranks)  # a zero difference has no sign: it counts in neither tail
    exact = 2**n <= resamples
    rng = np.random.default_rng(seed)
    if exact:
        signs = 1 - 2 * ((np.arange(2**n)[:, None] >> np.arange(n)) & 1)
    else:
        signs = rng.choice([-1, 1], size=(resamples, n))
    chunk = max(1, _CELLS // max(ranks.size, 1))

    def draws(start: int, stop: int) -> np.ndarray:
        return ranks @ signs[start:stop].T.astype(float)

    hi, lo = _tails((np.sign(d) * ranks).sum(-1), draws, len(signs), chunk)
    return _two_sided(hi, lo, len(signs), exact)


@cache
def _u_cdf(m: int, n: int) -> np.ndarray:
    """P(U <= u), u = 0..mn, for m and n runs without ties (counts by the recurrence on the last run)."""
    previous = [np.ones(1)] * (n + 1)  # i = 0 runs in arm A: U = 0 whatever j
    for i in range(1, m + 1):
        row = [np.ones(1)]
        for j in range(1, n + 1):
            out = np.zeros(i * j + 1)
            out[j:] += previous[j]  # the largest run is A's: above all j of B
            out[: i * (j - 1) + 1] += row[j - 1]  # the largest run is B's
            row.append(out)
        previous = row
    c = previous[n]
    return np.cumsum(c) / c.sum()


def moses_k(m: int, n: int, alpha: float = ALPHA) -> int:
    """Order of the two-sided Moses interval at level 1 - alpha (95% by default): the k-th smallest
    and largest of the m x n differences, the largest k with P(U <= k - 1) <= alpha / 2 (0: no such
    interval exists). Exact distribution up to 60 runs a side, else its continuity-corrected
    normal approximation."""
    if max(m, n) <= 60:
        return int(np.searchsorted(_u_cdf(m, n), alpha / 2, side="right"))
    return int(np.floor(m * n / 2 - stats.norm.ppf(1 - alpha / 2) * np.sqrt(m * n * (m + n + 1) / 12) + 0.5))


PAIRWISE_CELLS = 4_000_000  # above m x n this many, order statistics of y - x by search, not a sort


def moses_interval(
    x: np.ndarray, y: np.ndarray, alpha: float = ALPHA
) -> tuple[np.ndarray, np.ndarray | None]:
    """Hodges-Lehmann shift y - x (median of all pairwise differences; last axis: runs) and its
    exact Moses interval at level 1 - alpha (95% by default), (..., 2), or None when none exists at
    these run counts and this level. The one home of both: `compare` reads it at 95%, the
    sequential rule (sequential.py) at each look's share of alpha."""
    m, n = x.shape[-1], y.shape[-1]
    k = moses_k(m, n, alpha)
    if x.ndim == 1 and m * n > PAIRWISE_CELLS:  # 10,000 runs a side: 10^8 differences to sort
        xs, ys = np.sort(x), np.sort(y)
        ci = (
            np.array([_kth_difference(xs, ys, k), _kth_difference(xs, ys, m * n - k + 1)]) if k >= 1 else None
        )
        middle = [_kth_difference(xs, ys, j) for j in sorted({(m * n + 1) // 2, m * n // 2 + 1})]
        return np.float64(np.mean(middle)), ci
    d = np.sort((y[..., None, :] - x[..., :, None]).reshape(*x.shape[:-1], m * n), axis=-1)
    ci = np.stack([d[..., k - 1], d[..., m * n - k]], axis=-1) if k >= 1 else None
    return np.median(d, axis=-1), ci


def _kth_difference(xs: np.ndarray, ys: np.ndarray, k: int) -> float:
    """The k-th smallest (1-based) of all y_j - x_i as numpy computes them, x and y sorted, without
    forming them: bisect over the floats between the smallest and largest difference (as ordered
    integers: at most 64 steps), counting the differences <= t by a search of x's distinct values
    per y (O(n log m) a step). Hand-written: numpy has no selection over the pairwise differences
    of two arrays, and two 10,000-run arms have 10^8 of them."""
    values, counts = np.unique(xs, return_counts=True)
    at_least = np.concatenate([np.cumsum(counts[::-1])[::-1], [0]])  # runs of x from each value up

    def count(t: float) -> int:
        b = np.searchsorted(values, ys - t, "left")  # then exact: y - x itself, not x >= y - t
        for _ in range(values.size):  # a step at most, but for values within an ulp of each other
            back = (b > 0) & (ys - values[np.maximum(b - 1, 0)] <= t)
            ahead = (b < values.size) & (ys - values[np.minimum(b, values.size - 1)] > t)
            if not (back.any() or ahead.any()):
                break
            b = b - back + ahead
        return int(at_least[b].sum())

    low, high = _ordered(ys[0] - xs[-1]) - 1, _ordered(ys[-1] - xs[0])  # count(low) < k <= count(high)
    while high - low > 1:
        middle = (low + high) // 2
        low, high = (low, middle) if count(_float(middle)) >= k else (middle, high)
    return _float(high)


def _ordered(v: float) -> int:
    """A float as an integer in the same order (negative floats count down from -0)."""
    bits = int(np.float64(v).view(np.int64))
    return bits if bits >= 0 else -(bits & 0x7FFFFFFFFFFFFFFF)


def _float(key: int) -> float:
    bits = key if key >= 0 else (-key) | -0x8000000000000000
    return float(np.int64(bits).view(np.float64))


@cache
def _signed_rank_cdf(n: int) -> np.ndarray:
    """P(W+ <= w), w = 0..n(n+1)/2, for n pairs under the null (exact, by counting sign patterns)."""
    counts = np.zeros(n * (n + 1) // 2 + 1)
    counts[0] = 1
    for i in range(1, n + 1):
        counts[i:] = counts[i:] + counts[: len(counts) - i].copy()
    return np.cumsum(counts) / 2.0**n


def signed_rank_k(n: int, alpha: float = ALPHA) -> int:
    """Order of the exact two-sided Wilcoxon signed-rank interval at level 1 - alpha (95% by
    default) on n pairs: the k-th smallest and largest Walsh average, the largest k with
    P(W+ <= k - 1) <= alpha / 2 (0: no such interval exists, e.g. below 6 pairs at 95%)."""
    return int(np.searchsorted(_signed_rank_cdf(n), alpha / 2, side="right"))


def walsh_interval(d: np.ndarray, alpha: float = ALPHA) -> tuple[np.ndarray, np.ndarray | None]:
    """One-sample Hodges-Lehmann shift of paired differences d (last axis; the median of the Walsh
    averages) and the exact Wilcoxon signed-rank interval at level 1 - alpha (95% by default: the
    k-th smallest and largest Walsh average), (..., 2), or None where these pairs allow none (at
    95%, below 6 pairs: the smallest two-sided level at 5 pairs is 1/16)."""
    n = d.shape[-1]
    i, j = np.triu_indices(n)
    walsh = np.sort((d[..., i] + d[..., j]) / 2, axis=-1)
    k = signed_rank_k(n, alpha)
    ci = np.stack([walsh[..., k - 1], walsh[..., walsh.shape[-1] - k]], axis=-1) if k >= 1 else None
    return np.median(walsh, axis=-1), ci


def fisher_p(f1: int, n1: int, f2: int, n2: int) -> float:
    return float(stats.fisher_exact([[f1, n1 - f1], [f2, n2 - f2]]).pvalue)
