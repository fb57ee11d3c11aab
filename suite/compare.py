"""`suite compare RUN_A RUN_B`: two studies' score distributions side by side, with tests.

Mann-Whitney U compares the whole distributions; a seeded permutation test gives a p-value for
the difference in medians; Fisher's exact test compares failure rates. All across seeds.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
from scipy import stats

from suite.errors import SuiteError
from suite.records import load_run, runs
from suite.statistics import spread


def load_records(run_dir: Path) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The (info, runs) of a run folder's own study; errored and pruned trials are not runs."""
    info, records = load_run(run_dir)
    if not runs(records):
        raise SuiteError(f"{run_dir}: the study holds no finished runs")
    return info, runs(records)


def compare(a: list[dict[str, Any]], b: list[dict[str, Any]], seed: int = 0) -> dict[str, Any]:
    xa = np.array([r["score"] for r in a if r.get("score") is not None], dtype=float)
    xb = np.array([r["score"] for r in b if r.get("score") is not None], dtype=float)
    if xa.size < 2 or xb.size < 2:
        raise SuiteError("compare needs at least 2 scored runs on each side")
    fail_a, fail_b = sum(bool(r.get("failed")) for r in a), sum(bool(r.get("failed")) for r in b)
    permutation = stats.permutation_test(
        (xb, xa),
        lambda x, y: np.median(x) - np.median(y),
        n_resamples=10_000,
        rng=np.random.default_rng(seed),
    )
    return {
        "a": {**spread(xa), "failure_rate": fail_a / len(a)},
        "b": {**spread(xb), "failure_rate": fail_b / len(b)},
        "median_diff": float(np.median(xb) - np.median(xa)),
        "iqr_diff": spread(xb)["iqr"] - spread(xa)["iqr"],
        "failure_rate_diff": fail_b / len(b) - fail_a / len(a),
        "mann_whitney_p": float(stats.mannwhitneyu(xb, xa, alternative="two-sided").pvalue),
        "permutation_median_p": float(permutation.pvalue),
        "fisher_failure_p": float(
            stats.fisher_exact([[fail_a, len(a) - fail_a], [fail_b, len(b) - fail_b]]).pvalue
        ),
    }


def format_comparison(result: dict[str, Any], labels: tuple[str, str], metric: str) -> str:
    width = max(len(label) for label in labels)
    lines = [
        f"{metric} x100, dev, across seeds",
        f"{'':{width}s} {'n':>4s} {'median':>8s} {'IQR':>7s} {'fail':>6s}",
    ]
    for side, label in zip(("a", "b"), labels, strict=True):
        s = result[side]
        lines.append(
            f"{label:{width}s} {s['n']:4d} {100 * s['median']:8.2f} {100 * s['iqr']:7.2f} "
            f"{s['failure_rate']:6.0%}"
        )
    lines.append(
        f"B - A: median {100 * result['median_diff']:+.2f} "
        f"(permutation p={result['permutation_median_p']:.3g}), "
        f"IQR {100 * result['iqr_diff']:+.2f}, failure rate {result['failure_rate_diff']:+.0%} "
        f"(Fisher p={result['fisher_failure_p']:.3g}); Mann-Whitney p={result['mann_whitney_p']:.3g}"
    )
    return "\n".join(lines)
