"""Sequential stopping (docs/guarantees.md, Stop when the answer is precise enough): add seeds in
rounds until the answer is precise enough (`suite run --until-halfwidth`) or decided
(`--until-decided`), within a budget of runs.

Looks: the runs per entry at which the rule looks, `looks(start, max_runs)`: x1.5 each round
(3, 5, 8, 12, 18, 27, 30). A half-width shrinks as 1/sqrt(n), so a round narrows it by ~18%
and overshoots the runs a target needs by at most 1.5x; looking after every run (27 looks
from 3 to 30) would multiply the chances to stop on an interval narrow by luck and split the
decided rule's alpha 27 ways, and a round is a batch of runs that trains in parallel.

Precise enough (`confirmed`): an entry's median half-width, the one the leaderboard shows
(`uncertainty.intervals` as `summary.summarize` calls it), <= the target, AND the half-width of
its first `earlier_look(n)` runs (>= 3), shrunk by sqrt(m / n), <= the target too. Why: stopping
on the current width alone selects the studies whose interval came out narrow by chance, and
those miss the median (naive rule: 91.1-93.0% coverage where the target needs 8-27 runs; with an
earlier sample of 2 runs allowed: 92.7-93.8%). Asking a nested earlier sample to agree, or the
runs added since, or requiring a tighter width, all end near 94%: the selection is inherent to
an order-statistic interval; the confirmation is the cheapest of them (10-30% more runs).

Decided: B - A by the interval `suite compare` gives (paired by seeds when both ran the same
seeds, else unpaired; `shift_interval`) at level 1 - alpha / K at each of the K planned looks
(Bonferroni split). Why not Pocock or O'Brien-Fleming: their boundaries assume normal statistics
with a known correlation between looks, while these intervals are exact rank intervals (discrete,
and none exists at 3 runs) or t on a few seed units; the union bound keeps the type-I error
<= alpha for any dependence between looks, score distribution and design. The cost is small:
Pocock's normal-theory z for these 7 looks is 2.52 (1.19% a look), Bonferroni's 2.69 (0.71%).

Measured (tests/test_sequential.py: numpy simulations of the module's own code, 3000 studies a
case, Monte-Carlo SE 0.4%; start n = 3, budget 30; scores in points, sd of the runs):
- coverage of the final median interval (nominal 95%) against the true median, and mean runs:
  normal sd 2 / target 1: 93.7%, 26.8 runs (naive rule 91.3%, 24.0); sd 1 / target 1: 94.6%,
  13.4; sd 3 / target 2: 93.7%, 21.3; sd 0.5 / target 2: 97.4%, 5.2 (never stops before 5);
  lognormal(0, 0.5) mirrored (left tail, skewness -1.75) sd 2 / target 1: 94.0%, 23.9; sd 3 /
  target 2: 94.3%, 17.9. Record-level (`precise_enough`, 200 studies): 92.0%, 23.9 runs.
- type-I error over 7 looks, equal arms: unpaired (skewed) 2.4%, paired 2.2%; a 95% interval at
  every look: 15.3% and 13.3%.
- power, shift of 2 sd (paired: 2 sd of the difference): 100% decided before the budget, median
  8 runs per arm; shift of 1 sd: 94% (unpaired) and 99% (paired) before the budget, median 12.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
from scipy import stats

from suite.stats.compare.blocks import ahead
from suite.stats.decide import (
    differences,
    moses_interval,
    pair_up,
    unit_grid,
    unit_t,
    walsh_interval,
    welch_t,
)
from suite.stats.design import exchangeable
from suite.stats.estimates import median_interval
from suite.study.records import TrialRecord, finite_scores, runs, score

ALPHA = 0.05
GROWTH = 1.5  # runs per entry grow x1.5 a look: the half-width shrinks ~18% a round
CONFIRMING = 3  # runs an earlier sample needs to confirm a width: 2 runs' interval is one distance
POINTS = 100  # targets and verdicts are in the metric's points (x100), as the CLI and tables


def next_look(n: int, max_runs: int) -> int | None:
    """The look after n runs per entry: x1.5 (at least one more run), capped at the budget;
    None once the budget is spent."""
    if n >= max_runs:
        return None
    return min(max(n + 1, math.ceil(GROWTH * n)), max_runs)


def looks(start: int, max_runs: int) -> list[int]:
    """Runs per entry at each look: from the study's current n up to the budget, e.g. 3, 5, 8, 12,
    18, 27, 30. `next_look` of any look is the following one, so a resumed study stays on it."""
    out = [start]
    while (n := next_look(out[-1], max_runs)) is not None:
        out.append(n)
    return out


# --- precise enough ----------------------------------------------------------------------------


def halfwidth(records: Sequence[TrialRecord], resamples: int = 2000, seed: int = 0) -> float | None:
    """Half-width of the median's 95% interval of ONE entry's runs, on the score's scale: the
    interval the leaderboard shows (`summarize`: errored and pruned trials are not runs, failed
    runs count as scored). None when there is no interval (under 2 runs, or few runs all alike)."""
    ci = median_interval(runs(records), resamples, seed)["ci95"]
    return None if ci is None else (ci[1] - ci[0]) / 2


def earlier_look(n: int) -> int:
    """The runs an entry had one round before n (the look `next_look` grew to n from), which
    confirm that n is precise: 5 -> 3, 8 -> 5, ..., 27 -> 18 (30 -> 20 past the budget's cap)."""
    return math.floor(n / GROWTH)


def confirmed(
    width: np.ndarray | float | None, earlier: np.ndarray | float | None, n: int, target: float
) -> np.ndarray:
    """The stopping rule, vectorised (half-widths on the score's scale, NaN or None: no interval;
    `target` in points): the half-width at n runs is <= the target AND the half-width of the
    entry's first `earlier_look(n)` runs (at least CONFIRMING of them), shrunk by sqrt(m / n) as a
    half-width shrinks with the runs, predicted it would be. Why both: the current width alone
    stops studies whose interval came out narrow by chance, and those intervals miss (91-93%
    coverage, module docstring); a narrow interval must agree with an earlier nested sample."""
    now, before = (np.asarray(np.nan if w is None else w, dtype=float) for w in (width, earlier))
    bound = target / POINTS
    with np.errstate(invalid="ignore"):
        agree = before * _shrink(n) <= bound if earlier_look(n) >= CONFIRMING else np.zeros_like(before, bool)
        return (now <= bound) & agree


def _shrink(n: int) -> float:  # a half-width of earlier_look(n) runs, scaled to n runs
    return math.sqrt(earlier_look(n) / n) if n > 0 else 0.0


def precise_enough(
    groups: Sequence[Sequence[TrialRecord]],
    target: float,
    max_runs: int = 30,
    resamples: int = 2000,
    seed: int = 0,
) -> dict[str, Any]:
    """Whether every entry (group of one setting's runs, in the order they ran) is precise
    enough: `confirmed` at `target` points (x100 scale).

    {precise, stop (precise or budget spent), budget_spent, target (points), n (runs per entry),
    halfwidths (points, the leaderboard's; None: no interval yet), confirming (points: the
    earlier runs' half-width shrunk to n), not_yet (indices of entries not precise yet), widest
    (points, the widest half-width among them), next_n (the next look after the largest n among
    them; None when stopping), verdict}. The coverage in the module docstring is for each entry
    stopping on its own; `suite run --until-halfwidth` grows every entry together, so an entry
    precise earlier gets more runs (its interval only narrows)."""
    kept = [runs(g) for g in groups]
    n = [len(g) for g in kept]
    widths = [halfwidth(g, resamples, seed) for g in kept]
    before = [halfwidth(g[: earlier_look(len(g))], resamples, seed) for g in kept]
    ok = [bool(confirmed(w, b, k, target)) for w, b, k in zip(widths, before, n, strict=True)]
    points = [None if w is None else POINTS * w for w in widths]
    shrunk = [None if b is None else POINTS * b * _shrink(k) for b, k in zip(before, n, strict=True)]
    not_yet = [i for i, good in enumerate(ok) if not good]
    known = [points[i] for i in not_yet if points[i] is not None]
    spent = bool(not_yet) and all(n[i] >= max_runs for i in not_yet)
    precise = not not_yet
    out: dict[str, Any] = {
        "precise": precise,
        "stop": precise or spent,
        "budget_spent": spent,
        "target": target,
        "n": n,
        "halfwidths": points,
        "confirming": shrunk,
        "not_yet": not_yet,
        "widest": max(known) if known else None,
        "next_n": None if precise or spent else next_look(max(n[i] for i in not_yet), max_runs),
    }
    return out | {"verdict": verdict(out)}


# --- decided -----------------------------------------------------------------------------------


def look_alpha(n_looks: int, alpha: float = ALPHA) -> float:
    """The two-sided level of each look's interval: alpha split evenly over the planned looks
    (Bonferroni; see the module docstring)."""
    return alpha / max(n_looks, 1)


def _or_nan(
    found: tuple[np.ndarray, np.ndarray | None], lead: tuple[int, ...]
) -> tuple[np.ndarray, np.ndarray]:
    """An (estimate, interval) of `exact.moses_interval` or `exact.walsh_interval` with the interval
    as NaN (lead..., 2) where these runs allow none at this level, so that T studies stack."""
    estimate, ci = found
    return estimate, np.full((*lead, 2), np.nan) if ci is None else ci


def stacked_shift(
    xa: np.ndarray, xb: np.ndarray, alpha: float, paired: bool
) -> tuple[np.ndarray, np.ndarray, bool]:
    """`shift_interval` of T studies of independent runs at once, arms (T, n) (paired: run i of
    both arms shares its seeds): (estimates (T,), intervals (T, 2), NaN: none; whether paired).
    Paired where the signed-rank interval exists at these pairs, else Moses on the runs."""
    lead = xa.shape[:-1]
    if paired:
        estimate, ci = _or_nan(walsh_interval(xb - xa, alpha), lead)
        if np.isfinite(ci).all(-1).any():  # whether it exists depends on the pairs and alpha only
            return estimate, ci, True
    estimate, ci = _or_nan(moses_interval(xa, xb, alpha), lead)
    return estimate, ci, False


def _t_ci(found: tuple[np.ndarray, ...] | None, alpha: float) -> tuple[float | None, list[float] | None]:
    """(estimate, interval) of a seed-unit t (`paired.unit_t` / `welch_t`) at level 1 - alpha."""
    if found is None:
        return None, None
    estimate, variance, df = (float(np.asarray(v).reshape(-1)[0]) for v in found)
    if not variance > 0:  # the values do not vary across seed units: no interval
        return estimate, None
    half = float(stats.t.ppf(1 - alpha / 2, df) * math.sqrt(variance))
    return estimate, [estimate - half, estimate + half]


def shift_interval(
    a: Sequence[TrialRecord], b: Sequence[TrialRecord], alpha: float = ALPHA
) -> dict[str, Any]:
    """B - A with its interval at level 1 - alpha, chosen as `recipes.shift` (what `suite compare`
    and the recipe table print) chooses at 95%: runs with the same seeds paired (independent pairs:
    paired Hodges-Lehmann, exact signed-rank interval; pairs sharing seeds on a grid or across
    subsample seeds: the mean difference, t on seed units), falling back to unpaired where the paired
    interval does not exist at these runs (Hodges-Lehmann, exact Moses interval; the seed-unit t
    of the difference in means where runs share seeds). {estimate, interval (None: none), paired,
    method} on the score's scale."""
    a, b = runs(a), runs(b)
    pairs = [(ra, rb) for ra, rb in pair_up(a, b) if np.isfinite(score(ra)) and np.isfinite(score(rb))]
    if len(pairs) >= 2:
        if not exchangeable([ra for ra, _ in pairs]):
            g, _ = unit_grid(differences(pairs))
            found = unit_t(g[None], g.ndim) if g.size >= 2 else None
            return _shift(*_t_ci(found, alpha), True, "mean difference, t on seed units, paired")
        d = np.array([score(rb) - score(ra) for ra, rb in pairs])
        estimate, ci = _or_nan(walsh_interval(d, alpha), ())
        if np.isfinite(ci[0]) or not (exchangeable(a) and exchangeable(b)):
            return _shift(float(estimate), _listed(ci), True, "paired Hodges-Lehmann, exact signed-rank")
    if exchangeable(a) and exchangeable(b):
        xa, xb = finite_scores(a), finite_scores(b)
        if min(xa.size, xb.size) < 1:
            return _shift(None, None, False, "Hodges-Lehmann, exact Moses")
        estimate, ci = _or_nan(moses_interval(xa, xb, alpha), ())
        return _shift(float(estimate), _listed(ci), False, "Hodges-Lehmann, exact Moses")
    (ga, _), (gb, _) = unit_grid(a), unit_grid(b)
    found = welch_t(ga[None], ga.ndim, gb[None], gb.ndim) if min(ga.size, gb.size) >= 2 else None
    return _shift(*_t_ci(found, alpha), False, "difference in means, t on seed units")


def _listed(ci: np.ndarray) -> list[float] | None:
    return [float(v) for v in ci] if np.isfinite(ci).all() else None


def _shift(estimate: float | None, ci: list[float] | None, paired: bool, method: str) -> dict[str, Any]:
    return {"estimate": estimate, "interval": ci, "paired": paired, "method": method}


def decided(
    a: Sequence[TrialRecord],
    b: Sequence[TrialRecord],
    look: int,
    n_looks: int,
    alpha: float = ALPHA,
    higher_is_better: bool = True,
) -> dict[str, Any]:
    """Whether B - A is decided at look `look` (1-based) of `n_looks` planned (`len(looks(...))`,
    fixed before the first look): its interval (`shift_interval`) at level 1 - alpha / n_looks
    excludes 0. The type-I error over all looks is then <= alpha (Bonferroni: module docstring).
    `higher_is_better`: the metric's direction, which names the side ahead.

    {decided, better ("A" | "B", the side ahead once decided; else None), interval (points,
    B - A; None: none at this level and these runs), estimate (points), alpha_used (this look's
    two-sided level), look, n_looks, paired, method, stop (decided or the last look), reason,
    verdict}."""
    if not 1 <= look <= n_looks:
        raise ValueError(f"look {look} is not among the {n_looks} planned")
    level = look_alpha(n_looks, alpha)
    found = shift_interval(a, b, level)
    ci = found["interval"]
    done = ci is not None and (ci[0] > 0 or ci[1] < 0)
    if ci is None:
        reason = f"no {1 - level:.1%} interval with these runs"
    else:
        reason = f"the {1 - level:.1%} interval {'excludes' if done else 'contains'} 0"
    out: dict[str, Any] = {
        "decided": done,
        "better": ahead(ci[0] if ci[0] > 0 else ci[1], higher_is_better) if done else None,
        "interval": None if ci is None else [POINTS * v for v in ci],
        "estimate": None if found["estimate"] is None else POINTS * found["estimate"],
        "alpha_used": level,
        "look": look,
        "n_looks": n_looks,
        "paired": found["paired"],
        "method": f"{found['method']}, at {1 - level:.2%} ({alpha:g} split over {n_looks} looks)",
        "stop": done or look == n_looks,
        "reason": reason,
    }
    return out | {"verdict": verdict(out)}


# --- verdicts ----------------------------------------------------------------------------------


def _n_text(n: Sequence[int]) -> str:
    if not n:
        return "n=0"
    return f"n={n[0]}" if min(n) == max(n) else f"n={min(n)}-{max(n)}"


def verdict(result: dict[str, Any]) -> str:
    """One line for a `precise_enough` or `decided` result."""
    if "decided" in result:
        ci = result["interval"]
        shown = f"B - A in [{ci[0]:.2f}, {ci[1]:.2f}] points" if ci else result["reason"]
        where = f"look {result['look']} of {result['n_looks']}"
        if result["decided"]:
            return f"decided at {where}: {shown}, {result['better']} ahead"
        if result["stop"]:
            return f"budget spent: not decided at {where}: {shown}"
        return f"not decided at {where}: {shown}; continue"
    target, n = result["target"], result["n"]
    if result["precise"]:
        return f"stopped: every entry's median half-width <= {target:g} points at {_n_text(n)}"
    not_yet = result["not_yet"]
    widths = [result["halfwidths"][i] for i in not_yet]
    parts = [f"widest {result['widest']:.1f}"] if result["widest"] is not None else []
    if missing := sum(w is None for w in widths):
        parts.append(f"{missing} with no interval yet")
    if unconfirmed := sum(w is not None and w <= target for w in widths):
        parts.append(f"{unconfirmed} within it but not confirmed by its earlier runs")
    entries = f"{len(not_yet)} entr{'y' if len(not_yet) == 1 else 'ies'}"
    state = f"{entries} not yet within {target:g} points at {_n_text(n)} ({'; '.join(parts)})"
    if result["budget_spent"]:
        return f"budget spent: {state}"
    return f"continue: {state}; next n={result['next_n']}"
