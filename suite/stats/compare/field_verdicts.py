"""The field's verdicts on B against A within one (size, setting) block, beside `compare`'s tests:

- the Multi-Bootstrap difference (Sellam et al. 2022): seeds and evaluation examples resampled
  together, paired when both sides ran the same seeds (suite/stats/compare/multi_bootstrap.py);
- the probability that one outperforms the other with its interval, the three-way verdict and the
  runs per arm Noether's formula asks for (Bouthillier et al. 2021; suite/stats/compare/outperform.py);
- almost stochastic order's epsilon_min and its verdict at tau 0.2 (Dror et al. 2019; Ulmer et al.
  2022; suite/stats/compare/stochastic_order.py).

Each says when the runs are too few to decide, and how many it needs.
"""

from __future__ import annotations

from typing import Any

from suite.stats.compare.multi_bootstrap import multibootstrap
from suite.stats.compare.outperform import describe as describe_outperform
from suite.stats.compare.outperform import probability_of_outperforming
from suite.stats.compare.stochastic_order import aso
from suite.stats.compare.stochastic_order import describe as describe_aso
from suite.stats.decide import pair_up
from suite.study.records import TrialRecord, runs

# The fewest seed units a resampled difference needs before its interval means anything: the
# suite's exact tests decide from 6 seed pairs (2 / 2^6 = 0.031) or 4 runs per arm (2 / C(8, 4)).
MIN_PAIRS, MIN_RUNS = 6, 4


def verdicts(
    a: list[TrialRecord],
    b: list[TrialRecord],
    seed: int = 0,
    higher_is_better: bool = True,
    num_labels: int | None = None,
) -> dict[str, Any]:
    """{multibootstrap, outperform, aso} of B against A (each {why} when it cannot run or decide),
    and higher_is_better. `higher_is_better`: the metric's direction (which side each names as
    ahead); `num_labels`: the task's classes, which the Multi-Bootstrap's F1 and Matthews need
    (None: regression, or no classes to count)."""
    hib = higher_is_better
    return {
        "multibootstrap": _too_few(a, b)
        or _guarded(lambda: multibootstrap(a, b, seed=seed, num_labels=num_labels, higher_is_better=hib)),
        "outperform": _guarded(lambda: probability_of_outperforming(a, b, seed=seed, higher_is_better=hib)),
        "aso": _guarded(lambda: aso(a, b, seed=seed, higher_is_better=hib)),
        "higher_is_better": hib,
    }


def _too_few(a: list[TrialRecord], b: list[TrialRecord]) -> dict[str, Any] | None:
    """Below the floor a bootstrap of 2 or 3 seed units gives a zero-width interval and p = 1/nboot.
    Paired (every run has a partner with the same seeds, as the Multi-Bootstrap pairs): pairs count."""
    ra, rb = runs(a), runs(b)
    pairs = len(pair_up(ra, rb))
    if pairs and pairs == len(ra) == len(rb):
        return (
            None
            if pairs >= MIN_PAIRS
            else {"why": f"cannot decide with {pairs} seed pairs; needs at least {MIN_PAIRS}"}
        )
    n = min(len(ra), len(rb))
    return (
        None if n >= MIN_RUNS else {"why": f"cannot decide with {n} runs per arm; needs at least {MIN_RUNS}"}
    )


def _guarded(compute: Any) -> dict[str, Any]:
    try:
        return compute()
    except ValueError as err:  # no scored runs on a side, or a metric without per-example outcomes
        return {"why": str(err)}


def verdict_lines(found: dict[str, Any]) -> list[str]:
    """One line per verdict (indented as `compare` prints its tests)."""
    mb, out, order = found["multibootstrap"], found["outperform"], found["aso"]
    higher = found.get("higher_is_better", True)
    ahead = "the side that is ahead" + ("" if higher else ", the lower score")
    lines = [f"  the field's verdicts (B - A; P and ASO name {ahead}):"]
    if "why" in mb:
        lines.append(f"    Multi-Bootstrap: {mb['why']}")
    else:
        lo, hi = mb["interval"]
        lines.append(
            f"    Multi-Bootstrap ({mb['units']}, {'paired' if mb['paired'] else 'unpaired'}): B - A "
            f"{100 * mb['estimate']:+.2f} [{100 * lo:+.2f}, {100 * hi:+.2f}], one-sided "
            f"p(B - A {'<=' if higher else '>='} 0) {mb['p_one_sided']:.3f}"
        )
    lines.append(f"    {'P(A > B): ' + out['why'] if 'why' in out else describe_outperform(out)}")
    lines.append(f"    {'ASO: ' + order['why'] if 'why' in order else describe_aso(order)}")
    return lines
