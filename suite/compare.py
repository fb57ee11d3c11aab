"""`suite compare RUN_A RUN_B`: two studies' score distributions side by side, with tests.

All across seeds (runs), never across the examples of one dev set:
- location: Mann-Whitney U (whole distributions), a seeded permutation test of the difference in
  medians, and the Hodges-Lehmann shift (median of all B - A differences) with a 95% interval;
- spread: the Brown-Forsythe test (Levene's test around the medians: robust to skewed scores);
- failures: Wilson intervals on both failure rates and Fisher's exact test;
- paired: when both studies ran the same seeds, the Wilcoxon signed-rank test on matched runs
  (the seeds' shared effects cancel in each difference, so it sees shifts the unpaired tests miss).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
from scipy import stats

from suite.errors import SuiteError
from suite.records import load_run, outcome, runs, setting_key
from suite.statistics import spread
from suite.uncertainty import (
    bootstrap_samples,
    intervals,
    layout,
    percentile_ci,
    reduce,
    widen,
    widening,
    wilson,
)


def load_records(run_dir: Path) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The (info, runs) of a run folder's own study; errored and pruned trials are not runs."""
    info, records = load_run(run_dir)
    if not runs(records):
        raise SuiteError(f"{run_dir}: the study holds no finished runs")
    return info, runs(records)


def scored_values(records: list[dict[str, Any]]) -> np.ndarray:
    return np.array([r["score"] for r in records if r.get("score") is not None and np.isfinite(r["score"])])


def _exchangeable(records: list[dict[str, Any]]) -> bool:
    """Independent runs of one setting on one subsample: runs are the resampling unit."""
    lay = layout(records)
    return lay.design == "independent" and lay.grid.shape[0] == 1 and len({_setting(r) for r in records}) == 1


def _setting(r: dict[str, Any]) -> str:
    return json.dumps([r.get("size"), r.get("hparams") or {}], sort_keys=True, default=str)


def hodges_lehmann(
    a: list[dict[str, Any]], b: list[dict[str, Any]], seed: int = 0, resamples: int = 1000
) -> dict[str, Any]:
    """Shift B - A: the median of all pairwise differences, robust to outliers and failed runs.

    Interval: for independent runs of one setting on both sides, the distribution-free
    Mann-Whitney (Moses) interval, normal approximation (measured coverage 95-97% from 4 runs a
    side up); otherwise a design bootstrap of both sides (each side's seeds resampled as its
    design says), widened for few seeds like `intervals`.
    """
    xa, xb = scored_values(a), scored_values(b)
    estimate = float(np.median(np.subtract.outer(xb, xa)))
    if _exchangeable(a) and _exchangeable(b):
        d = np.sort(np.subtract.outer(xb, xa).ravel())
        m, n = xa.size, xb.size
        # k-th smallest and largest difference, k from U's null distribution (normal, continuity-corrected)
        k = int(np.floor(m * n / 2 - stats.norm.ppf(0.975) * np.sqrt(m * n * (m + n + 1) / 12) + 0.5))
        ci = [float(d[k - 1]), float(d[m * n - k])] if k >= 1 else None
        return {"estimate": estimate, "ci95": ci, "unit": "runs", "method": "Mann-Whitney (Moses) interval"}
    sa, unit_a, terms_a = bootstrap_samples(a, resamples, seed)
    sb, unit_b, terms_b = bootstrap_samples(b, resamples, seed + 1)
    reps = np.empty(resamples)
    for start in range(0, resamples, 100):  # chunks keep the (chunk, m, n) differences small
        diffs = sb[start : start + 100, None, :] - sa[start : start + 100, :, None]
        reps[start : start + 100] = reduce(diffs.reshape(diffs.shape[0], -1), "median")
    factor, _ = widening(terms_a + terms_b)
    return {
        "estimate": estimate,
        "ci95": widen(percentile_ci(reps), estimate, factor),
        "unit": f"A: {unit_a}; B: {unit_b}",
        "method": "design bootstrap of both sides, percentile, widened for few seeds",
    }


def paired(a: list[dict[str, Any]], b: list[dict[str, Any]]) -> dict[str, Any] | None:
    """Wilcoxon signed-rank test on runs matched by their seeds (and setting, when both studies ran
    the same settings). None unless at least 2 scored runs match. Matched pairs are treated as
    independent, which a crossed grid's shared seeds make optimistic."""

    def index(records: list[dict[str, Any]], with_setting: bool) -> dict[str, float] | None:
        keyed: dict[str, float] = {}
        for r in records:
            if r.get("seeds") is None or r.get("score") is None or not np.isfinite(r["score"]):
                continue
            key = json.dumps(r["seeds"], sort_keys=True) + (
                setting_key(r.get("hparams") or {}) if with_setting else ""
            )
            if key in keyed:  # the same seeds twice: no unique partner
                return None
            keyed[key] = float(r["score"])
        return keyed

    for with_setting, matched_on in ((True, "seeds and setting"), (False, "seeds")):
        ia, ib = index(a, with_setting), index(b, with_setting)
        common = sorted(set(ia or {}) & set(ib or {}))
        if len(common) >= 2:
            d = np.array([ib[k] - ia[k] for k in common])
            p = 1.0 if np.all(d == 0) else float(stats.wilcoxon(d).pvalue)
            return {
                "n_pairs": len(common),
                "matched_on": matched_on,
                "median_diff": float(np.median(d)),
                "wilcoxon_p": p,
            }
    return None


def brown_forsythe(xa: np.ndarray, xb: np.ndarray) -> float | None:
    """Levene's test around the medians; None when neither side's runs deviate (0 / 0), or when a
    side has 2 runs: both deviate from their median by the same amount, so the within-side
    spread of deviations is 0 by construction and the test would reject at any spread."""
    if min(xa.size, xb.size) < 3:
        return None
    with np.errstate(invalid="ignore", divide="ignore"):
        p = float(stats.levene(xa, xb, center="median").pvalue)
    return p if np.isfinite(p) else None


def compare(a: list[dict[str, Any]], b: list[dict[str, Any]], seed: int = 0) -> dict[str, Any]:
    """B against A. Shape: {"a", "b": spread + failure_rate, failure_rate_ci95 (Wilson, across
    runs), median_ci95 and unit (design bootstrap), median_diff, iqr_diff, failure_rate_diff,
    mann_whitney_p, permutation_median_p, fisher_failure_p, brown_forsythe_p (difference in
    spread), hodges_lehmann {estimate, ci95, unit, method}, paired (see `paired`) or None}."""
    xa, xb = scored_values(a), scored_values(b)
    if xa.size < 2 or xb.size < 2:
        raise SuiteError("compare needs at least 2 scored runs on each side")
    fail_a, fail_b = (sum(outcome(r) == "failed" for r in side) for side in (a, b))
    permutation = stats.permutation_test(
        (xb, xa),
        lambda x, y, axis: np.median(x, axis=axis) - np.median(y, axis=axis),
        vectorized=True,
        n_resamples=10_000,
        rng=np.random.default_rng(seed),
    )
    sides = {}
    for name, records, x, failed in (("a", a, xa, fail_a), ("b", b, xb, fail_b)):
        median = intervals(records, resamples=1000, seed=seed)["median"]
        sides[name] = {
            **spread(x),
            "failure_rate": failed / len(records),
            "failure_rate_ci95": wilson(failed, len(records))["ci95"],
            "median_ci95": median["ci95"],
            "unit": median["unit"],
        }
    return {
        **sides,
        "median_diff": float(np.median(xb) - np.median(xa)),
        "iqr_diff": sides["b"]["iqr"] - sides["a"]["iqr"],
        "failure_rate_diff": fail_b / len(b) - fail_a / len(a),
        "mann_whitney_p": float(stats.mannwhitneyu(xb, xa, alternative="two-sided").pvalue),
        "permutation_median_p": float(permutation.pvalue),
        "fisher_failure_p": float(
            stats.fisher_exact([[fail_a, len(a) - fail_a], [fail_b, len(b) - fail_b]]).pvalue
        ),
        "brown_forsythe_p": brown_forsythe(xa, xb),
        "hodges_lehmann": hodges_lehmann(a, b, seed),
        "paired": paired(a, b),
    }


def _ci(ci: list[float] | None) -> str:
    return f"[{100 * ci[0]:.2f}, {100 * ci[1]:.2f}]" if ci else "[n/a]"


def format_comparison(result: dict[str, Any], labels: tuple[str, str], metric: str) -> str:
    width = max(len(label) for label in labels)
    head = f"{'':{width}s} {'n':>4s} {'median':>8s} {'[95% CI]':>17s} {'IQR':>7s} {'fail':>5s}"
    lines = [f"{metric} x100, dev; spread and tests across seeds; [95% intervals]", head + "  [95% Wilson]"]
    for side, label in zip(("a", "b"), labels, strict=True):
        s = result[side]
        rate = s.get("failure_rate_ci95")
        fail_ci = f"[{rate[0]:.0%}, {rate[1]:.0%}]" if rate else "[n/a]"
        lines.append(
            f"{label:{width}s} {s['n']:4d} {100 * s['median']:8.2f} {_ci(s.get('median_ci95')):>17s} "
            f"{100 * s['iqr']:7.2f} {s['failure_rate']:5.0%}  {fail_ci}"
        )
    for side, label in zip(("a", "b"), labels, strict=True):
        if "unit" in result[side]:
            lines.append(f"  {label}: median CI across {result[side]['unit']}; failure-rate CI across runs")
    p_perm = result["permutation_median_p"]
    shift = f"B - A: median {100 * result['median_diff']:+.2f} (permutation p={p_perm:.3g})"
    hl = result.get("hodges_lehmann")
    if hl:
        shift += f", Hodges-Lehmann shift {100 * hl['estimate']:+.2f} {_ci(hl['ci95'])} across {hl['unit']}"
    lines.append(shift)
    bf = result.get("brown_forsythe_p")
    bf = f", Brown-Forsythe p={bf:.3g}" if bf is not None else ""
    lines.append(
        f"  spread: IQR {100 * result['iqr_diff']:+.2f}{bf}; failure rate {result['failure_rate_diff']:+.0%} "
        f"(Fisher p={result['fisher_failure_p']:.3g}); Mann-Whitney p={result['mann_whitney_p']:.3g}"
    )
    pair = result.get("paired")
    if pair:
        lines.append(
            f"  paired on {pair['n_pairs']} runs with the same {pair['matched_on']}: median difference "
            f"{100 * pair['median_diff']:+.2f}, Wilcoxon signed-rank p={pair['wilcoxon_p']:.3g}"
        )
    elif "paired" in result:
        lines.append("  no runs with the same seeds on both sides: no paired test")
    return "\n".join(lines)
