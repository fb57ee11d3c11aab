"""A mean and a std of runs that can fail, stated so that they cover for any failure rate
(docs/statistics.md, Where runs can fail).

A run that fails scores at a known place: no better than the best constant prediction, the failure
rule's baseline b (`failed_values`: the hull of b and of our failed runs' scores). So the mean of
one run is (1 - p) mu_s + p v, and its variance (1 - p) sigma_s^2 + p sigma_f^2 + p (1 - p)
(mu_s - v)^2, with p the failure rate, mu_s and sigma_s the succeeded runs' mean and std, v and
sigma_f the failed runs' mean and std (v within the hull, sigma_f at most half its width). The
interval of each is its range over p's exact (Clopper-Pearson) 95% interval on the seed units,
the succeeded runs' 95% intervals and v in the hull: whatever p is, seen in our runs or not, it
lies in its interval as often as p and the succeeded runs' statistics lie in theirs. Why: runs
that fail 4.4 SD below (RTE) make a mixture that a sample without a failed run cannot show; the
interval of the pooled runs covered the mean 42% of the time in the entries that drew no failed
run (N = 5, 30% failing), while its average over a process's studies read 87-92%. The cost is
width: no failure among 3 runs still allows p up to 1 - 0.025^(1/3) = 0.71.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from scipy import stats

from suite.study.records import TrialRecord, outcome, score

ALPHA = 0.05


def failed_values(
    records: Sequence[TrialRecord], baseline: float | None = None
) -> tuple[float, float] | None:
    """Where a failed run scores, [low, high]: the hull of the failure rule's baseline (`baseline`,
    else the records' `baseline`) and of our failed runs' scores; None when none is known (plain
    scores)."""
    known = [float(baseline)] if baseline is not None else []
    known += [float(r["baseline"]) for r in records if isinstance(r.get("baseline"), int | float)]
    known += [score(r) for r in records if outcome(r) == "failed"]
    known = [v for v in known if math.isfinite(v)]
    return (min(known), max(known)) if known else None


def failure_bounds(failed: np.ndarray, scored: np.ndarray, units: float, alpha: float = ALPHA) -> np.ndarray:
    """(T, 2) exact (Clopper-Pearson) 1 - alpha intervals of T failure rates: `failed` of `scored`
    runs (T,), counted on `units` seed units (the seeds of the smallest seed axis: a 3 x 3 grid whose
    failures follow its init seeds holds 3 draws of the rate, not 9), k = units x failed / scored."""
    failed, scored = np.asarray(failed, dtype=float), np.asarray(scored, dtype=float)
    with np.errstate(all="ignore"):
        k = units * failed / np.maximum(scored, 1)
        low = np.where(k <= 0, 0.0, stats.beta.ppf(alpha / 2, k, units - k + 1))
        high = np.where(k >= units, 1.0, stats.beta.ppf(1 - alpha / 2, k + 1, units - k))
    return np.stack([np.nan_to_num(low, nan=0.0), np.nan_to_num(high, nan=1.0)], 1)


def widened_mean(share: np.ndarray, succeeded: np.ndarray, at: tuple[float, float]) -> np.ndarray:
    """(T, 2): the range of (1 - p) m + p v over p in `share` (T, 2), m in `succeeded` (T, 2: the
    succeeded runs' mean interval; NaN: none, then none here) and v in `at` (the failed runs'
    hull). Multilinear, so its ends are at the corners."""
    corners = [(1 - share[:, [i]]) * succeeded + share[:, [i]] * value for i in (0, 1) for value in at]
    both = np.concatenate(corners, 1)
    return np.stack([both.min(1), both.max(1)], 1)


def widened_std(
    share: np.ndarray, succeeded_mean: np.ndarray, succeeded_std: np.ndarray, at: tuple[float, float]
) -> np.ndarray:
    """(T, 2): the range of the std of one run, sqrt((1 - p) s^2 + p f^2 + p (1 - p) d^2), over p
    in `share`, s in the succeeded runs' std interval, d = m - v with m in their mean interval and v
    in the hull `at`, and the failed runs' own std f in [0, half the hull's width]. Concave in p:
    the least value is at an end of p's interval, the largest where the parabola peaks within it."""
    d_low, d_high = succeeded_mean[:, 0] - at[1], succeeded_mean[:, 1] - at[0]
    d2_low = np.where((d_low <= 0) & (d_high >= 0), 0.0, np.minimum(d_low**2, d_high**2))
    d2_high = np.maximum(d_low**2, d_high**2)
    f2 = ((at[1] - at[0]) / 2) ** 2
    s2_low, s2_high = succeeded_std[:, 0] ** 2, succeeded_std[:, 1] ** 2

    def variance(p: np.ndarray, s2: np.ndarray, f: float, d2: np.ndarray) -> np.ndarray:
        return (1 - p) * s2 + p * f + p * (1 - p) * d2

    low = np.minimum(*(variance(share[:, i], s2_low, 0.0, d2_low) for i in (0, 1)))
    with np.errstate(all="ignore"):
        peak = np.where(d2_high > 0, (f2 - s2_high + d2_high) / (2 * d2_high), share[:, 1])
    high = variance(np.clip(peak, share[:, 0], share[:, 1]), s2_high, f2, d2_high)
    return np.sqrt(np.maximum(np.stack([low, high], 1), 0.0))
