"""The recipe table: the recipes of one study side by side, in the shape of Mosbach et al. 2021
Table 1 and Zhang et al. 2021 Table 2, each against a reference recipe, per (size, setting): a
recipe that itself spans several settings (recipes on a grid) gives one row per setting, never a
pooled one (blocks.py; the hyperparameters a recipe sets are what is compared).

Per recipe (failed runs scored, as the papers count them; a diverged run has no score): the
failure rate, median, IQR and std with design-bootstrap intervals (over seed units).
Against the reference, all across seeds, through the tests of `suite compare` (studies.py):
- failure rate: the difference and Fisher's exact test (independent runs; on a crossed grid the
  seed-unit test), and the power Fisher's test had, at these run counts, to detect a recipe that
  halves the reference's failure rate (exact, by enumeration);
- spread: the std difference and Brown-Forsythe's statistic by permutation;
- location: the median shift with its 95% interval: paired by seeds where both recipes ran the same
  seeds (the paired Hodges-Lehmann with its exact signed-rank interval from 6 pairs; on a crossed
  grid the seed-unit mean), else the unpaired Hodges-Lehmann shift (Moses interval, from 4 runs).
A test that cannot reach p < 0.05 at its run counts says so, with the runs it needs.
"""

from __future__ import annotations

import json
from collections import defaultdict
from functools import cache
from typing import Any

import numpy as np
from scipy import stats

import suite.stats.compare.blocks as bk
from suite.errors import SuiteError
from suite.stats.compare.studies import failure_test, hodges_lehmann, paired, spread_test
from suite.stats.decide import text, unpaired_units
from suite.stats.design import by_setting, exchangeable, layout
from suite.stats.estimates import flag_coverage, intervals
from suite.study.records import TrialRecord, finite_scores, outcome, runs

ALPHA = 0.05


def recipe_of(record: TrialRecord) -> str | None:
    return (record.get("hparams") or {}).get("recipe")


def _by_recipe(records: list[TrialRecord]) -> dict[str, list[TrialRecord]]:
    out: dict[str, list[TrialRecord]] = {}
    for r in runs(records):
        if (name := recipe_of(r)) is not None:
            out.setdefault(name, []).append(r)
    return out


def recipe_groups(records: list[TrialRecord]) -> dict[bk.Block, dict[str, list[TrialRecord]]]:
    """(size, setting) -> recipe -> runs; settings matched on what varies within a recipe, recipes
    in the order they first appear (the sweep's order), sizes ascending."""
    by_recipe = _by_recipe(records)
    keys = bk.varying(list(by_recipe.values()))
    out: dict[bk.Block, dict[str, list[TrialRecord]]] = defaultdict(dict)
    for block, members in bk.split([r for side in by_recipe.values() for r in side], keys).items():
        for name in by_recipe:
            if chosen := [r for r in members if recipe_of(r) == name]:
                out[block][name] = chosen
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


def failures(reference: list[TrialRecord], other: list[TrialRecord]) -> dict[str, Any]:
    """The failure test of `suite compare`, with the power Fisher's test had to see a halving."""
    found = failure_test(reference, other)
    f1, n1 = sum(outcome(r) == "failed" for r in reference), len(reference)
    exact = found["name"] == "Fisher"
    found["power_to_detect_halving"] = (
        fisher_power(f1 / n1, f1 / n1 / 2, n1, len(other)) if f1 and exact else None
    )
    return found


def shift(a: list[TrialRecord], b: list[TrialRecord], seed: int = 0) -> dict[str, Any]:
    """Median shift B - A with its 95% interval: paired by seeds where an interval exists that way,
    else unpaired (Hodges-Lehmann for independent runs, the seed-unit mean difference else)."""
    pair = paired(a, b, seed)
    if pair is not None and (pair["shift"]["ci95"] is not None or not exchangeable(a)):
        return pair["shift"] | {"paired": True}
    if exchangeable(a) and exchangeable(b):
        return hodges_lehmann(finite_scores(a), finite_scores(b)) | {"paired": False}
    found = unpaired_units(a, b)
    return {k: found.get(k) for k in ("estimate", "ci95", "unit", "method", "note")} | {"paired": False}


def _row(name: str, side: list[dict[str, Any]], seed: int, resamples: int) -> dict[str, Any]:
    found = intervals(side, resamples=resamples, seed=seed)
    if len(by_setting(side)) == 1:  # an interval that covers below 93% at this shape says its range
        flag_coverage(found, side, layout(side).design)
    return {
        "recipe": name,
        "runs": len(side),
        "failed": sum(outcome(r) == "failed" for r in side),
        "failure_rate": found["failure_rate"],
        **{k: found[k] for k in ("median", "iqr", "std")},
        "hparams": side[0]["hparams"],
        **parameters(side),
    }


def parameters(side: list[TrialRecord]) -> dict[str, int | None]:
    """The trainable and total parameters of a recipe's runs (one model, one adapter: the same in
    every run); None for runs recorded before trials counted them."""
    counted = next((r for r in side if r.get("total_params")), {})
    return {k: counted.get(k) for k in ("trainable_params", "total_params")}


def _count(n: int) -> str:
    for unit, size in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if n >= size:
            return f"{n / size:.3g}{unit}"
    return str(n)


def trainable(row: dict[str, Any]) -> str:
    """A row's trainable parameters and their share of the model's, e.g. `147k (0.65%)`."""
    if row.get("total_params") is None:
        return "n/a"
    share = 100 * row["trainable_params"] / row["total_params"]
    return f"{_count(row['trainable_params'])} ({share:.3g}%)"


def recipe_table(
    records: list[TrialRecord],
    reference: str | None = None,
    seed: int = 0,
    resamples: int = 1000,
    size: str | None = None,
    setting: dict[str, str] | None = None,
    references: dict[str, str] | None = None,
) -> list[dict[str, Any]]:
    """One table per (size, setting): {block (label), size, setting, reference (the default: the
    first recipe), note, rows: [{recipe, reference (what this row is tested against: `reference`
    when given, else the recipe's declared one in `references` (the sweep's), else the first
    recipe), runs, failed, failure_rate, median, iqr, std (each {estimate, ci95, unit, method}),
    hparams, vs_reference (None on a reference's own row and where its reference has no runs):
    {failure_rate_diff, failures (a test of `suite compare`, with power_to_detect_halving),
    std_diff, spread (test), median_shift {estimate, ci95, unit, method, paired, note}}}]}.
    `size`, `setting`: pick blocks as `suite compare --size/--setting` does."""
    groups = recipe_groups(records)
    if not groups:
        raise SuiteError("the study has no recipes (a sweep with `recipes:`); compare two runs instead")
    names = list(_by_recipe(records))
    if reference is not None and reference not in names:
        raise SuiteError(f"--reference {reference!r}: no such recipe (recipes: {', '.join(names)})")
    declared = {k: v for k, v in (references or {}).items() if v in names}
    refs = {name: reference or declared.get(name, names[0]) for name in names}
    compared = bk.differing(list(_by_recipe(records).values())) | {"recipe": names}
    own = {
        b: {k: v for k, v in next(iter(g.values()))[0]["hparams"].items() if k not in compared}
        for b, g in groups.items()
    }
    return [
        _table(block, groups[block], refs, seed, resamples)
        for block in bk.select(list(groups), size, setting, own, compared)
    ]


def _table(
    block: bk.Block, by_recipe: dict[str, list[TrialRecord]], refs: dict[str, str], seed: int, resamples: int
) -> dict:
    rows, missing = [], []
    for name, side in by_recipe.items():
        ref = refs[name]
        base = by_recipe.get(ref)
        row = {**_row(name, side, seed, resamples), "reference": ref}
        row["vs_reference"] = None if name == ref or base is None else _versus(base, side, row, seed)
        if base is None and ref not in missing:
            missing.append(ref)
        rows.append(row)
    return {
        "block": bk.label(block),
        "size": json.loads(block[0]),
        "setting": json.loads(block[1]),
        "reference": next(iter(refs.values())),
        "note": f"no {', '.join(missing)} runs here: no tests against it" if missing else None,
        "rows": rows,
    }


def _versus(base: list[TrialRecord], side: list[TrialRecord], row: dict, seed: int) -> dict:
    xa = finite_scores(base)
    scored = xa.size >= 2 and finite_scores(side).size >= 2
    std_a = float(np.std(xa, ddof=1)) if xa.size >= 2 else None
    found = failures(base, side)
    return {
        "failure_rate_diff": row["failure_rate"]["estimate"]
        - sum(outcome(r) == "failed" for r in base) / len(base),
        "failures": found,
        "std_diff": row["std"]["estimate"] - std_a if scored and row["std"]["estimate"] is not None else None,
        "spread": spread_test(base, side, seed) if scored else None,
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


def _flagged(row: dict[str, Any], name: str, notes: _Notes) -> str:
    """A row's interval, with a footnote where it covers below 93% at the row's shape (coverage.py)."""
    block = row[name]
    low = (block or {}).get("coverage")
    if not low or block.get("ci95") is None:
        return _with_ci(block)
    note = {
        "name": f"{name.upper() if name == 'iqr' else name} interval",
        "note": f"covers {low['measured']} at {low['shape']} (docs/statistics.md, Coverage by shape)",
    }
    return f"{_with_ci(block)} {notes.mark(note, row['recipe'])}"


class _Notes:
    """Footnotes: a test's note once per table, marked [k] in the rows it applies to."""

    def __init__(self) -> None:
        self.notes: dict[str, list[str]] = {}

    def mark(self, test: dict[str, Any] | None, recipe: str) -> str:
        if test is None:
            return "n/a"
        if test.get("decidable"):
            return text(test, ".2g")
        note = f"{test['name']}: {test['note']}"
        self.notes.setdefault(note, []).append(recipe)
        return f"[{list(self.notes).index(note) + 1}]"

    def lines(self) -> list[str]:
        return [f"  [{k}] {note} ({', '.join(who)})" for k, (note, who) in enumerate(self.notes.items(), 1)]


def _cells(r: dict[str, Any], notes: _Notes) -> str:
    v = r["vs_reference"]
    std_diff = "n/a" if v["std_diff"] is None else f"{100 * v['std_diff']:+.1f}"
    moved = v["median_shift"] or {}
    where = moved.get("note") and notes.mark({"name": "median shift", "note": moved["note"]}, r["recipe"])
    interval = (_with_ci(moved) if moved else "n/a") + (" paired" if moved.get("paired") else "")
    return (
        f"vs {r['reference']}: {v['failure_rate_diff']:+.0%} ({notes.mark(v['failures'], r['recipe'])})  "
        f"{std_diff} ({notes.mark(v['spread'], r['recipe'])})  {interval}" + (f" {where}" if where else "")
    )


def format_recipe_table(tables: list[dict[str, Any]], metric: str) -> str:
    """One table per (size, setting): a row per recipe, its tests against the reference (p, or a
    footnote saying why there is none); the trainable parameters where the runs counted them."""
    lines = []
    for t in tables:
        rows, notes = t["rows"], _Notes()
        width = max(len(r["recipe"]) for r in rows)
        counted = any(r.get("total_params") is not None for r in rows)
        lines += [
            f"recipes at {t['block']}: {metric} x100, dev; failed runs scored; [95% intervals across "
            f"seeds: {rows[0]['median']['unit']}]; each row against its reference (default {t['reference']})",
            f"{'recipe':{width}s} {'n':>3s}  "
            + (f"{'trainable':16s} " if counted else "")
            + f"{'failed [95%]':20s} {'median':20s} {'IQR':20s} "
            f"{'std':20s} | vs reference: failed diff (Fisher)  std diff (Brown-Forsythe)  "
            "median shift [95%]",
        ]
        for r in rows:
            cells = (
                f"{r['recipe']:{width}s} {r['runs']:3d}  "
                + (f"{trainable(r):16s} " if counted else "")
                + f"{_with_ci(r['failure_rate'], True):20s} "
                + " ".join(f"{_flagged(r, name, notes):20s}" for name in ("median", "iqr", "std"))
                + " | "
            )
            lines.append(
                cells + ("(reference)" if r["recipe"] == r["reference"] else f"vs {r['reference']}: n/a")
                if r["vs_reference"] is None
                else cells + _cells(r, notes)
            )
        lines += notes.lines()
        if t["note"]:
            lines.append(f"  {t['note']}")
        halving = [
            r["vs_reference"]["failures"]["power_to_detect_halving"] for r in rows if r["vs_reference"]
        ]
        halving = [h for h in halving if h is not None]
        if halving:
            lines.append(
                f"  power of these Fisher tests to detect a recipe that halves its reference's failure rate "
                f"(p < {ALPHA}): {min(halving):.0%}"
                + (f" to {max(halving):.0%}" if max(halving) - min(halving) >= 0.005 else "")
            )
    return "\n".join(lines)
