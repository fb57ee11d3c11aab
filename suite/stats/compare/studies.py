"""`suite compare RUN_A RUN_B`: two studies side by side, per shared (size, setting) block.

All across seeds (runs), never across the examples of one dev set, and never pooled over sizes or
settings (blocks.py). Within a block:
- independent runs of one subsample on both sides (exchangeable under "no effect"): Mann-Whitney,
  a permutation test of the difference in medians, the Hodges-Lehmann shift with its Moses 95%
  interval, Brown-Forsythe's spread statistic by permutation, Fisher's exact test on failures;
- runs that share seeds (a crossed init x order grid, several subsample seeds): the difference in
  means tested on seed units (suite.stats.decide, paired.py), for scores and failures; no spread test;
- paired, when both studies ran the same seeds: the Wilcoxon signed-rank test on independent pairs,
  else the seed-unit test on the paired differences (the seeds' shared effects cancel).
Every test knows its smallest attainable p at its n (suite.stats.decide) and says "cannot decide"
instead of printing a p it could never get below 0.05.
"""

from __future__ import annotations

import json
import re
from typing import Any

import numpy as np

import suite.stats.compare.blocks as bk
from suite.errors import SuiteError
from suite.stats.compare.field_verdicts import verdict_lines, verdicts
from suite.stats.decide import decidable as dc
from suite.stats.decide import exact, failed, pair_up, paired_units, unpaired_units
from suite.stats.design import exchangeable
from suite.stats.estimates import median_interval, spread, wilson
from suite.study.records import TrialRecord, finite_scores, outcome, score

MATCHED_ON = "seeds, size and setting"


def class_count(info: dict[str, Any]) -> int | None:
    """The task's classes (its `labels`) from a run folder's run.json: F1 (binary or macro) and
    Matthews are computed over them, never over the classes a dev sample happens to hold. None for
    regression and for tagging (its labels are entity types, not classes)."""
    task = info.get("task") or {}
    labels = task.get("labels")
    return len(labels) if labels and task.get("head", "classification") == "classification" else None


def _test(name: str, method: str, p: Any, min_p: float, runs: int, needed: int | None, unit: str) -> dict:
    found = dc.verdict(None, min_p, runs, needed, unit)
    if found["decidable"]:  # the p is computed only where it can decide
        found["p"] = float(p() if callable(p) else p)
    return {"name": name, "method": method, **found}


def _permutation_test(
    name: str, xa: np.ndarray, xb: np.ndarray, statistic: exact.Statistic, seed: int
) -> dict:
    """A permutation test of independent runs; decidable where some split of these very runs (ties
    included) could reach p < 0.05."""
    m, n = xa.size, xb.size
    splits, every = exact.split_count(m, n)
    method = "exact over all splits of the runs" if every else f"{splits} random splits of the runs"
    p = lambda: exact.permutation_p(xa, xb, statistic, seed=seed)  # noqa: E731
    low = exact.smallest_p(xa, xb, statistic)
    return _test(name, method, p, low, min(m, n), exact.runs_needed(statistic), "runs per arm")


def _not_used(name: str, why: str) -> dict:
    return {"name": name, "decidable": False, "p": None, "note": why}


def hodges_lehmann(xa: np.ndarray, xb: np.ndarray) -> dict[str, Any]:
    """Shift B - A (median of all pairwise differences) with its Moses 95% interval, when one exists."""
    estimate, ci = exact.moses_interval(xa, xb)
    out = {
        "estimate": float(estimate),
        "ci95": None if ci is None else [float(v) for v in ci],
        "unit": "runs",
    }
    out["method"] = "Hodges-Lehmann, Moses (exact Mann-Whitney) interval"
    if ci is None:
        needed = exact.runs_needed(exact.mean_shift)
        out["note"] = f"no 95% interval with {xa.size} and {xb.size} runs; needs at least {needed} per arm"
    return out


def failure_test(a: list[TrialRecord], b: list[TrialRecord]) -> dict[str, Any]:
    """Fisher's exact test for independent runs; the seed-unit test on failure indicators else;
    none where a side's outcomes are unknown (imported without the failure rule's baseline)."""
    if unknown := [side for side, runs in (("A", a), ("B", b)) if _unknown(runs)]:
        return _not_used(
            "failures", f"{' and '.join(unknown)}: outcomes unknown (imported without a baseline)"
        )
    fa, fb = (sum(outcome(r) == "failed" for r in side) for side in (a, b))
    if fa + fb in (0, len(a) + len(b)):
        return _not_used("failures", "no failed runs" if fa + fb == 0 else "every run failed")
    if not (exchangeable(a) and exchangeable(b)):
        return {"name": "failures, t on seed units", **unpaired_units(a, b, failed)}
    n1, n2 = len(a), len(b)
    return _test(
        "Fisher",
        "exact, at these margins",
        lambda: exact.fisher_p(fa, n1, fb, n2),
        dc.fisher_min_p(n1, n2, fa + fb),
        min(n1, n2),
        dc.fisher_runs_needed(n1, n2, fa + fb),
        "runs per arm",
    )


def spread_test(a: list[TrialRecord], b: list[TrialRecord], seed: int = 0) -> dict[str, Any]:
    """Brown-Forsythe's statistic (difference in mean absolute deviation from the median), by
    permutation; no test where runs share seeds (their deviations are not independent)."""
    if not (exchangeable(a) and exchangeable(b)):
        return _not_used("Brown-Forsythe", "no spread test: the runs share seeds")
    xa, xb = finite_scores(a), finite_scores(b)
    return _permutation_test("Brown-Forsythe (permutation)", xa, xb, exact.spread_shift, seed)


def location_tests(a: list[TrialRecord], b: list[TrialRecord], seed: int = 0) -> dict[str, Any]:
    """Unpaired location: rank and permutation tests with the Hodges-Lehmann shift for independent
    runs; the difference in means on seed units else."""
    if not (exchangeable(a) and exchangeable(b)):
        mean = {"name": "t on seed units", **unpaired_units(a, b)}
        return {"mann_whitney": None, "permutation_median": None, "hodges_lehmann": None, "mean_shift": mean}
    xa, xb = finite_scores(a), finite_scores(b)
    return {
        "mann_whitney": _permutation_test("Mann-Whitney", *exact.ranked(xa, xb), exact.mean_shift, seed),
        "permutation_median": _permutation_test("permutation (medians)", xa, xb, exact.median_shift, seed),
        "hodges_lehmann": hodges_lehmann(xa, xb),
        "mean_shift": None,
    }


def paired(a: list[TrialRecord], b: list[TrialRecord], seed: int = 0) -> dict[str, Any] | None:
    """Runs matched by their seeds (within one block: same size and setting). Independent pairs: the
    Wilcoxon signed-rank test and the paired Hodges-Lehmann interval; pairs on a crossed grid or under
    several subsample seeds: the seed-unit test. None below 2 scored pairs."""
    pairs = pair_up(a, b)
    # A collapsed run scores exactly 0 (MCC, entity F1, EM): a score, never a missing one.
    scored = [(ra, rb) for ra, rb in pairs if np.isfinite(score(ra)) and np.isfinite(score(rb))]
    if len(scored) < 2:
        return None
    d = np.array([rb["score"] - ra["score"] for ra, rb in scored])
    out: dict[str, Any] = {
        "n_pairs": len(scored),
        "matched_on": MATCHED_ON,
        "median_diff": float(np.median(d)),
    }
    if exchangeable([ra for ra, _ in scored]):
        return out | _signed_rank(d, seed)
    test = {"name": "t on seed units, paired", **paired_units(scored)}
    out |= {
        "test": test,
        "shift": {k: test[k] for k in ("estimate", "ci95", "unit", "method", "note") if k in test},
    }
    if any(outcome(r) == "failed" for pair in pairs for r in pair):
        out["failures"] = {"name": "failures, t on seed units, paired", **paired_units(pairs, failed)}
    return out


def _signed_rank(d: np.ndarray, seed: int) -> dict[str, Any]:
    nonzero = int(np.count_nonzero(d))
    unit = "pairs" if nonzero == d.size else "pairs that differ"
    test = _test(
        "Wilcoxon signed-rank",
        "exact over sign flips" if nonzero <= 16 else "random sign flips",
        lambda: exact.signed_rank_p(d, seed=seed),
        dc.signed_rank_min_p(nonzero),
        nonzero,
        dc.runs_needed(dc.signed_rank_min_p, 1),
        unit,
    )
    estimate, ci = exact.walsh_interval(d)
    shift = {"estimate": float(estimate), "ci95": None if ci is None else [float(v) for v in ci]}
    shift |= {
        "unit": f"{d.size} seed-paired runs",
        "method": "paired Hodges-Lehmann, exact signed-rank interval",
    }
    if ci is None:
        shift["note"] = f"no 95% interval with {d.size} pairs; needs at least 6"
    return {"test": test, "shift": shift}


def _unknown(records: list[TrialRecord]) -> bool:
    return any(outcome(r) == "unknown" for r in records)


def _side(records: list[TrialRecord], x: np.ndarray, seed: int) -> dict[str, Any]:
    fails = sum(outcome(r) == "failed" for r in records)
    median = median_interval(records, resamples=1000, seed=seed) if x.size else {"ci95": None, "unit": "runs"}
    unknown = _unknown(records)  # no rate where no run was judged
    return {
        **spread(x),
        "failure_rate": None if unknown else fails / len(records),
        "failure_rate_ci95": None if unknown else wilson(fails, len(records))["ci95"],
        "median_ci95": median["ci95"],
        "unit": median["unit"],
    }


def compare_block(
    a: list[TrialRecord], b: list[TrialRecord], seed: int = 0, num_labels: int | None = None
) -> dict[str, Any]:
    """B against A within one (size, setting); the verdicts take the metric's direction from the
    runs' metric and the task's classes from `num_labels`. Shape: {a, b: spread + failure_rate,
    failure_rate_ci95, median_ci95, unit; design ("runs" | "seed units"), median_diff, iqr_diff,
    failure_rate_diff; mann_whitney, permutation_median, mean_shift, brown_forsythe, failures: tests,
    each {name, method, decidable, p (None unless decidable), min_p, runs_needed, note}, or None where
    the design has no such test; hodges_lehmann {estimate, ci95, unit, method, note} or None; paired
    (see `paired`) or None; verdicts: the field's (field_verdicts.py); note: why no tests}."""
    xa, xb = finite_scores(a), finite_scores(b)
    sides = {"a": _side(a, xa, seed), "b": _side(b, xb, seed)}
    out: dict[str, Any] = {
        **sides,
        "design": "runs" if exchangeable(a) and exchangeable(b) else "seed units",
        "median_diff": float(np.median(xb) - np.median(xa)) if xa.size and xb.size else None,
        "iqr_diff": sides["b"]["iqr"] - sides["a"]["iqr"] if xa.size and xb.size else None,
        "failure_rate_diff": None
        if None in (sides["a"]["failure_rate"], sides["b"]["failure_rate"])
        else sides["b"]["failure_rate"] - sides["a"]["failure_rate"],
        "failures": failure_test(a, b),
    }
    if min(xa.size, xb.size) < 2:
        empty = dict.fromkeys(("mann_whitney", "permutation_median", "hodges_lehmann", "mean_shift"))
        return (
            out
            | empty
            | {"brown_forsythe": None, "paired": None, "note": "fewer than 2 scored runs on a side"}
        )
    return (
        out
        | location_tests(a, b, seed)
        | {
            "brown_forsythe": spread_test(a, b, seed),
            "paired": paired(a, b, seed),
            "verdicts": verdicts(a, b, seed, bk.direction(a, b), num_labels),
        }
    )


def compare(
    a: list[TrialRecord],
    b: list[TrialRecord],
    seed: int = 0,
    size: str | None = None,
    setting: dict | None = None,
    num_labels: int | None = None,
) -> dict[str, Any]:
    """B against A per shared (size, setting) block. Shape: {blocks: [{block (label), size, setting
    (the matched hyperparameters), **compare_block}], compared: {hyperparameter: [A's, B's]} (constant
    within each study, different between: what is compared), matched_on: [hyperparameters a block is
    matched on], only_a, only_b: [labels of blocks on one side only], higher_is_better (the runs'
    metric's direction)}. `size`, `setting`: pick blocks (`--size`, `--setting`); `num_labels`: the
    task's classes (`class_count`)."""
    bk.check_records(a, b)
    keys, compared = bk.varying([a, b]), bk.differing([a, b])
    in_a, in_b = bk.split(a, keys), bk.split(b, keys)
    shared = [blk for blk in in_a if blk in in_b]
    if not shared:
        raise SuiteError(
            "compare: the studies share no (size, setting): A has "
            f"{'; '.join(map(bk.label, in_a))}, B has {'; '.join(map(bk.label, in_b))}"
        )
    hparams = {blk: _own(in_a[blk][0], compared) for blk in shared}
    found = [
        {"block": bk.label(blk), "size": in_a[blk][0].get("size"), "setting": json.loads(blk[1])}
        | compare_block(in_a[blk], in_b[blk], seed, num_labels)
        for blk in bk.select(shared, size, setting, hparams, compared)
    ]
    return {
        "blocks": found,
        "compared": compared,
        "matched_on": keys,
        "only_a": [bk.label(blk) for blk in in_a if blk not in in_b],
        "only_b": [bk.label(blk) for blk in in_b if blk not in in_a],
        "higher_is_better": bk.direction(a, b),
    }


def block_runs(
    result: dict[str, Any], a: list[TrialRecord], b: list[TrialRecord]
) -> list[tuple[str, list, list]]:
    """(file-name-safe block name, A's runs, B's runs) of each block of a `compare` result."""
    out = []
    for block in result["blocks"]:
        key = (json.dumps(block["size"]), json.dumps(block["setting"], sort_keys=True))
        sides = [[r for r in side if bk.block_of(r, result["matched_on"]) == key] for side in (a, b)]
        out.append((re.sub(r"[^A-Za-z0-9.=-]+", "-", block["block"]).strip("-"), *sides))
    return out


def _own(r: TrialRecord, compared: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in (r.get("hparams") or {}).items() if k not in compared}


def _ci(ci: list[float] | None) -> str:
    return f"[{100 * ci[0]:.2f}, {100 * ci[1]:.2f}]" if ci else "[n/a]"


def describe(test: dict[str, Any] | None) -> str:
    """`Name: p=0.012`, or the name and why it has no p; a seed-unit test leads with its mean and interval."""
    if test is None:
        return ""
    mean = ""
    if test.get("estimate") is not None:
        mean = f"mean {100 * test['estimate']:+.2f}" + (f" {_ci(test['ci95'])}" if test.get("ci95") else "")
        mean += f", {test['df']:g} df, " if "df" in test else ", "
    return f"{test['name']}: {mean}{dc.text(test)}"


def _shift_text(hl: dict[str, Any], what: str) -> str:
    ci = _ci(hl["ci95"]) if hl.get("ci95") else f"({hl['note']})"
    return f"{what} {100 * hl['estimate']:+.2f} {ci}"


def _header(result: dict[str, Any], labels: tuple[str, str], metric: str) -> list[str]:
    lower = "" if result.get("higher_is_better", True) else " (lower is better)"
    lines = [f"{metric}{lower} x100, dev; A = {labels[0]}, B = {labels[1]}; spread and tests across seeds"]
    diff = "; ".join(
        f"{k} (A {bk.fmt_value(v[0])}, B {bk.fmt_value(v[1])})" for k, v in result["compared"].items()
    )
    lines.append(
        (f"the studies differ in {diff}; " if diff else "")
        + f"each (size, setting) on its own; pairs matched on {MATCHED_ON}"
    )
    for side, key in (("A", "only_a"), ("B", "only_b")):
        if result[key]:
            lines.append(f"only in {side} (not compared): {'; '.join(result[key])}")
    return lines


def _table(block: dict[str, Any], labels: tuple[str, str]) -> list[str]:
    width = max(len(label) for label in labels)
    head = f"{'':{width}s} {'n':>4s} {'median':>8s} {'[95% CI]':>17s} {'IQR':>7s} {'fail':>5s}  [95% Wilson]"
    lines = [head]
    for side, label in zip(("a", "b"), labels, strict=True):
        s = block[side]
        rate = s.get("failure_rate_ci95")
        fail_ci = f"[{rate[0]:.0%}, {rate[1]:.0%}]" if rate else "[n/a]"
        fail = f"{s['failure_rate']:5.0%}" if s["failure_rate"] is not None else "   ? "
        median = f"{100 * s['median']:8.2f}" if s["n"] else f"{'n/a':>8s}"
        iqr = f"{100 * s['iqr']:7.2f}" if s["n"] else f"{'n/a':>7s}"
        lines.append(
            f"{label:{width}s} {s['n']:4d} {median} {_ci(s.get('median_ci95')):>17s} {iqr} {fail}  {fail_ci}"
        )
    units = {block["a"]["unit"], block["b"]["unit"]}
    units = block["a"]["unit"] if len(units) == 1 else f"A: {block['a']['unit']}; B: {block['b']['unit']}"
    lines.append(f"  median CI across {units}; failure-rate CI across runs")
    return lines


def _line(head: str, tests: list[dict[str, Any] | None]) -> list[str]:
    """A summary line, then one line per test: its p, or why it has none."""
    return [f"  {head}"] + [f"    {describe(t)}" for t in tests if t]


def _tests(block: dict[str, Any]) -> list[str]:
    if block.get("note"):
        return [f"  no tests: {block['note']}"]
    location = f"location, B - A: median {100 * block['median_diff']:+.2f}"
    if block["hodges_lehmann"]:
        location += "; " + _shift_text(block["hodges_lehmann"], "Hodges-Lehmann shift")
    failures = block["failures"]
    diff = block["failure_rate_diff"]
    fail_head = f"failures, B - A: {'unknown' if diff is None else f'{diff:+.0%}'}"
    if failures["name"] == "failures":  # nothing to test: no failures, or nothing else
        fail_head, failures = f"{fail_head}; {failures['note']}", None
    lines = [
        *_line(location, [block[k] for k in ("mann_whitney", "permutation_median", "mean_shift")]),
        *_line(f"spread, B - A: IQR {100 * block['iqr_diff']:+.2f}", [block["brown_forsythe"]]),
        *_line(fail_head, [failures]),
    ]
    pair = block["paired"]
    if pair is None:
        return [*lines, "  no runs with the same seeds on both sides: no paired test"]
    head = f"paired on {pair['n_pairs']} runs with the same {pair['matched_on']}: median difference "
    head += f"{100 * pair['median_diff']:+.2f}"
    if "estimate" not in pair["test"]:
        head += "; " + _shift_text(pair["shift"], "paired Hodges-Lehmann shift")
    return lines + _line(head, [pair["test"], pair.get("failures")])


def format_comparison(result: dict[str, Any], labels: tuple[str, str], metric: str) -> str:
    """One block per shared (size, setting): its table, then each test's p or why it has none."""
    lines = _header(result, labels, metric)
    for block in result["blocks"]:
        lines += [
            "",
            f"{block['block']} ({block['design']} are the unit):",
            *_table(block, labels),
            *_tests(block),
            *(verdict_lines(block["verdicts"]) if block.get("verdicts") else []),
        ]
    return "\n".join(lines)
