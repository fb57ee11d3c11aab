"""Almost Stochastic Order (del Barrio et al. 2018; Dror, Shlomov and Reichart, ACL 2019), as the
`deepsig` package computes it (Ulmer, Hardmeier and Frellsen 2022, "deep-significance", v1.2.8).

The violation ratio of A over B: of the squared difference between the two quantile functions
(W2^2 = integral over t of (F_B^-1(t) - F_A^-1(t))^2), the share where A is worse than B (F_A^-1(t) <
F_B^-1(t)). epsilon_min: its upper confidence bound, from a bootstrap of the ratio. A almost
stochastically dominates B when epsilon_min < tau (tau = 0.2, Ulmer et al.'s recommendation): at
most a fifth of the quantile mass says A is worse. 0 = A is better at every quantile, 1/2 = the gap
splits evenly, 1 = B is better at every quantile.

As deepsig's `aso` computes it: the quantile function of n scores at t is the ceil(n t)-th smallest
score; the integral is a sum over t = dt, 2 dt, ..., < 1 with dt = 0.005 (199 points); the ratio is
1/2 when the two quantile functions coincide. Bootstrap: `nboot` = 1000 replicates (deepsig's
num_bootstrap_iterations), each drawing len(A) scores from A's quantile function and len(B) from
B's (a plain resample of each arm). deepsig 1.2.8 documents its `num_samples` as ignored; it is not
kept here (Dror et al.'s original code drew 1000 scores per replicate whatever the number of runs,
and scaled by sqrt(1000 x 1000 / 2000): a bound far narrower than the runs support).
sigma_hat = std over the replicates of sqrt(nm / (n + m)) (ratio* - ratio), and epsilon_min =
ratio + sigma_hat / sqrt(nm / (n + m)) * z_confidence, clipped to [0, 1]. Both directions come from
one bootstrap: the ratio of B over A is 1 - the ratio of A over B, with the same sigma_hat.

Why hand-written, not deepsig: (a) its multiple-comparison adjustment sets the confidence to
c + (1 - c) / k, right only for k = 1 (four models, six comparisons: 0.958 where Bonferroni needs
1 - 0.05 / 6 = 0.992); here `bonferroni_confidence` gives 1 - alpha / k; (b) its
`bonferroni_correction` returns the corrected values in the wrong order, and is not used; (c) it pulls
in joblib, dill, psutil, pandas and tqdm at run time for a few array operations; (d) its ratio leaves
the first grid point (t = dt) out of the violation integral but not out of W2^2, so the two
directions do not add up to 1; here both integrals run over the same points (the difference is at
most one grid point's share). Cross-checked against deepsig's `aso` on fixtures (tests/test_aso.py).

A lower-is-better metric's scores are negated first, so "worse" is always the metric's worse.
Runs are treated as independent draws of each arm's score distribution; runs that share seeds
(a crossed grid, several subsample seeds) are not resampled by their design here.

Measured (tests/test_aso.py; identical normal arms, 2000 studies): under the violation ratio's own
randomness (its share of the gap stays random at any n; 1/2 only on average), "A dominates B" is
called in 7.1% of studies at 4 runs per arm, 5.6% at 5, 5.1% at 6, 4.3% at 10, 3.2% at 20; either
way, as `aso` reports, 14% at 4, 9.7% at 6, 7.0% at 10, 6.6% at 20, 4.5% at 50. Hence no verdict
below MIN_RUNS = 6 runs per arm.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
from scipy import stats

from suite.stats.decide import oriented
from suite.study.records import TrialRecord, finite_scores

TAU = 0.2
CONFIDENCE = 0.95
NBOOT = 1000
_CELLS = 4_000_000  # resampled scores a chunk of replicates holds (`_replicate_ratios`)
DT = 0.005
A_BETTER = "A almost stochastically dominates B"
B_BETTER = "B almost stochastically dominates A"
NEITHER = "not: neither almost stochastically dominates the other"
MIN_RUNS = 6  # identical arms: "A dominates B" in 7.1% at 4 runs, 5.6% at 5, 5.1% at 6 (tests/test_aso.py)


def bonferroni_confidence(comparisons: int = 1, alpha: float = 1 - CONFIDENCE) -> float:
    """The confidence of each of `comparisons` tests so that all hold together at 1 - alpha
    (Bonferroni: 1 - alpha / k). Four models compared pairwise: 6 comparisons, 0.9917."""
    if comparisons < 1:
        raise ValueError(f"comparisons must be at least 1, got {comparisons}")
    return 1 - alpha / comparisons


def pairwise_comparisons(models: int) -> int:
    """Comparisons among `models` compared pairwise (each pair once: its two directions are one
    decision, since epsilon_min(A, B) + epsilon_min(B, A) >= 1)."""
    return models * (models - 1) // 2


def _steps(n: int, m: int, dt: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The grid t = dt, 2 dt, ..., < 1 grouped by the order statistics it reads: (index into A's
    sorted scores, index into B's, weight = dt x the grid points there). The empirical quantile
    function at t is the ceil(n t)-th smallest score, so the sum over the grid is a sum over at most
    n + m steps: the same points, counted once per step."""
    t = np.arange(dt, 1, dt)
    at = np.stack([np.clip(np.ceil(k * t).astype(int) - 1, 0, k - 1) for k in (n, m)], axis=1)
    steps, counts = np.unique(at, axis=0, return_counts=True)
    return steps[:, 0], steps[:, 1], counts * dt


def violation_ratio(xa: np.ndarray, xb: np.ndarray, dt: float = DT) -> np.ndarray:
    """Share of W2^2 where A's quantile function lies below B's (A worse); 1/2 where they coincide.
    Vectorised over leading axes."""
    ia, ib, w = _steps(xa.shape[-1], xb.shape[-1], dt)
    f, g = np.sort(xa, axis=-1)[..., ia], np.sort(xb, axis=-1)[..., ib]
    diff2 = (g - f) ** 2 * w
    total = diff2.sum(-1)
    violated = np.where(f < g, diff2, 0.0).sum(-1)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(total > 0, violated / np.where(total > 0, total, 1.0), 0.5)


def bootstrap(
    xa: np.ndarray,
    xb: np.ndarray,
    nboot: int = NBOOT,
    rng: np.random.Generator | None = None,
    dt: float = DT,
    draws: tuple[np.ndarray, np.ndarray] | None = None,
) -> tuple[np.ndarray, np.ndarray, float]:
    """(ratio, sigma_hat, scale): the violation ratio, the std of its bootstrap deviations scaled by
    sqrt(nm / (n + m)), and that scale. Vectorised over leading axes. `draws`: (..., nboot, n) and
    (..., nboot, m) indices into each arm's sorted scores (to replay another implementation's
    bootstrap); else each arm is resampled with replacement from `rng`."""
    n, m = xa.shape[-1], xb.shape[-1]
    if draws is None:
        rng = np.random.default_rng(0) if rng is None else rng
        draws = (
            rng.integers(0, n, (*xa.shape[:-1], nboot, n)),
            rng.integers(0, m, (*xb.shape[:-1], nboot, m)),
        )
    ratio = violation_ratio(xa, xb, dt)
    scale = float(np.sqrt(n * m / (n + m)))
    sigma = np.std(scale * (_replicate_ratios(xa, xb, draws, dt) - ratio[..., None]), axis=-1)
    return ratio, sigma, scale


def _replicate_ratios(
    xa: np.ndarray, xb: np.ndarray, draws: tuple[np.ndarray, np.ndarray], dt: float
) -> np.ndarray:
    """The violation ratio of each replicate the draws index, _CELLS resampled steps at a time:
    each replicate's ratio is its own row's, and 1,000 replicates of 10,000 runs a side, at once,
    held five copies of 160 MB (a compare's peak)."""
    ordered = [np.sort(x, axis=-1)[..., None, :] for x in (xa, xb)]
    replicates = draws[0].shape[-2]
    per_replicate = sum(math.prod(d.shape[:-2]) * d.shape[-1] for d in draws)  # its steps' cells too
    step = max(1, _CELLS // max(1, per_replicate))
    return np.concatenate(
        [
            violation_ratio(
                *(
                    np.take_along_axis(o, d[..., at : at + step, :], axis=-1)
                    for o, d in zip(ordered, draws, strict=True)
                ),
                dt,
            )
            for at in range(0, max(replicates, 1), step)
        ],
        axis=-1,
    )


def bound(ratio: np.ndarray, sigma: np.ndarray, scale: float, confidence: float = CONFIDENCE) -> np.ndarray:
    """epsilon_min: ratio - sigma_hat / scale * z_{1 - confidence} (z < 0), clipped to [0, 1]."""
    return np.clip(ratio - sigma / scale * stats.norm.ppf(1 - confidence), 0, 1)


def epsilon_min(
    a_scores: Sequence[float] | np.ndarray,
    b_scores: Sequence[float] | np.ndarray,
    confidence: float = CONFIDENCE,
    nboot: int = NBOOT,
    seed: int = 0,
    dt: float = DT,
    draws: tuple[np.ndarray, np.ndarray] | None = None,
) -> float:
    """Upper `confidence` bound on the violation ratio of A over B (lower = A better). `draws`: see
    `bootstrap`."""
    xa, xb = (
        finite_scores(np.asarray(a_scores, dtype=float)),
        finite_scores(np.asarray(b_scores, dtype=float)),
    )
    if not (xa.size and xb.size):
        raise ValueError("epsilon_min needs scores on both sides")
    return float(bound(*bootstrap(xa, xb, nboot, np.random.default_rng(seed), dt, draws), confidence))


def aso(
    a: Sequence[TrialRecord] | np.ndarray,
    b: Sequence[TrialRecord] | np.ndarray,
    tau: float = TAU,
    confidence: float = CONFIDENCE,
    comparisons: int = 1,
    nboot: int = NBOOT,
    seed: int = 0,
    dt: float = DT,
    higher_is_better: bool = True,
) -> dict[str, Any]:
    """ASO both ways from one bootstrap. `a`, `b`: records (their finite scores) or score arrays;
    `comparisons`: tests made together, the confidence of each raised to Bonferroni's 1 - (1 -
    confidence) / comparisons; `higher_is_better`: the metric's direction (a side is worse where its
    quantiles are lower, or higher where lower is better). Shape: {epsilon_min (A over B),
    epsilon_min_b_over_a, violation_ratio, tau, confidence (as used), comparisons, verdict, better
    ("A" | "B" | None), decidable, n_a, n_b, higher_is_better, method, note}."""
    if not 0 < tau <= 0.5:
        raise ValueError(f"tau must lie in (0, 0.5], got {tau}")
    xa, xb = finite_scores(oriented(a, higher_is_better)), finite_scores(oriented(b, higher_is_better))
    used = bonferroni_confidence(comparisons, 1 - confidence)
    out: dict[str, Any] = {
        "tau": tau,
        "confidence": used,
        "comparisons": comparisons,
        "n_a": int(xa.size),
        "n_b": int(xb.size),
        "higher_is_better": higher_is_better,
        "method": f"ASO violation ratio, {nboot} bootstrap replicates, normal upper bound",
    }
    if min(xa.size, xb.size) < MIN_RUNS:
        note = f"cannot decide with {min(xa.size, xb.size)} runs per arm; needs at least {MIN_RUNS}"
        empty = dict.fromkeys(("epsilon_min", "epsilon_min_b_over_a", "violation_ratio", "better"))
        return out | empty | {"verdict": note, "decidable": False, "note": note}
    ratio, sigma, scale = (float(v) for v in bootstrap(xa, xb, nboot, np.random.default_rng(seed), dt))
    eps_ab, eps_ba = float(bound(ratio, sigma, scale, used)), float(bound(1 - ratio, sigma, scale, used))
    if eps_ab < tau:
        verdict, better = A_BETTER, "A"
    elif eps_ba < tau:
        verdict, better = B_BETTER, "B"
    else:
        verdict, better = NEITHER, None
    note = (
        f"epsilon_min: upper {used:.4g} bound on the share of the quantile gap where that side is worse; "
        f"under {tau:g}, it is better at all but a small share of the quantiles"
    )
    if comparisons > 1:
        note += f" (Bonferroni over {comparisons} comparisons)"
    return out | {
        "epsilon_min": eps_ab,
        "epsilon_min_b_over_a": eps_ba,
        "violation_ratio": ratio,
        "verdict": verdict,
        "better": better,
        "decidable": True,
        "note": note,
    }


def describe(result: dict[str, Any]) -> str:
    """One line: `ASO: epsilon_min(A, B) = 0.08, (B, A) = 0.97 (tau 0.2): A almost ...`."""
    if not result["decidable"]:
        return f"ASO: {result['verdict']}"
    return (
        f"ASO: epsilon_min(A over B) = {result['epsilon_min']:.2f}, (B over A) = "
        f"{result['epsilon_min_b_over_a']:.2f} (tau {result['tau']:g}): {result['verdict']}"
    )
