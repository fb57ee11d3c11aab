"""The splits a permutation test of m and n runs goes over (exact.py): every split of the pooled
runs where there are at most RESAMPLES, else a random sample of them drawn from one seeded stream.
A split is given two ways, the same splits either way: as orders of the pooled runs (the first m
of an order are arm A), for any statistic, or as arm A's membership, for the statistics that need
only which runs each arm holds (`members`)."""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from functools import lru_cache
from typing import NamedTuple

import numpy as np

RESAMPLES = 20_000  # enumerate every split (sign pattern) up to this many, else draw this many
# Drawn splits hold at most this many pooled values in all: past 1,000 runs in all, fewer splits
# (at least 1,000: p to about 0.007 at 0.05). Why: 20,000 splits of 20,000 runs took 6.6 GB and
# two minutes, where runs this many already decide to a hair.
_DRAWN_CELLS = 20_000_000
_FEWEST_DRAWN = 1_000
# Drawn splits of up to this many pooled values are kept (16 pool sizes), and of up to
# _CACHED_LARGE (2): a block's three tests then draw once, where each drew its own.
_CACHED_CELLS = 5_000_000
_CACHED_LARGE = _DRAWN_CELLS


class Splits(NamedTuple):
    """`total` splits; `orders(start, stop)` the splits start..stop as (stop - start, m + n) orders
    of the pooled runs, `members(start, stop)` as (stop - start, m + n) booleans, True for arm A;
    `exact`: every split; `kept`: what names splits held in memory (None: drawn as taken, in order,
    each test's chunks by one of the two forms)."""

    total: int
    orders: Callable[[int, int], np.ndarray]
    members: Callable[[int, int], np.ndarray]
    exact: bool
    kept: tuple | None


def split_count(m: int, n: int, resamples: int = RESAMPLES) -> tuple[int, bool]:
    """(splits a permutation test of m and n runs uses, whether that is every split)."""
    every = _comb_within(m + n, min(m, n), resamples)
    if every is not None:
        return every, True
    return min(resamples, max(_FEWEST_DRAWN, _DRAWN_CELLS // (m + n))), False


def _comb_within(total: int, k: int, limit: int) -> int | None:
    """comb(total, k) where it is at most `limit`, else None: counted up term by term (each an
    exact comb(total, i)), stopping once past the limit. math.comb of 100,000 + 100,000 runs is
    a 60,000-digit integer, 0.09 s a call, to learn that it is more than 20,000."""
    every = 1
    for i in range(k):  # comb(total, i) grows with i up to total / 2 >= k
        every = every * (total - i) // (i + 1)
        if every > limit:
            return None
    return every if every <= limit else None


def splits(m: int, n: int, resamples: int = RESAMPLES, seed: int = 0) -> Splits:
    """Every split of the pooled runs when there are at most `resamples`, else that many random ones
    (fewer for a large pool: `_DRAWN_CELLS`). Drawn splits are made chunk by chunk, in order, from
    one stream (the same splits as drawing them all at once, without holding them all), or all at
    once and kept where they are few (`_CACHED_LARGE`), each form drawn when first asked for."""
    total, exact = split_count(m, n, resamples)
    if exact:
        every = _every(m, n)
        return Splits(
            total, lambda a, b: every[a:b], lambda a, b: membership(every[a:b], m), True, ("every", m, n)
        )
    if total * (m + n) <= _CACHED_LARGE:
        small = total * (m + n) <= _CACHED_CELLS
        orders, members = (_drawn, _drawn_members) if small else (_drawn_large, _drawn_members_large)
        return Splits(
            total,
            lambda a, b: orders(m + n, total, seed)[a:b],
            lambda a, b: members(m + n, total, seed, m)[a:b],
            False,
            ("drawn", m + n, total, seed),
        )
    rng = np.random.default_rng(seed)
    made = [0]  # splits drawn so far: the stream moves forward only

    def drawn(draw: Callable[..., np.ndarray]) -> Callable[[int, int], np.ndarray]:
        def take(start: int, stop: int) -> np.ndarray:
            assert start == made[0], "drawn splits are taken in order"
            made[0] = stop
            return draw(rng, stop - start, m + n, m)

        return take

    orders = drawn(lambda rng, rows, runs, m: _draw(rng, rows, runs))  # an order serves any m
    return Splits(total, orders, drawn(_members), False, None)


def membership(orders: np.ndarray, m: int) -> np.ndarray:
    """Orders of the pooled runs -> (rows, runs) booleans, True where a split puts a run in arm A."""
    member = np.zeros(orders.shape, dtype=bool)
    np.put_along_axis(member, orders[:, :m], True, axis=1)
    return member


@lru_cache(maxsize=8)
def _every(m: int, n: int) -> np.ndarray:
    """Every split of m + n runs (the caller keeps them to RESAMPLES), kept: each block with these
    arm sizes uses it."""
    chosen = np.array(list(itertools.combinations(range(m + n), m)), dtype=np.intp)
    chosen = chosen.reshape(math.comb(m + n, m), m)
    member = np.zeros((len(chosen), m + n), dtype=bool)
    np.put_along_axis(member, chosen, True, axis=1)
    rest = np.nonzero(~member)[1].reshape(len(chosen), n)  # row-major: each row's rest ascending
    every = np.concatenate([chosen, rest], axis=1).astype(index_type(m + n))
    every.flags.writeable = False
    return every


def _draw(rng: np.random.Generator, rows: int, runs: int) -> np.ndarray:
    """`rows` random splits as orders of the pooled runs (the first m of an order are arm A, for any
    m), as small integers: the runs by their keys, ascending."""
    return np.argsort(rng.random((rows, runs)), axis=1).astype(index_type(runs))


def _members(rng: np.random.Generator, rows: int, runs: int, m: int) -> np.ndarray:
    """`_draw`'s splits as arm A's membership: the runs whose keys are among the m smallest, found
    by a partition (linear in the runs) where `_draw` sorts them all: 200,000 runs a split took
    12 ms, most of a test's time. Where a key ties the m-th smallest (about once in 4 x 10^10
    splits of 200,000 runs), the argsort's own order decides, as in `_draw`."""
    keys = rng.random((rows, runs))
    if m == 0:
        return np.zeros(keys.shape, dtype=bool)
    member = keys <= np.partition(keys, m - 1, axis=1)[:, m - 1 : m]
    tied = member.sum(1) != m
    if tied.any():
        member[tied] = membership(np.argsort(keys[tied], axis=1), m)
    return member


def index_type(runs: int) -> type:
    """The smallest integer type that indexes `runs` runs."""
    return np.int16 if runs < 2**15 else np.int32


@lru_cache(maxsize=16)
def _drawn(runs: int, total: int, seed: int) -> np.ndarray:
    """All `total` drawn splits of `runs` pooled runs, kept (10 MB at 250 runs): a block's three
    tests, and every block of as many runs in all, take the same splits, and drawing them (an
    argsort of 20,000 x 250 numbers) was most of a test's time."""
    orders = _draw(np.random.default_rng(seed), total, runs)
    orders.flags.writeable = False
    return orders


_drawn_large = lru_cache(maxsize=2)(_drawn.__wrapped__)  # past _CACHED_CELLS: 2 of up to 40 MB


@lru_cache(maxsize=16)
def _drawn_members(runs: int, total: int, seed: int, m: int) -> np.ndarray:
    """`_drawn`'s splits as arm A's membership (`_members`: the same keys partitioned), kept: at
    2,500 runs the argsort of 8,000 splits took 0.8 s a block, the partition a third of that."""
    members = _members(np.random.default_rng(seed), total, runs, m)
    members.flags.writeable = False
    return members


_drawn_members_large = lru_cache(maxsize=2)(_drawn_members.__wrapped__)  # 2 of up to 20 MB
