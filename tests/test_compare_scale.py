"""`compare` at thousands of runs an arm: the same answers as the pairwise and all-at-once forms,
without their m x n matrices (benchmarks/scale.py measures the time and memory)."""

from __future__ import annotations

import numpy as np
import pytest

from suite.stats.compare import outperform
from suite.stats.decide import exact, splits
from suite.stats.decide.paired import pair_up


def _arms(m: int, n: int, decimals: int | None) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(m + n)
    x, y = rng.normal(size=m), rng.normal(0.1, size=n)
    return (x, y) if decimals is None else (np.round(x, decimals), np.round(y, decimals))


@pytest.mark.parametrize("decimals", [None, 2, 0])  # untied, tied, mostly tied (a shift of 0)
def test_the_moses_interval_by_search_is_the_sorted_one(
    decimals: int | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    x, y = _arms(301, 257, decimals)
    monkeypatch.setattr(exact, "PAIRWISE_CELLS", 10**12)
    estimate, ci = exact.moses_interval(x, y)
    monkeypatch.setattr(exact, "PAIRWISE_CELLS", 0)
    fast_estimate, fast_ci = exact.moses_interval(x, y)
    assert fast_estimate == estimate and fast_ci is not None and ci is not None
    assert np.array_equal(fast_ci, ci)


def test_p_a_beats_b_by_rank_is_the_pairwise_share(monkeypatch: pytest.MonkeyPatch) -> None:
    x, y = _arms(400, 350, 1)
    monkeypatch.setattr(outperform, "PAIRWISE_CELLS", 10**12)
    share = outperform.share(x, y, False)
    reps = outperform.replicates(x, y, False, 40, np.random.default_rng(1))
    monkeypatch.setattr(outperform, "PAIRWISE_CELLS", 0)
    assert outperform.share(x, y, False) == pytest.approx(share, abs=1e-12)
    assert np.allclose(outperform.replicates(x, y, False, 40, np.random.default_rng(1)), reps, atol=1e-12)


@pytest.mark.parametrize("pairwise", [10**12, 0])
@pytest.mark.parametrize("chunk", [1_000, 500])  # 2 rows a chunk; 1 row of 401 or 351: an odd count of draws
def test_bootstrap_weights_drawn_in_chunks_give_the_same_replicates(
    pairwise: int, chunk: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    x, y = _arms(401, 351, 1)
    monkeypatch.setattr(outperform, "PAIRWISE_CELLS", pairwise)
    whole = outperform.replicates(x, y, False, 40, np.random.default_rng(1))
    monkeypatch.setattr(outperform, "CHUNK_CELLS", chunk)  # one stream, taken a chunk at a time
    assert np.array_equal(outperform.replicates(x, y, False, 40, np.random.default_rng(1)), whole)
    weights = outperform._weights(np.random.default_rng(2), 351, (40,))
    assert weights.dtype == np.uint16 and (weights.sum(1) == 351).all()


def test_every_split_is_counted_exactly_up_to_the_limit_and_not_past_it() -> None:
    """`split_count` enumerates every split where comb(m + n, m) <= RESAMPLES, without the
    60,000-digit comb of 100,000 + 100,000 runs: the same answer as math.comb, by hand."""
    import math

    for total in range(40):
        for k in range(total // 2 + 1):
            for limit in (0, 1, 5, 70, exact.RESAMPLES):
                every = math.comb(total, k)
                assert splits._comb_within(total, k, limit) == (every if every <= limit else None)
    for m, n in [(0, 7), (1, 1), (2, 200), (200, 2), (9, 9), (1, 30_000), (100_000, 100_000)]:
        every = math.comb(m + n, m)
        assert exact.split_count(m, n)[1] == (every <= exact.RESAMPLES)
        if every <= exact.RESAMPLES:
            assert exact.split_count(m, n) == (every, True)


def test_drawn_splits_are_fewer_only_for_a_large_pool_and_the_same_in_any_chunks(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert exact.split_count(4, 4) == (70, True)
    assert exact.split_count(500, 500) == (exact.RESAMPLES, False)  # 1,000 runs: every draw kept
    assert exact.split_count(10_000, 10_000) == (1_000, False)  # 20,000 runs: 20 million values
    x, y = _arms(15, 12, None)
    p = exact.permutation_p(x, y, exact.median_shift, resamples=3_000)
    monkeypatch.setattr(exact, "_CELLS", 100)  # many small chunks of splits: one stream, the same draws
    assert exact.permutation_p(x, y, exact.median_shift, resamples=3_000) == p
    monkeypatch.setattr(splits, "_CACHED_LARGE", 0)  # drawn chunk by chunk, not kept: the same draws
    assert exact.permutation_p(x, y, exact.median_shift, resamples=3_000) == p
    assert exact.smallest_p(x, y, exact.median_shift, resamples=3_000) == pytest.approx(2 / 3_001)


def test_pairs_are_matched_once_and_a_seed_seen_twice_is_left_out() -> None:
    def run(seed: int, score: float) -> dict:
        return {"seeds": {"init": seed}, "score": score}

    a = [run(1, 0.1), run(2, 0.2), run(2, 0.25), run(3, 0.3)]
    b = [run(3, 0.4), run(1, 0.5), run(2, 0.6)]
    assert [(ra["score"], rb["score"]) for ra, rb in pair_up(a, b)] == [(0.1, 0.5), (0.3, 0.4)]


@pytest.mark.parametrize("sizes", [(6, 5), (7, 7), (40, 33), (124, 125)])  # every split, then drawn
@pytest.mark.parametrize("decimals", [None, 1])
@pytest.mark.parametrize("members_from", [0, 10**9])  # splits read as membership; as orders
def test_the_sorted_rank_and_sum_forms_give_the_general_p(
    sizes: tuple[int, int], decimals: int | None, members_from: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(exact, "_MEMBERS_FROM", members_from)
    exact._RECENT.clear()
    x, y = _arms(*sizes, decimals)
    cases = [(x, y, s) for s in (exact.median_shift, exact.spread_shift, exact.mean_shift)]
    for xs, ys, statistic in [*cases, (*exact.ranked(x, y), exact.mean_shift)]:  # Mann-Whitney's ranks
        fast = exact.permutation_p(xs, ys, statistic, resamples=2_000, seed=3)
        general = exact.permutation_p(xs[None], ys[None], statistic, resamples=2_000, seed=3)[0]
        assert fast == general, statistic.__name__  # one row: the general path over the same splits


@pytest.mark.parametrize("sizes", [(40, 33), (124, 125), (3, 250)])
@pytest.mark.parametrize("members_from", [0, 10**9])
@pytest.mark.parametrize("streamed", [True, False])
def test_drawn_splits_as_members_are_the_orders_splits(
    sizes: tuple[int, int], members_from: int, streamed: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Splits drawn as taken (a large pool), or kept, reach the rank and sum forms as arm A's
    membership (of drawn keys by a partition, of kept orders by marking them) or as orders, and the
    general form as orders: the same splits, the same p; each the p of the kept splits read as
    orders."""
    x, y = _arms(*sizes, 1)
    cases = [(x, y, s) for s in (exact.median_shift, exact.spread_shift)]
    cases.append((*exact.ranked(x, y), exact.mean_shift))
    monkeypatch.setattr(exact, "_MEMBERS_FROM", 10**9)
    kept = [exact.permutation_p(xs, ys, s, resamples=3_000, seed=5) for xs, ys, s in cases]
    monkeypatch.setattr(exact, "_MEMBERS_FROM", members_from)
    if streamed:
        monkeypatch.setattr(splits, "_CACHED_LARGE", 0)
    monkeypatch.setattr(exact, "_CELLS", 40_000)  # several chunks of one stream
    for (xs, ys, statistic), p in zip(cases, kept, strict=True):
        exact._RECENT.clear()  # ranked anew from this form, not read from the last test's
        assert exact.permutation_p(xs, ys, statistic, resamples=3_000, seed=5) == p, statistic.__name__
        assert exact.permutation_p(xs[None], ys[None], statistic, resamples=3_000, seed=5)[0] == p


class _TiedKeys:
    """A generator whose keys tie at chosen places: numpy's own never do at these sizes."""

    def __init__(self, keys: np.ndarray) -> None:
        self.keys = keys

    def random(self, shape: tuple[int, int]) -> np.ndarray:
        assert shape == self.keys.shape
        return self.keys.copy()


@pytest.mark.parametrize("m", [1, 3, 4, 7])
def test_a_key_tied_at_arm_as_edge_is_split_as_the_argsort_splits_it(m: int) -> None:
    keys = np.round(np.random.default_rng(m).random((400, 8)), 1)  # ties everywhere, at the edge too
    orders = np.argsort(keys, axis=1)
    members = splits._members(_TiedKeys(keys), 400, 8, m)
    assert np.array_equal(members, splits.membership(orders, m))
    assert (members.sum(1) == m).all()
    edge = np.sort(keys, axis=1)
    assert (edge[:, m - 1] == edge[:, m]).any()  # the case the partition alone would get wrong


def test_the_spread_test_keeps_its_digits_on_large_scores() -> None:
    x, y = 1e9 + 0.01 * np.arange(5), 1e9 + 0.05 * np.arange(5)
    fast = exact.permutation_p(x, y, exact.spread_shift)
    assert fast == exact.permutation_p(x[None], y[None], exact.spread_shift)[0]


@pytest.mark.parametrize("k", [1, 2, 5, 6])
def test_the_median_and_spread_of_sorted_ranks_are_numpys(k: int) -> None:
    rng = np.random.default_rng(k)
    pooled = np.round(rng.normal(size=2 * k + 3), 1)
    ascending = np.sort(pooled)
    ranks = np.sort(rng.permuted(np.tile(np.arange(pooled.size), (50, 1)), axis=1)[:, :k], axis=1)
    values = ascending[ranks]
    assert np.array_equal(exact._middle_of(ranks, ascending), np.median(values, axis=1))
    mad = np.abs(values - np.median(values, axis=1)[:, None]).mean(1)
    assert np.allclose(exact._mad_of(ranks, ascending), mad, rtol=0, atol=1e-12)


def test_every_split_is_each_subset_of_arm_a_once_with_both_arms_ascending() -> None:
    every = splits._every(4, 3)
    assert every.shape == (35, 7)
    assert len({tuple(row[:4]) for row in every}) == 35
    rows = every.tolist()
    assert all(sorted(row) == list(range(7)) for row in rows)
    assert all(row[:4] == sorted(row[:4]) and row[4:] == sorted(row[4:]) for row in rows)
    assert splits._every(0, 3).tolist() == [[0, 1, 2]]


def test_a_blocks_median_and_spread_tests_rank_its_splits_once(monkeypatch: pytest.MonkeyPatch) -> None:
    x, y = _arms(124, 125, 1)
    exact._RECENT.clear()
    cold = exact.permutation_p(x, y, exact.spread_shift)  # ranked anew
    ranked = []
    sorted_arms = exact._sorted_arms

    def counted(pooled: np.ndarray, m: int):  # noqa: ANN202
        arms = sorted_arms(pooled, m)
        return lambda split, start, stop: ranked.append(stop - start) or arms(split, start, stop)

    monkeypatch.setattr(exact, "_sorted_arms", counted)
    exact._RECENT.clear()
    exact.permutation_p(x, y, exact.median_shift)
    assert sum(ranked) == exact.RESAMPLES  # every split ranked once, chunk by chunk
    assert exact.permutation_p(x, y, exact.spread_shift) == cold
    assert sum(ranked) == exact.RESAMPLES  # the spread test read the median test's ranks
    exact.permutation_p(x + 1, y, exact.spread_shift)  # other runs: ranked anew
    assert sum(ranked) == 2 * exact.RESAMPLES
