"""The gap test for a reported mean or median on scores that collapse as RTE's do: succeeded
runs N(0, 1), failed runs at a baseline 4-5 SD below (RTE: successes N(0.66, 0.03), the 0.527
majority baseline 4.4 SD below), 20-40% of runs failed; on 3, 5 and 10 independent runs and on
3 x 3 init x order grids where a failed init seed fails its whole row (latent collapse). A
reported value is the mean (or median) of k runs of the same distribution.

    python -m benchmarks.gap_collapse [--studies 2000] [--k 5] [--resamples 1000] [--median | --fallback]

Prints, per cell, the gap test's type-I error at p < 0.05 with its Monte-Carlo SE and how often it
cannot decide, before (`stacked_gap` on every run, the test until this change) and after
(`stacked_failed_gap` on the succeeded runs, a union over the failed runs the reported k may
hold); on normal scores its power against a reported mean 1 SD above and 1 SD below ours.
`--median`: only the reported median's test, before and after, at that depth. `--fallback`: only
the test without a failure baseline (plain scores) at 25% failed, 4.4 SD below, whose type-I the
result's `fallback` field states. The coverage of each interval of an entry is
benchmarks/coverage_table.py's. Single process, numpy-vectorised: about 20 minutes on a shared
2-core machine (`--fallback`: a few minutes).
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Iterator

import numpy as np

from suite.stats.design import Layout, layout
from suite.stats.estimates.gap import lost_design, stacked_failed_gap, stacked_gap
from tests.designs import grid_records, independent_records

DESIGNS = {"N=3": (3, 1), "N=5": (5, 1), "N=10": (10, 1), "3x3": (3, 3)}
SHARES = (0.2, 0.3, 0.4)
DEPTHS = (4.0, 5.0)


def shaped_layout(shape: tuple[int, int]) -> Layout:
    n_a, n_c = shape
    zeros = np.zeros((1, n_a, n_c))
    return layout(grid_records(zeros) if n_c > 1 else independent_records(zeros[:, :, 0]))


def draw_study(
    shape: tuple[int, int], share: float, depth: float, count: int, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """(count, 1, A, C) scores and failed mask: independent runs fail one by one; on a grid the
    init, order and residual effects have equal variance (total 1) and a failed init seed fails
    its row."""
    n_a, n_c = shape
    if n_c == 1:
        y = rng.normal(size=(count, 1, n_a, 1))
        failed = rng.random(y.shape) < share
    else:
        y = sum(rng.normal(size=s) for s in ((count, 1, n_a, 1), (count, 1, 1, n_c), (count, 1, n_a, n_c)))
        y = y / 3**0.5
        failed = np.broadcast_to(rng.random((count, 1, n_a, 1)) < share, y.shape)
    return np.where(failed, -depth, y), failed


def reported_mean(share: float, depth: float, count: int, k: int, rng: np.random.Generator) -> np.ndarray:
    return np.where(rng.random((count, k)) < share, -depth, rng.normal(size=(count, k))).mean(1)


def succeeded_groups(
    y: np.ndarray, failed: np.ndarray, shape: tuple[int, int]
) -> Iterator[tuple[np.ndarray, Layout | None, np.ndarray]]:
    """Studies grouped by how many runs (grids: init rows) failed: (selection, the succeeded runs'
    layout, their grids), layout None where they cannot decide (fewer than 2, or one grid row)."""
    n_a, n_c = shape
    rows = failed[:, 0, :, 0]
    whole = shaped_layout(shape)
    for f in np.unique(rows.sum(1)):
        sel = np.flatnonzero(rows.sum(1) == f)
        left = n_a - f
        own = shaped_layout((left, n_c)) if left * n_c >= 2 and left >= 1 else None
        if own is None or lost_design(whole, own):
            yield sel, None, np.empty(0)
            continue
        keep = ~rows[sel]
        yield sel, own, np.stack([y[t][:, keep[i], :] for i, t in enumerate(sel)])


def gap_after(
    y: np.ndarray,
    failed: np.ndarray,
    shape: tuple[int, int],
    reported: np.ndarray,
    k: int,
    depth: float,
    resamples: int,
    statistic: str = "mean",
) -> np.ndarray:
    """(T,) p of `stacked_failed_gap` on each study's succeeded runs (NaN: cannot decide)."""
    p = np.full(len(y), np.nan)
    for sel, own, grids in succeeded_groups(y, failed, shape):
        if own is not None:
            found = stacked_failed_gap(
                own, grids, reported[sel], k, (-depth, -depth), resamples, 1, 0.0, statistic
            )
            p[sel] = found["p"]
    return p


def rates(p: np.ndarray) -> tuple[float, float, float]:
    """(rejected at p < 0.05 where it decides, its MC SE, share that cannot decide)."""
    given = np.isfinite(p)
    rate = float(np.mean(p[given] < 0.05)) if given.any() else float("nan")
    return rate, (rate * (1 - rate) / max(given.sum(), 1)) ** 0.5, float(1 - given.mean())


def gap_table(args, rng: np.random.Generator) -> None:
    print(f"gap test, reported mean of k = {args.k}, {args.studies} studies a cell: rejected at p < 0.05")
    print("(MC SE), cannot decide; before = stacked_gap on every run, after = stacked_failed_gap")
    for name, shape in DESIGNS.items():
        whole = shaped_layout(shape)
        for share in SHARES:
            for depth in DEPTHS:
                y, failed = draw_study(shape, share, depth, args.studies, rng)
                reported = reported_mean(share, depth, args.studies, args.k, rng)
                before = stacked_gap(whole, y, reported, "mean", args.k, args.resamples, 1)["p"]
                after = gap_after(y, failed, shape, reported, args.k, depth, args.resamples)
                b, a = rates(before), rates(after)
                print(
                    f"  {name:5} {share:.0%} failed {depth:.0f} SD: before {b[0]:6.1%} ({b[1]:.1%}) "
                    f"undecided {b[2]:5.1%} | after {a[0]:6.1%} ({a[1]:.1%}) undecided {a[2]:5.1%}"
                )
        y, failed = draw_study(shape, 0.0, 4.4, args.studies, rng)
        reported = reported_mean(0.0, 4.4, args.studies, args.k, rng)
        for label, shift in (("true", 0.0), ("+1 SD", 1.0), ("-1 SD", -1.0)):
            before = stacked_gap(whole, y, reported + shift, "mean", args.k, args.resamples, 1)["p"]
            after = gap_after(y, failed, shape, reported + shift, args.k, 4.4, args.resamples)
            b, a = rates(before), rates(after)
            print(
                f"  {name:5} normal, {label:6} (baseline 4.4 SD below): before {b[0]:6.1%} undecided "
                f"{b[2]:5.1%} | after {a[0]:6.1%} undecided {a[2]:5.1%}"
            )


def reported_median(share: float, depth: float, count: int, k: int, rng: np.random.Generator) -> np.ndarray:
    return np.median(np.where(rng.random((count, k)) < share, -depth, rng.normal(size=(count, k))), 1)


def median_table(args, rng: np.random.Generator) -> None:
    """The reported median's test at the same depth and shares, before (`stacked_gap` on every
    run) and after (`stacked_failed_gap` on the succeeded runs); on normal scores, power at 1 SD."""
    print(f"\ngap test, reported median of k = {args.k}: rejected at p < 0.05 (MC SE), cannot decide")
    for name, shape in DESIGNS.items():
        whole = shaped_layout(shape)
        for share in (*SHARES, 0.0):
            for depth in DEPTHS if share else (4.4,):
                y, failed = draw_study(shape, share, depth, args.studies, rng)
                reported = reported_median(share, depth, args.studies, args.k, rng)
                for label, shift in (
                    (("true", 0.0), ("+1 SD", 1.0), ("-1 SD", -1.0)) if not share else (("true", 0.0),)
                ):
                    before = stacked_gap(whole, y, reported + shift, "median", args.k, args.resamples, 1)["p"]
                    after = gap_after(
                        y, failed, shape, reported + shift, args.k, depth, args.resamples, "median"
                    )
                    b, a = rates(before), rates(after)
                    what = f"{share:.0%} failed {depth:.0f} SD" if share else f"normal, {label:6}"
                    print(
                        f"  {name:5} {what:18}: before {b[0]:6.1%} ({b[1]:.1%}) undecided {b[2]:5.1%} | "
                        f"after {a[0]:6.1%} ({a[1]:.1%}) undecided {a[2]:5.1%}",
                        flush=True,
                    )


def fallback_table(args, rng: np.random.Generator) -> None:
    """The test `gap_to_reported` falls back to without a failure baseline (plain scores, records
    without `baseline`): `stacked_gap` on every run, as if no run could fail unseen, against a
    reported mean and median of k where 25% of runs fail 4.4 SD below (the figure its `fallback`
    field states)."""
    print(f"\nfallback (no failure baseline): the test on every run, 25% failed 4.4 SD below, k = {args.k}")
    for name, shape in DESIGNS.items():
        whole = shaped_layout(shape)
        found = []
        for statistic, reported_of in (("mean", reported_mean), ("median", reported_median)):
            y, _ = draw_study(shape, 0.25, 4.4, args.studies, rng)
            reported = reported_of(0.25, 4.4, args.studies, args.k, rng)
            rate, se, undecided = rates(
                stacked_gap(whole, y, reported, statistic, args.k, args.resamples, 1)["p"]
            )
            found.append(f"{statistic} {rate:5.1%} ({se:.1%}), undecided {undecided:4.1%}")
        print(f"  {name:5}: " + " | ".join(found), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--studies", type=int, default=2000)
    parser.add_argument("--k", type=int, default=5, help="runs behind the reported mean")
    parser.add_argument("--resamples", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=45)
    parser.add_argument("--median", action="store_true", help="only the reported median's test")
    parser.add_argument("--fallback", action="store_true", help="only the test without a failure baseline")
    args = parser.parse_args()
    rng = np.random.default_rng(args.seed)
    start = time.time()
    if args.median:
        median_table(args, rng)
        return
    if args.fallback:
        fallback_table(args, rng)
        return
    gap_table(args, rng)
    print(f"\n{time.time() - start:.0f} s")


if __name__ == "__main__":
    main()
