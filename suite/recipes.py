"""The recipe table: the recipes of one study side by side, in the shape of Mosbach et al. 2021
Table 1 and Zhang et al. 2021 Table 2, each against a reference recipe.

Per recipe (failed runs scored, as the papers count them; a diverged run has no score): the
failure rate with its Wilson interval; median, IQR and std with design-bootstrap intervals.
Against the reference, all across seeds:
- failure rate: the difference and Fisher's exact test, and the power that test had, at these
  run counts, to detect a recipe that halves the reference's failure rate (exact, by enumeration);
- spread: the std difference and the Brown-Forsythe test (Levene's around the medians);
- location: the Hodges-Lehmann median shift with its 95% interval. Where both recipes ran the
  same seeds (the sweep's one seed grid), runs are paired by seeds: the one-sample estimator on
  the paired differences with its exact Wilcoxon signed-rank interval (the seeds' shared effects
  cancel). Below 6 pairs no exact 95% interval exists, and the unpaired shift is used.
"""

from __future__ import annotations

import json
from collections import defaultdict
from functools import cache
from typing import Any

import numpy as np
from scipy import stats

from suite.compare import brown_forsythe, hodges_lehmann, scored_values
from suite.errors import SuiteError
from suite.records import outcome, runs
from suite.uncertainty import intervals

ALPHA = 0.05
MIN_PAIRS = 6  # the fewest pairs with an exact two-sided 95% signed-rank interval (1/32 < 0.025)


def recipe_of(record: dict[str, Any]) -> str | None:
    return (record.get("hparams") or {}).get("recipe")


def recipe_groups(records: list[dict[str, Any]]) -> dict[Any, dict[str, list[dict[str, Any]]]]:
    """size -> recipe -> runs, recipes in the order they first appear (the sweep's order)."""
    out: dict[Any, dict[str, list[dict[str, Any]]]] = defaultdict(dict)
    for r in runs(records):
        if (name := recipe_of(r)) is not None:
            out[r["size"]].setdefault(name, []).append(r)
    return dict(out)


@cache
def _fisher_rejects(n1: int, n2: int, alpha: float) -> np.ndarray:
    """rejects[x1, x2]: Fisher's exact test rejects at `alpha` with x1 of n1 and x2 of n2 failed."""
    out = np.zeros((n1 + 1, n2 + 1), dtype=bool)
    for x1 in range(n1 + 1):
        for x2 in range(n2 + 1):
            out[x1, x2] = stats.fisher_exact([[x1, n1 - x1], [x2, n2 - x2]]).pvalue <= alpha
    return out


def fisher_power(p1: float, p2: float, n1: int, n2: int, alpha: float = ALPHA) -> float:
    """Exact power of the two-sided Fisher test for failure rates p1 (n1 runs) vs p2 (n2 runs)."""
    b1 = stats.binom.pmf(np.arange(n1 + 1), n1, p1)
    b2 = stats.binom.pmf(np.arange(n2 + 1), n2, p2)
    return float((np.outer(b1, b2) * _fisher_rejects(n1, n2, alpha)).sum())


def failure_test(reference: list[dict[str, Any]], other: list[dict[str, Any]]) -> dict[str, Any]:
    f1, f2 = (sum(outcome(r) == "failed" for r in side) for side in (reference, other))
    n1, n2 = len(reference), len(other)
    p = stats.fisher_exact([[f1, n1 - f1], [f2, n2 - f2]]).pvalue
    halved = fisher_power(f1 / n1, f1 / n1 / 2, n1, n2) if f1 else None
    return {"diff": f2 / n2 - f1 / n1, "fisher_p": float(p), "power_to_detect_halving": halved}


@cache
def _signed_rank_cdf(n: int) -> np.ndarray:
    """P(W+ <= w), w = 0..n(n+1)/2, for n pairs under the null (exact, by counting sign patterns)."""
    counts = np.zeros(n * (n + 1) // 2 + 1)
    counts[0] = 1
    for i in range(1, n + 1):
        counts[i:] = counts[i:] + counts[: len(counts) - i].copy()
    return np.cumsum(counts) / 2.0**n


def paired_shift(d: np.ndarray) -> dict[str, Any]:
    """One-sample Hodges-Lehmann shift of paired differences (median of the Walsh averages) with
    the exact Wilcoxon signed-rank 95% interval (k-th smallest and largest Walsh average)."""
    n = d.size
    i, j = np.triu_indices(n)
    walsh = np.sort((d[i] + d[j]) / 2)
    cdf = _signed_rank_cdf(n)
    k = int(np.searchsorted(cdf, ALPHA / 2, side="right"))  # cdf(k - 1) <= alpha/2 < cdf(k)
    ci = [float(walsh[k - 1]), float(walsh[walsh.size - k])] if k >= 1 else None
    return {
        "estimate": float(np.median(walsh)),
        "ci95": ci,
        "unit": f"{n} seed-paired runs",
        "method": "paired Hodges-Lehmann, exact Wilcoxon signed-rank interval",
    }


def _paired_differences(a: list[dict[str, Any]], b: list[dict[str, Any]]) -> np.ndarray | None:
    """Score differences b - a of runs with the same seeds, when both recipes ran one seed set."""

    def index(side: list[dict[str, Any]]) -> dict[str, float | None]:
        return {json.dumps(r.get("seeds"), sort_keys=True): r.get("score") for r in side}

    ia, ib = index(a), index(b)
    if len(ia) != len(a) or len(ib) != len(b) or set(ia) != set(ib):
        return None
    d = [ib[k] - ia[k] for k in ia if ia[k] is not None and ib[k] is not None]
    d = np.array([x for x in d if np.isfinite(x)])
    return d if d.size >= MIN_PAIRS else None


def shift(a: list[dict[str, Any]], b: list[dict[str, Any]], seed: int = 0) -> dict[str, Any]:
    d = _paired_differences(a, b)
    return paired_shift(d) if d is not None else hodges_lehmann(a, b, seed)


def _row(name: str, side: list[dict[str, Any]], seed: int, resamples: int) -> dict[str, Any]:
    found = intervals(side, resamples=resamples, seed=seed)
    return {
        "recipe": name,
        "runs": len(side),
        "failed": sum(outcome(r) == "failed" for r in side),
        "failure_rate": found["failure_rate"],
        **{k: found[k] for k in ("median", "iqr", "std")},
        "hparams": side[0]["hparams"],
    }


def recipe_table(
    records: list[dict[str, Any]], reference: str | None = None, seed: int = 0, resamples: int = 1000
) -> list[dict[str, Any]]:
    """One table per size: {size, reference, rows: [{recipe, runs, failed, failure_rate, median,
    iqr, std (each {estimate, ci95, unit, method}), hparams, vs_reference (None on the reference's
    row): {failure_rate_diff, fisher_p, power_to_detect_halving, std_diff, brown_forsythe_p,
    median_shift (Hodges-Lehmann {estimate, ci95, unit, method})}}]}."""
    groups = recipe_groups(records)
    if not groups:
        raise SuiteError("the study has no recipes (a sweep with `recipes:`); compare two runs instead")
    tables = []
    for size, by_recipe in groups.items():
        ref = reference or next(iter(by_recipe))
        if ref not in by_recipe:
            raise SuiteError(f"--reference {ref!r}: no such recipe (recipes: {', '.join(by_recipe)})")
        base = by_recipe[ref]
        rows = []
        for name, side in by_recipe.items():
            row = _row(name, side, seed, resamples)
            row["vs_reference"] = None if name == ref else _versus(base, side, row, seed)
            rows.append(row)
        tables.append({"size": size, "reference": ref, "rows": rows})
    return tables


def _versus(base: list[dict[str, Any]], side: list[dict[str, Any]], row: dict, seed: int) -> dict:
    xa, xb = scored_values(base), scored_values(side)
    scored = xa.size >= 2 and xb.size >= 2
    std_a = float(np.std(xa, ddof=1)) if xa.size >= 2 else None
    return {
        **{f"failure_rate_{k}" if k == "diff" else k: v for k, v in failure_test(base, side).items()},
        "std_diff": row["std"]["estimate"] - std_a if scored and row["std"]["estimate"] is not None else None,
        "brown_forsythe_p": brown_forsythe(xa, xb) if scored else None,
        "median_shift": shift(base, side, seed) if scored else None,
    }


def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{100 * x:.1f}"


def _with_ci(block: dict[str, Any] | None, percent: bool = False) -> str:
    if not block or block.get("estimate") is None:
        return "n/a"
    ci = block.get("ci95")
    if percent:
        return f"{block['estimate']:.0%} [{ci[0]:.0%}, {ci[1]:.0%}]" if ci else f"{block['estimate']:.0%}"
    return f"{_pct(block['estimate'])} [{_pct(ci[0])}, {_pct(ci[1])}]" if ci else _pct(block["estimate"])


def _p(p: float | None) -> str:
    return "n/a" if p is None else f"{p:.2g}"


def format_recipe_table(tables: list[dict[str, Any]], metric: str) -> str:
    """The tables as text: one row per recipe, then its tests against the reference."""
    lines = []
    for t in tables:
        ref, rows = t["reference"], t["rows"]
        width = max(len(r["recipe"]) for r in rows)
        lines += [
            f"recipes at size {t['size']}: {metric} x100, dev; failed runs scored; [95% intervals across "
            f"seeds: {rows[0]['median']['unit']}]; reference {ref}",
            f"{'recipe':{width}s} {'n':>3s}  {'failed [Wilson]':20s} {'median':20s} {'IQR':20s} "
            f"{'std':20s} | vs {ref}: failed diff (Fisher p)  std diff (Brown-Forsythe p)  "
            "median shift [95%]",
        ]
        for r in rows:
            v = r["vs_reference"]
            cells = (
                f"{r['recipe']:{width}s} {r['runs']:3d}  {_with_ci(r['failure_rate'], True):20s} "
                f"{_with_ci(r['median']):20s} {_with_ci(r['iqr']):20s} {_with_ci(r['std']):20s} | "
            )
            if v is None:
                lines.append(cells + "(reference)")
                continue
            shift = v["median_shift"] or {}
            std_diff = "n/a" if v["std_diff"] is None else f"{100 * v['std_diff']:+.1f}"
            lines.append(
                cells + f"{v['failure_rate_diff']:+.0%} (p={_p(v['fisher_p'])})  "
                f"{std_diff} (p={_p(v['brown_forsythe_p'])})  "
                f"{_with_ci(shift) if shift else 'n/a'}"
                + (" paired" if "paired" in shift.get("method", "") else "")
            )
        halving = [r["vs_reference"]["power_to_detect_halving"] for r in rows if r["vs_reference"]]
        halving = [h for h in halving if h is not None]
        if halving:
            lines.append(
                f"  power of these Fisher tests to detect a recipe that halves {ref}'s failure rate "
                f"(p < {ALPHA}): {min(halving):.0%}"
                + (f" to {max(halving):.0%}" if max(halving) - min(halving) >= 0.005 else "")
            )
        lines.append(
            "  median shift: Hodges-Lehmann, paired by seeds where both recipes ran the same seeds "
            f"(>= {MIN_PAIRS} pairs), else unpaired"
        )
    return "\n".join(lines)
