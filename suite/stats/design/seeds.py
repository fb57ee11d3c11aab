"""The seed design of one setting's runs: how its scores lie by seed (a crossed init x order
grid per subsample seed, or independent runs), the bootstrap that resamples those seed units (never
cells as if independent), and each seed axis's share of the variance of a mean, with the few-seed
widening every design interval uses (the score intervals and the failure rate's, suite.stats.estimates).

Why the unit matters: on a crossed init x order grid every cell shares its init effect with its
row and its order effect with its column. Resampling cells as if independent makes intervals far
too narrow (tests/test_uncertainty.py: a cell bootstrap covers 55-68% at nominal 95% on 5 x 5 grids).
"""

from __future__ import annotations

import json
import warnings
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats

from suite.stats.design.mean_squares import level_spread, satterthwaite
from suite.study.records import TrialRecord, finite_scores, outcome, score

Z95 = float(stats.norm.ppf(0.975))
CHUNK_CELLS = 20_000_000  # resampled values a chunk of replicates holds (160 MB)
_SETTING = json.JSONEncoder(sort_keys=True, default=str).encode  # one encoder, not one a run


@dataclass(frozen=True)
class Layout:
    """One setting's runs as a (subsample seed, A, C) array. Crossed: A x C = init x order seeds;
    independent: A = runs (their (init, order) seed pairs), C = 1. NaN: no score kept there (a
    diverged run, a failed run when failures are excluded, or a cell no run filled)."""

    design: str  # "crossed" | "independent"
    grid: np.ndarray  # (S, A, C)
    a_count: np.ndarray  # (S,) levels of A under each subsample seed
    c_count: np.ndarray  # (S,) levels of C
    shared: bool  # the same A and C seeds under every subsample seed: resample them once, globally

    @property
    def unit(self) -> str:
        several = self.grid.shape[0] > 1
        base = "init x order seeds" if self.design == "crossed" else "runs"
        nested = " within subsample seeds" if several and not self.shared else ""
        return base + nested + (" x subsample seeds" if several else "")

    @property
    def complete(self) -> bool:  # every subsample seed: a full grid of one shape, every cell scored
        return bool(np.isfinite(self.grid).all())


def _is_grid(pairs: list[tuple[int, int]]) -> bool:
    """A crossed grid: >= 2 init and >= 2 order seeds, each seen with >= 2 partners, no cell twice."""
    inits, orders = Counter(i for i, _ in pairs), Counter(o for _, o in pairs)
    return (
        len(set(pairs)) == len(pairs)
        and min(len(inits), len(orders)) >= 2
        and min(*inits.values(), *orders.values()) >= 2
    )


def kept_scores(records: Sequence[TrialRecord], exclude_failed: bool = False) -> np.ndarray:
    """The scores a statistic keeps: every run's that has one, failed runs' too unless excluded."""
    return finite_scores(r for r in records if not (exclude_failed and outcome(r) == "failed"))


def _seed_pairs(records: Sequence[TrialRecord]) -> list[tuple[int, tuple[int, int]]]:
    """Each run's (subsample seed, (init, order) seeds). Records without seeds are independent
    runs of one subsample."""
    found = []
    for k, r in enumerate(records):
        seeds = r.get("seeds") or {"init": k, "order": -k - 1, "subsample": 0}
        found.append((seeds["subsample"], (seeds["init"], seeds["order"])))
    return found


def _crossed(pairs: dict[int, list[tuple[int, int]]]) -> bool:
    """Every subsample seed's (init, order) pairs form a crossed grid."""
    return bool(pairs) and all(_is_grid(p) for p in pairs.values())


def layout(records: Sequence[TrialRecord], exclude_failed: bool = False) -> Layout:
    """Detect the seed design of ONE setting's runs and lay their scores out by seed (`_seed_pairs`)."""
    groups: dict[int, list[tuple[tuple[int, int], float]]] = defaultdict(list)
    for (sub, pair), r in zip(_seed_pairs(records), records, strict=True):
        groups[sub].append((pair, np.nan if exclude_failed and outcome(r) == "failed" else score(r)))
    subs = sorted(groups) or [0]
    crossed = _crossed({s: [p for p, _ in g] for s, g in groups.items()})
    if crossed:
        rows = [sorted({p[0] for p, _ in groups[s]}) for s in subs]
        cols = [sorted({p[1] for p, _ in groups[s]}) for s in subs]
    else:  # runs sorted by their seed pair, so that runs with the same seeds line up across subsamples
        rows = [sorted(p for p, _ in groups[s]) for s in subs]
        cols = [[0] for _ in subs]
    grid = np.full((len(subs), max(map(len, rows)), max(map(len, cols))), np.nan)
    for si, s in enumerate(subs):
        if crossed:
            ri, ci = {v: i for i, v in enumerate(rows[si])}, {v: i for i, v in enumerate(cols[si])}
            for (i, o), y in groups[s]:
                grid[si, ri[i], ci[o]] = y
        else:
            for a, (_, y) in enumerate(sorted(groups[s], key=lambda t: t[0])):
                grid[si, a, 0] = y
    shared = len(subs) == 1 or (
        all(r == rows[0] for r in rows)
        and all(c == cols[0] for c in cols)
        and len(set(rows[0])) == len(rows[0])
    )
    count = np.array([len(r) for r in rows]), np.array([len(c) for c in cols])
    return Layout("crossed" if crossed else "independent", grid, *count, shared)


def exchangeable(records: Sequence[TrialRecord]) -> bool:
    """Independent runs of one subsample: the runs themselves are the resampling unit (and
    exchangeable under "no effect", so rank and permutation tests apply)."""
    pairs: dict[int, list[tuple[int, int]]] = defaultdict(list)
    for sub, pair in _seed_pairs(records):
        pairs[sub].append(pair)
    return len(pairs) <= 1 and not _crossed(pairs)


def _within(rng: np.random.Generator, counts: np.ndarray, width: int) -> np.ndarray:
    """Draws in [0, count) with replacement per (replicate, subsample slot); padding -> `width`."""
    draws = (rng.random((*counts.shape, width)) * counts[..., None]).astype(int)
    return np.where(np.arange(width) < counts[..., None], draws, width)


def draw_indices(lay: Layout, resamples: int, rng: np.random.Generator) -> tuple[np.ndarray, ...]:
    """Bootstrap indices (s, a, c) into `pad_grids`: subsample seeds, init (or run) and order seeds,
    each with replacement and independently. Seeds shared by all subsample seeds are drawn once per
    replicate; otherwise anew within each drawn subsample seed (a slot past a seed's own levels
    draws the padding)."""
    n_s, n_a, n_c = lay.grid.shape
    s = rng.integers(n_s, size=(resamples, n_s))
    return s, _axis_draws(rng, lay, s, lay.a_count, n_a), _axis_draws(rng, lay, s, lay.c_count, n_c)


def _axis_draws(
    rng: np.random.Generator, lay: Layout, s: np.ndarray, counts: np.ndarray, width: int
) -> np.ndarray:
    """One seed axis's draws for the replicates of drawn subsample seeds `s`: once per replicate
    where the axis's seeds are shared, else within each drawn subsample seed (`_within`)."""
    if lay.shared:
        return rng.integers(width, size=(len(s), 1, width))
    return _within(rng, counts[s], width)


def pad_grids(grids: np.ndarray) -> np.ndarray:
    """Stacked grids (T, S, A, C) with one NaN row and column more: the slot `draw_indices` points
    past a subsample seed's own levels to, so that padding is never a score."""
    return np.pad(grids, ((0, 0), (0, 0), (0, 1), (0, 1)), constant_values=np.nan)


def _padded(lay: Layout) -> np.ndarray:
    return pad_grids(lay.grid[None])[0]


def resample(
    lay: Layout, resamples: int, rng: np.random.Generator, grids: np.ndarray | None = None
) -> np.ndarray:
    """(resamples, S, A, C) replicates: every cell of the drawn (subsample, init, order)
    combinations, never cells drawn one by one. `grids` (T, S, A, C): T studies of this layout
    (simulations), each resampled on its own draws -> (T, resamples, S, A, C)."""
    if grids is None:
        s, a, c = draw_indices(lay, resamples, rng)
        if _one_subsample(lay):  # s and c are all 0
            return _runs_drawn(lay, a)[:, None, :, None]
        return _padded(lay)[s[:, :, None, None], a[:, :, :, None], c[:, :, None, :]]
    s, a, c = draw_indices(lay, len(grids) * resamples, rng)
    t = np.repeat(np.arange(len(grids)), resamples)[:, None, None, None]
    out = pad_grids(grids)[t, s[:, :, None, None], a[:, :, :, None], c[:, :, None, :]]
    return out.reshape(len(grids), resamples, *out.shape[1:])


def _one_subsample(lay: Layout) -> bool:
    """Runs of one subsample seed, without order seeds crossed: their replicates are the runs' draws."""
    return lay.grid.shape[0] == lay.grid.shape[2] == 1


def _runs_drawn(lay: Layout, a: np.ndarray) -> np.ndarray:
    """(rows, runs) replicates of runs of one subsample from their draws `a` (rows, 1, runs): one
    flat take, where the (s, a, c) broadcast gather of 10,000 runs x 2,000 resamples took most of a
    leaderboard's time. The same values."""
    return np.take(_padded(lay)[0, :, 0], a[:, 0, :])


def by_setting(records: Sequence[TrialRecord]) -> list[list[TrialRecord]]:
    """Runs grouped by full setting (size + every hyperparameter): statistics never pool settings."""
    groups: dict[str, list[TrialRecord]] = defaultdict(list)
    for r in records:
        groups[_SETTING([r.get("size"), r.get("hparams") or {}])].append(r)
    return list(groups.values())


def bootstrap_samples(
    records: Sequence[TrialRecord], resamples: int = 2000, seed: int = 0, exclude_failed: bool = False
) -> tuple[np.ndarray, str, list[tuple[float, int]]]:
    """(resamples, m) resampled scores (NaN = none), the resampling unit, and the seed axes'
    terms for `widening`. Records of several settings are resampled within each setting."""
    laid = _laid_out(records, exclude_failed)
    return _samples(laid, resamples, seed), *_unit_and_terms(records, laid)


def bootstrap_reduced(
    records: Sequence[TrialRecord],
    reducers: Sequence[Callable[[np.ndarray], np.ndarray]],
    resamples: int = 2000,
    seed: int = 0,
    exclude_failed: bool = False,
) -> tuple[list[np.ndarray], str, list[tuple[float, int]]]:
    """`bootstrap_samples` with each of `reducers` ((rows, m) -> (rows, ...)) applied: the
    (resamples, ...) replicates of each, the unit and the terms. Runs of one setting and one
    subsample seed are drawn and reduced CHUNK_CELLS values at a time (`resample_chunks`: the
    same draws), where 2,000 resamples of 100,000 runs held 1.6 GB a copy and most of a
    leaderboard's page faults."""
    laid = _laid_out(records, exclude_failed)
    if len(laid) == 1 and _one_subsample(lay := laid[0][1]):
        chunks = [[f(rows) for f in reducers] for rows in resample_chunks(lay, resamples, seed)]
        replicates = [np.concatenate(r) for r in zip(*chunks, strict=True)]
    else:
        samples = _samples(laid, resamples, seed)
        replicates = [f(samples) for f in reducers]
    return replicates, *_unit_and_terms(records, laid)


def _laid_out(records: Sequence[TrialRecord], exclude_failed: bool) -> list[tuple[list[TrialRecord], Layout]]:
    return [(group, layout(group, exclude_failed)) for group in by_setting(records)]


def _samples(laid: list[tuple[list[TrialRecord], Layout]], resamples: int, seed: int) -> np.ndarray:
    """The settings' replicates side by side, each setting's drawn after the last's from one stream."""
    rng = np.random.default_rng(seed)
    blocks = [resample(lay, resamples, rng).reshape(resamples, -1) for _, lay in laid]
    if not blocks:
        return np.empty((resamples, 0))
    return np.concatenate(blocks, axis=1) if len(blocks) > 1 else blocks[0]


def _unit_and_terms(
    records: Sequence[TrialRecord], laid: list[tuple[list[TrialRecord], Layout]]
) -> tuple[str, list[tuple[float, int]]]:
    """The resampling unit, and each setting's seed-axis terms weighted by its share of the runs."""
    if not laid:
        return "runs", []
    unit = " | ".join(sorted({lay.unit for _, lay in laid})) + (
        ", within each setting" if len(laid) > 1 else ""
    )
    return unit, [(c * (len(group) / len(records)) ** 2, n) for group, lay in laid for c, n in _terms(lay)]


def resample_chunks(lay: Layout, resamples: int, seed: int) -> Iterator[np.ndarray]:
    """`resample(lay, resamples, default_rng(seed))` of runs of one subsample (`_one_subsample`)
    as (rows, runs) chunks of replicates in order: the same values, as `draw_indices` draws each
    replicate's runs after the last's (and the subsample and order seeds, one level each, nothing
    that moves a value)."""
    rng = np.random.default_rng(seed)
    n_s, n_a, _ = lay.grid.shape
    s = rng.integers(n_s, size=(resamples, n_s))  # all 0: draws nothing from the stream
    step = max(1, CHUNK_CELLS // max(n_a, 1))
    for start in range(0, resamples, step):
        yield _runs_drawn(lay, _axis_draws(rng, lay, s[start : start + step], lay.a_count, n_a))


def _terms(lay: Layout) -> list[tuple[float, int]]:
    """(variance contribution to the mean, levels) of each resampled seed axis: the variance of its
    level means over the number of levels (the residual counts in both axes, as in the bootstrap).
    Axes resampled within each subsample seed give one term per seed, weighted 1/S^2."""
    c, n = stacked_terms(lay, lay.grid[None])
    return [(float(v), int(m)) for v, m in zip(c[0], n, strict=True)]


def stacked_terms(lay: Layout, grids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """`_terms` of T studies of one layout at once: (T, k) contributions and (k,) levels (counted
    on the first study: the studies share where their scores are missing)."""
    n_s = grids.shape[1]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        if lay.shared:  # init, then order levels
            axes = [(grids, 2, 1.0), (grids, 3, 1.0)]
        else:  # each subsample seed's own init, then order levels
            axes = [(grids[:, s], axis, n_s**-2.0) for s in range(n_s) for axis in (1, 2)]
        axes.append((grids, 1, 1.0))  # subsample seeds
        cols, levels = [], []
        for g, axis, weight in axes:
            _, variance, size = level_spread(g, axis)
            if size > 1:
                cols.append(weight * variance / size)
                levels.append(size)
    c = np.stack(cols, 1) if cols else np.zeros((len(grids), 0))
    return c, np.array(levels, dtype=float)


def widening(terms: Sequence[tuple[float, int]]) -> tuple[float, float | None]:
    """Factor to widen a percentile interval by, and its degrees of freedom. With few seeds per
    axis the percentile bootstrap is too narrow: its variance is low by (n-1)/n and a variance
    from 5 seeds is itself uncertain (5 x 5 grids: 87-92% coverage at nominal 95%). The factor is
    t(df) / z, with Satterthwaite df over the seed axes, times the root of the variance bias."""
    c = np.array([[t[0] for t in terms]], dtype=float).reshape(1, -1)
    factor, df = stacked_widening(c, np.array([t[1] for t in terms], dtype=float))
    return float(factor[0]), None if np.isnan(df[0]) else float(df[0])


def stacked_widening(c: np.ndarray, n: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """`widening` of (T, k) terms with (k,) levels: (T,) factors and df (NaN: no spread)."""
    total = c.sum(1)
    df = satterthwaite(c, n - 1)
    with np.errstate(all="ignore"):
        bias = total / np.sum(c * (n - 1) / n, 1)
        factor = stats.t.ppf(0.975, df) * np.sqrt(bias) / Z95
    ok = total > 0
    return np.where(ok, factor, 1.0), np.where(ok, df, np.nan)
