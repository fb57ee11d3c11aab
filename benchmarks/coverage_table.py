"""The coverage of every interval of one entry, per shape the entry shows, over processes whose runs
fail 0, 25 and 40% of the time 4.4 SD below the rest (RTE's depth): the table behind the coverage
flag (suite/stats/estimates/coverage.py), the docs' table (docs/statistics.md, Coverage by shape)
and its test (tests/test_coverage_table.py), all three reading the JSON this writes.

    python -m benchmarks.coverage_table [--studies 10000] [--resamples 1000] [--seed 60] [--out PATH]

Shapes: 3, 5 and 10 independent runs, and a 3 x 3 init x order grid (init, order and residual
effects of equal variance, a failed init seed failing its whole row). Succeeded runs N(0, 1),
failed runs at the failure rule's baseline, -4.4, which the records carry. Per shape, process and
interval: the share of studies whose interval covers the truth, where one is given (and how often
one is), with its Monte-Carlo SE, also among the studies that drew no failed run; per shape and
interval, the range over the three processes (what the flag states). Intervals: those of every
run (the mean and std widened, as the suite states them where the failure rule has a baseline),
those of the succeeded runs (`excluding_failed`), and the mean and std of every run as plain
scores give them, without a failure rule (`without a failure rule`: nothing is widened there).
The studies run through the suite's own vectorised code (`stacked_intervals`, the failure rate's
`stacked_failure_intervals`, failed_runs.py's bounds), grouped by which runs failed, laid out as
`intervals` lays them (failed cells empty). The committed table: the defaults, 10,000 studies a
cell, 6 minutes on a shared 2-core machine; `make coverage-check` simulates 4,000 (3 minutes).
"""

from __future__ import annotations

import argparse
import datetime
import json
import time
from pathlib import Path
from typing import Any

import numpy as np
from scipy import stats

from suite.stats.design import layout, stacked_terms
from suite.stats.estimates.coverage import TABLE
from suite.stats.estimates.failed_runs import failure_bounds, widened_mean, widened_std
from suite.stats.estimates.failure_rate import stacked_failure_intervals
from suite.stats.estimates.uncertainty import no_spread, stacked_intervals

SHAPES = {"3 runs": (3, 1), "5 runs": (5, 1), "10 runs": (10, 1), "3 x 3 grid": (3, 3)}
SHARES = (0.0, 0.25, 0.4)
DEPTH = 4.4
BATCH = 500  # studies simulated at once (memory: studies x resamples x runs values)
GROUPS = {
    "intervals": ("mean", "median", "std", "iqr", "failure_rate"),
    "excluding_failed": ("mean", "median", "std", "iqr"),
    "without a failure rule": ("mean", "std"),
}
PROCESSES = (
    "succeeded runs N(0, 1); failed runs at the failure rule's baseline 4.4 SD below; 0, 25 and 40% "
    "of runs failing (a 3 x 3 grid: of init seeds, each failing its row)"
)


def draw(
    shape: tuple[int, int], share: float, count: int, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """(count, 1, A, C) scores and failed mask, the failed runs (grids: init rows) first."""
    n_a, n_c = shape
    if n_c == 1:
        y = rng.normal(size=(count, 1, n_a, 1))
    else:
        y = sum(rng.normal(size=s) for s in ((count, 1, n_a, 1), (count, 1, 1, n_c), (count, 1, n_a, n_c)))
        y = y / 3**0.5
    failed_rows = np.sort(rng.random((count, n_a)) < share, axis=1)[:, ::-1]  # failed first
    failed = np.broadcast_to(failed_rows[:, None, :, None], y.shape)
    return np.where(failed, -DEPTH, y), np.array(failed)


def records(shape: tuple[int, int], failed_rows: int) -> list[dict[str, Any]]:
    """One study's records as the suite writes them (scores aside): seeds, outcome, baseline."""
    n_a, n_c = shape
    return [
        {
            "score": 0.0,
            "outcome": "failed" if a < failed_rows else "succeeded",
            "baseline": -DEPTH,
            "seeds": {"init": a, "order": 100 + (c if n_c > 1 else a), "subsample": 0},
        }
        for a in range(n_a)
        for c in range(n_c)
    ]


def quantile(u: float, share: float) -> float:
    """The u-quantile of one run: failed with probability `share` at -DEPTH, else N(0, 1)."""
    below = (1 - share) * stats.norm.cdf(-DEPTH)
    if u <= below:
        return float(stats.norm.ppf(u / (1 - share)))
    if u <= below + share:
        return -DEPTH
    return float(stats.norm.ppf((u - share) / (1 - share)))


def truths(share: float) -> dict[str, dict[str, float]]:
    """Each group's true values: of one run, and of one succeeded run."""
    run = {
        "mean": -share * DEPTH,
        "median": quantile(0.5, share),
        "std": ((1 - share) + share * (1 - share) * DEPTH**2) ** 0.5,
        "iqr": quantile(0.75, share) - quantile(0.25, share),
        "failure_rate": share,
    }
    succeeded = {"mean": 0.0, "median": 0.0, "std": 1.0, "iqr": 2 * float(stats.norm.ppf(0.75))}
    return {"intervals": run, "excluding_failed": succeeded, "without a failure rule": run}


def stated(
    y: np.ndarray, failed: np.ndarray, shape: tuple[int, int], resamples: int, seed: int
) -> dict[str, np.ndarray]:
    """{group/statistic: (T, 2) intervals (NaN: none)} of T studies `y` (T, 1, A, C) whose `failed`
    runs (grids: init rows) come first, as `intervals` states them for their records (`records`
    with these scores: tests/test_coverage_table.py holds a study's equal to `summarize`'s)."""
    count = len(y)
    whole = layout(records(shape, 0))
    out: dict[str, np.ndarray] = {}
    for name in ("mean", "median", "std", "iqr"):
        out[f"intervals/{name}"] = stacked_intervals(whole, y, name, resamples, seed)
    out["intervals/failure_rate"] = stacked_failure_intervals(whole, failed.astype(float), resamples, seed)
    for name in ("mean", "std"):
        out[f"without a failure rule/{name}"] = out[f"intervals/{name}"]
    rows = failed[:, 0, :, 0].sum(1)
    for name in GROUPS["excluding_failed"]:
        out[f"excluding_failed/{name}"] = np.full((count, 2), np.nan)
    for f in np.unique(rows):
        sel = np.flatnonzero(rows == f)
        if f == shape[0]:
            continue  # every run failed: nothing succeeded to bound
        own = layout(records(shape, int(f)), exclude_failed=True)
        grids = np.where(failed[sel], np.nan, y[sel])
        for name in GROUPS["excluding_failed"]:
            out[f"excluding_failed/{name}"][sel] = stacked_intervals(own, grids, name, resamples, seed)
    flat = y.reshape(count, -1)
    units = float(min(stacked_terms(whole, y)[1]))
    share_ci = failure_bounds(failed.reshape(count, -1).sum(1), np.full(count, flat.shape[1]), units)
    at = (-DEPTH, -DEPTH)
    mean, std = out["excluding_failed/mean"], out["excluding_failed/std"]
    tied = no_spread(flat)[:, None]
    out["intervals/mean"] = np.where(tied, np.nan, widened_mean(share_ci, mean, at))
    out["intervals/std"] = np.where(tied, np.nan, widened_std(share_ci, mean, std, at))
    return out


def batch(
    shape: tuple[int, int], share: float, count: int, resamples: int, seed: int
) -> dict[str, np.ndarray]:
    """`stated` of `count` studies drawn, and {"failed": (count,) failed runs (grids: rows)}."""
    y, failed = draw(shape, share, count, np.random.default_rng(seed))
    return stated(y, failed, shape, resamples, seed + 1) | {"failed": failed[:, 0, :, 0].sum(1)}


def rate(hit: np.ndarray) -> dict[str, float | int]:
    covered = float(hit.mean()) if hit.size else float("nan")
    return {
        "covered": covered,
        "studies": int(hit.size),
        "mc_se": (covered * (1 - covered) / max(hit.size, 1)) ** 0.5,
    }


def cell(shape: tuple[int, int], share: float, studies: int, resamples: int, seed: int) -> dict[str, Any]:
    """{group: {statistic: {covered, given, studies, mc_se, no_failed_run: {covered, studies, mc_se}}}}."""
    found: dict[str, list[np.ndarray]] = {}
    for start in range(0, studies, BATCH):
        part = batch(shape, share, min(BATCH, studies - start), resamples, seed + 7919 * start)
        for key, value in part.items():
            found.setdefault(key, []).append(value)
    joined = {key: np.concatenate(v) for key, v in found.items()}
    truth = truths(share)
    out: dict[str, Any] = {}
    for group, names in GROUPS.items():
        out[group] = {}
        for name in names:
            ci = joined[f"{group}/{name}"]
            given = np.isfinite(ci).all(1)
            hit = (ci[:, 0] <= truth[group][name]) & (truth[group][name] <= ci[:, 1])
            none = joined["failed"] == 0
            out[group][name] = {
                **rate(hit[given]),
                "given": float(given.mean()),
                "no_failed_run": rate(hit[given & none]),
            }
    return out


def table(studies: int, resamples: int, seed: int) -> dict[str, Any]:
    """The whole table: every shape, process and interval, with each interval's range."""
    shapes: dict[str, Any] = {}
    for k, (label, shape) in enumerate(SHAPES.items()):
        cells = {
            f"{share:g}": cell(shape, share, studies, resamples, seed + 1000 * k + int(100 * share))
            for share in SHARES
        }
        shapes[label] = {}
        for group, names in GROUPS.items():
            shapes[label][group] = {}
            for name in names:
                by = {share: cells[share][group][name] for share in cells}
                covered = [v["covered"] for v in by.values()]
                shapes[label][group][name] = {"range": [min(covered), max(covered)], "by_process": by}
        print(
            f"  {label}: "
            + "; ".join(
                f"{name} {v['range'][0]:.1%}-{v['range'][1]:.1%}"
                for name, v in shapes[label]["intervals"].items()
            ),
            flush=True,
        )
    return {
        "command": "python -m benchmarks.coverage_table",
        "date": datetime.date.today().isoformat(),
        "studies": studies,
        "resamples": resamples,
        "seed": seed,
        "processes": PROCESSES,
        "shares": list(SHARES),
        "depth_sd": DEPTH,
        "shapes": shapes,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--studies", type=int, default=10000)
    parser.add_argument("--resamples", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=60)
    parser.add_argument(
        "--out", type=Path, default=TABLE, help="where the JSON goes (default: the shipped table)"
    )
    args = parser.parse_args()
    start = time.time()
    found = table(args.studies, args.resamples, args.seed)
    args.out.write_text(json.dumps(found, indent=1) + "\n")
    print(f"wrote {args.out} ({time.time() - start:.0f} s)")


if __name__ == "__main__":
    main()
