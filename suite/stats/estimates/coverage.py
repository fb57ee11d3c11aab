"""Where an interval of one entry is known to cover less than 93% at nominal 95%: flagged with the
range of its coverage over processes whose runs fail 0, 25 and 40% of the time, 4.4 SD below the
rest, at the shape the entry shows (docs/statistics.md, Coverage by shape). The figures are the
committed table `coverage_table.json`, written by `python -m benchmarks.coverage_table`, which the
docs' table and tests/test_coverage_table.py read too.

The shape is what an entry shows whether or not its runs drew a failure: its number of runs (read
at the nearest of 3, 5 and 10; more than 10: at 10) or a crossed grid (read as 3 x 3). The range is
over processes, never one process's average: a rule that reads only the runs cannot tell an entry
that drew no failure from one that cannot fail (at N = 3, no failure is consistent with a rate of
0-71%). Where the failure rule has a baseline the mean and std are stated so that they cover for
any failure rate (failed_runs.py); plain scores, with no failure rule, get the unwidened mean and
std, and their range (`without a failure rule`).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from suite.stats.estimates.failed_runs import failed_values
from suite.study.records import TrialRecord, outcome

TABLE = Path(__file__).with_name("coverage_table.json")
FLAG_BELOW = 0.93  # a range reaching below this is stated with the interval
SOURCE = "docs/statistics.md#coverage-by-shape"


@functools.cache
def coverage_table() -> dict[str, Any]:
    """The committed table (benchmarks/coverage_table.py)."""
    return json.loads(TABLE.read_text())


def shape_of(records: Sequence[TrialRecord], design: str) -> str | None:
    """The measured shape nearest one setting's runs (`design`: "crossed" | "independent"), or
    None without a run."""
    ended = sum(outcome(r) in ("succeeded", "failed") for r in records)
    if not ended:
        return None
    if design == "crossed":
        return "3 x 3 grid"
    return f"{3 if ended <= 4 else 5 if ended <= 7 else 10} runs"


def measured(shape: str, group: str, statistic: str) -> tuple[float, float] | None:
    """The (lowest, highest) coverage over the processes of `statistic`'s interval in `group`
    ("intervals", "excluding_failed", "without a failure rule") at `shape`; None if not measured."""
    found = coverage_table()["shapes"].get(shape, {}).get(group, {}).get(statistic)
    return None if found is None else (found["range"][0], found["range"][1])


def _percent(value: float) -> str:
    return f"{100 * value:.1f}"


def flag_coverage(
    found: dict[str, dict[str, Any]], records: Sequence[TrialRecord], design: str, succeeded: bool = False
) -> None:
    """Add `coverage` {shape, measured, source} to each interval in `found` (`intervals`' answer
    over the runs of one setting; `succeeded`: over its succeeded runs) whose coverage at the
    entry's shape reaches below FLAG_BELOW in one of the processes: `measured` is the range over
    them, e.g. "13.0-52.4%"."""
    shape = shape_of(records, design)
    if shape is None:
        return
    plain = failed_values(records) is None
    table = coverage_table()
    for statistic, block in found.items():
        group = "excluding_failed" if succeeded else "intervals"
        if plain and not succeeded and statistic in ("mean", "std"):
            group = "without a failure rule"
        span = measured(shape, group, statistic)
        if span is None or block.get("ci95") is None or span[0] >= FLAG_BELOW:
            continue
        runs = "succeeded runs of " if succeeded else ""
        shares = (
            ", ".join(f"{100 * s:g}" for s in table["shares"][:-1]) + f" or {100 * table['shares'][-1]:g}"
        )
        block["coverage"] = {
            "shape": f"{runs}{shape}, {shares}% of runs failing {table['depth_sd']:g} SD below",
            "measured": f"{_percent(span[0])}-{_percent(span[1])}%",
            "source": SOURCE,
        }
