"""Where an interval of one entry is known to cover less than 95%: the study's own shape, flagged
with the coverage measured on that shape (docs/statistics.md, Coverage by shape; measured with
`python -m benchmarks.gap_collapse`, 1,000-2,000 simulated studies a cell, succeeded runs N(0, 1),
failed runs 4-5 SD below).

The rule uses only what a study shows: failed runs beside succeeded ones. A sample in which no
run failed says nothing of a collapse it did not draw, so it is not flagged (its intervals are the
normal-score ones). A figure is kept only where the measured coverage missed 95% by more than 2
points; the shapes are measured at 3, 5 and 10 runs and on 3 x 3 grids, and a study is read at
the nearest of them (more than 10 runs: at 10, which errs low).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from suite.study.records import TrialRecord, outcome

TWO_PEAKED = 0.45  # failed share from which the scores are the two-peaked shape (45-70% measured)
SOURCE = "docs/statistics.md#intervals-of-one-entry"

# (shape, statistic) -> the coverage of the nominal 95% interval measured on that shape.
MEASURED: dict[tuple[str, str], str] = {
    ("failed runs beside succeeded ones, 3 runs", "mean"): "90.8-94.1%",
    ("failed runs beside succeeded ones, 3 runs", "std"): "49.8-66.9%",
    ("failed runs beside succeeded ones, 5 runs", "mean"): "88.1-92.7%",
    ("failed runs beside succeeded ones, 5 runs", "std"): "85.9-88.7%",
    ("failed runs beside succeeded ones, 10 runs, under 25% failed", "mean"): "91.3-92.1%",
    ("failed runs beside succeeded ones, 10 runs, under 25% failed", "std"): "76.4-91.0%",
    ("failed runs beside succeeded ones, 10 runs", "std"): "76.4-91.0%",  # 25-44% failed: the mean holds
    ("failed init seeds beside succeeded ones, 3 x 3 grid", "mean"): "82.9-93.2%",
    ("two-peaked, 45-70% of runs failed", "std"): "73.5-88.9%",
    ("two-peaked, 45-70% of runs failed, 3 x 3 grid", "mean"): "88.5-96.2%",
    ("two-peaked, 45-70% of runs failed, 3 x 3 grid", "median"): "89.0-96.0%",
    ("two-peaked, 45-70% of runs failed, 3 x 3 grid", "std"): "92.6-96.2%",
}


def shape_of(records: Sequence[TrialRecord], design: str) -> str | None:
    """The measured shape one setting's runs show (`design`: "crossed" | "independent"), or None
    where none applies (no failed run, or no succeeded one)."""
    ended = [r for r in records if outcome(r) in ("succeeded", "failed")]
    failed = sum(outcome(r) == "failed" for r in ended)
    if not failed or failed == len(ended):
        return None
    grid = design == "crossed"
    if failed / len(ended) >= TWO_PEAKED:
        return "two-peaked, 45-70% of runs failed" + (", 3 x 3 grid" if grid else "")
    if grid:
        return "failed init seeds beside succeeded ones, 3 x 3 grid"
    nearest = 3 if len(ended) <= 4 else 5 if len(ended) <= 7 else 10
    few = ", under 25% failed" if nearest == 10 and failed / len(ended) < 0.25 else ""  # 30-40%: 95.6-96.0%
    return f"failed runs beside succeeded ones, {nearest} runs{few}"


def flag_coverage(found: dict[str, dict[str, Any]], records: Sequence[TrialRecord], design: str) -> None:
    """Add `coverage` {shape, measured, source} to each interval in `found` (`intervals`' answer
    over all runs of one setting) whose coverage on the study's shape was measured more than 2
    points below 95%."""
    shape = shape_of(records, design)
    for statistic, block in found.items():
        measured = MEASURED.get((shape or "", statistic))
        if measured is not None and block.get("ci95") is not None:
            block["coverage"] = {"shape": shape, "measured": measured, "source": SOURCE}
