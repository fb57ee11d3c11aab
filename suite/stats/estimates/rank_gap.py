"""The exact rank test of a reported max of k runs, or a single run, against ours
(docs/statistics.md, Gap to reported numbers): a bootstrap cannot reach above our largest run, so
these use the exchangeability of runs; each says when it cannot reach p < 0.05 and the runs it
would need (suite.stats.decide)."""

from __future__ import annotations

from typing import Any

import numpy as np
from scipy import stats
from scipy.special import comb

from suite.stats.decide import runs_needed, verdict


def rank_p(x: np.ndarray, reported: float, k: int, eval_sd: float = 0.0) -> tuple[float, float]:
    """(P(T <= reported), P(T >= reported)) for T the max of k new runs exchangeable with ours:
    P(T below our (j+1)-th smallest) = C(j + k, k) / C(N + k, k). With eval_sd: ours were scored on
    an evaluation subsample, shifted together by e ~ N(0, eval_sd) from the full-set score the
    reported value has; the tail probabilities are averaged over e (exact for a step function)."""
    xs, big_n = np.sort(x), x.size
    j = np.arange(big_n + 1)
    total = comb(big_n + k, k)
    at_or_below = comb(j + k, k) / total  # reported in [x(j), x(j+1)): j of ours at or below it
    at_or_above = 1 - comb(j + k - 1, k) / total  # reported in (x(j), x(j+1)]
    if eval_sd <= 0:
        return float(at_or_below[(xs <= reported).sum()]), float(at_or_above[(xs < reported).sum()])
    edges = np.concatenate([[-np.inf], xs, [np.inf]])
    mass = np.diff(stats.norm.cdf((edges - reported) / eval_sd))
    return float(mass @ at_or_below), float(mass @ at_or_above)


def rank_min_p(big_n: int, k: int, direction: str) -> float:
    """Smallest two-sided p the rank test reaches with N runs: a reported value above all of ours
    2k / (N + k) (max of 5: N >= 195; single run: N >= 39); below all 2 / C(N + k, k)."""
    return min(1.0, 2 * k / (big_n + k) if direction == "above" else 2 / comb(big_n + k, k))


def rank_test(x: np.ndarray, reported: float, k: int, eval_sd: float) -> dict[str, Any]:
    p_le, p_ge = rank_p(x, reported, k, eval_sd)
    direction = "above" if p_ge <= p_le else "below"
    p = min(1.0, 2 * min(p_le, p_ge))
    min_p = rank_min_p(x.size, k, direction)
    needed = runs_needed(lambda n: rank_min_p(n, k, direction), x.size)
    decision = verdict(p, min_p, x.size, needed, "runs")
    what = "one run" if k == 1 else f"the max of {k} runs"
    noise = f", our scores shifted by N(0, {eval_sd:g}) eval error" if eval_sd > 0 else ""
    p_two_sided = decision.pop("p")
    return {
        **decision,
        "p_two_sided": p_two_sided,
        "percentile": float(100 * (p_le + 1 - p_ge) / 2),
        "direction": direction,
        "reference": f"{what} exchangeable with ours (exact rank test; ignores the seed design{noise})",
    }
