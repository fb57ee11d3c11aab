"""More than two studies at once: every pair's Multi-Bootstrap difference per shared (size,
setting) block, with Holm's correction over all the comparisons printed (a family of k studies
makes k (k - 1) / 2 pairs per block, and reading the smallest p of many is how false wins are made).
"""

from __future__ import annotations

from itertools import combinations
from typing import Any

from suite.errors import SuiteError
from suite.stats.compare.blocks import ahead
from suite.stats.compare.studies import compare
from suite.study.records import TrialRecord

ALPHA = 0.05


def compare_matrix(
    studies: list[tuple[str, list[TrialRecord]]],
    seed: int = 0,
    size: str | None = None,
    setting: dict | None = None,
    num_labels: int | None = None,
) -> dict[str, Any]:
    """{rows: [{a, b, block, estimate, interval, paired, p_two_sided, p_holm, differ, better (the
    name of the study ahead, by the metric's direction, where they differ)}], comparisons, method,
    skipped: [why a pair had no shared block]}; differences are B - A on the score scale.
    `num_labels`: the task's classes (`compare.class_count`)."""
    # Here, not at the top: statsmodels loads in ~0.8 s, and `suite compare A B` never needs it.
    from statsmodels.stats.multitest import multipletests

    rows, skipped = [], []
    for (name_a, a), (name_b, b) in combinations(studies, 2):
        try:
            found = compare(a, b, seed=seed, size=size, setting=setting, num_labels=num_labels)
        except SuiteError as err:
            skipped.append(f"{name_a} vs {name_b}: {err}")
            continue
        for block in found["blocks"]:
            mb = (block.get("verdicts") or {}).get("multibootstrap") or {}
            if "estimate" not in mb:
                why = mb.get("why", "fewer than 2 scored runs a side")
                skipped.append(f"{name_a} vs {name_b} ({block['block']}): {why}")
                continue
            rows.append(
                {
                    "a": name_a,
                    "b": name_b,
                    "block": block["block"],
                    "estimate": mb["estimate"],
                    "interval": mb["interval"],
                    "paired": mb["paired"],
                    "higher_is_better": found["higher_is_better"],
                    "p_two_sided": mb["p_two_sided"],  # 2 x the smaller tail, ties in both: equal arms give 1
                }
            )
    if rows:
        reject, adjusted, _, _ = multipletests([r["p_two_sided"] for r in rows], alpha=ALPHA, method="holm")
        for row, p, differ in zip(rows, adjusted, reject, strict=True):
            side = ahead(row["estimate"], row.pop("higher_is_better")) if differ else None
            row.update(p_holm=float(p), differ=bool(differ), better={"A": row["a"], "B": row["b"]}.get(side))
    method = "Multi-Bootstrap (seeds x examples) per pair and block; Holm over every comparison"
    return {"rows": rows, "comparisons": len(rows), "method": method, "skipped": skipped}


def format_matrix(result: dict[str, Any]) -> str:
    lines = [f"{result['comparisons']} comparisons ({result['method']}), B - A in points:"]
    for r in result["rows"]:
        lo, hi = r["interval"]
        verdict = "no difference shown" if not r["differ"] else f"differ, {r['better'] or 'neither'} ahead"
        lines.append(
            f"  {r['b']} - {r['a']} ({r['block']}, {'paired' if r['paired'] else 'unpaired'}): "
            f"{100 * r['estimate']:+.2f} [{100 * lo:+.2f}, {100 * hi:+.2f}], p {r['p_two_sided']:.3f}, "
            f"Holm {r['p_holm']:.3f}: {verdict}"
        )
    lines += [f"  skipped: {why}" for why in result["skipped"]]
    return "\n".join(lines)
