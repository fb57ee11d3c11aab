"""Whether a test can decide with the runs it has (small-N honesty).

A rank or exact test has a smallest attainable p at a given n: at 3 vs 3 runs Mann-Whitney's
two-sided p never goes below 0.1, so printing its p as if it could reject misleads. Every test
the suite prints goes through `verdict`: below the level it can reach, the output is "cannot
decide with n runs; needs at least m" and no p-value. Permutation tests take their smallest p
from the runs themselves (`exact.smallest_p`: tied runs, or medians of an even number of runs, put
several splits at the extreme); a t test on seed units is not bounded this way and is calibrated
by simulation instead (`paired`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from scipy import stats

ALPHA = 0.05
LIMIT = 10_000  # search bound for the runs needed


def verdict(p: float | None, min_p: float, runs: int, needed: int | None, unit: str = "runs per arm") -> dict:
    """{"decidable", "p" (None when not decidable), "min_p", "runs_needed", "note"} for one test.
    `min_p`: the smallest p the test can reach at these runs; `needed`: the fewest runs at which
    it can reach ALPHA (None: not within LIMIT, or not known)."""
    if min_p > ALPHA:
        need = (
            f"needs at least {needed}" if needed is not None else f"cannot reach p < {ALPHA} at any n tried"
        )
        return {
            "decidable": False,
            "p": None,
            "min_p": float(min_p),
            "runs_needed": needed,
            "note": f"cannot decide with {runs} {unit}; {need}",
        }
    return {
        "decidable": True,
        "p": None if p is None else float(p),
        "min_p": float(min_p),
        "runs_needed": None,
    }


def runs_needed(min_p_at: Callable[[int], float], start: int, alpha: float = ALPHA) -> int | None:
    """The fewest n >= start with min_p_at(n) <= alpha (min_p_at non-increasing in n)."""
    n = start
    while n <= LIMIT:
        if min_p_at(n) <= alpha:
            return n
        n += 1
    return None


def signed_rank_min_p(n: int) -> float:
    """Exact two-sided Wilcoxon signed-rank (and sign-flip) test on n pairs: all signs alike."""
    return min(1.0, 2.0 / 2.0**n)


def fisher_min_p(n1: int, n2: int, failed: int) -> float:
    """Fisher's exact test at these margins (n1 and n2 runs, `failed` failures in all): the p of the
    most extreme table, the failures all on one side or the other."""
    low, high = max(0, failed - n2), min(failed, n1)
    return min(
        float(stats.fisher_exact([[x, n1 - x], [failed - x, n2 - failed + x]]).pvalue) for x in (low, high)
    )


def fisher_runs_needed(n1: int, n2: int, failed: int) -> int | None:
    """The fewest runs per arm at which Fisher's test could reach ALPHA at the same failure share."""
    share = failed / (n1 + n2)
    if share in (0, 1):  # no failure (or nothing but failures): no table is extreme at any n
        return None
    return runs_needed(lambda n: fisher_min_p(n, n, round(share * 2 * n)), max(1, min(n1, n2)))


def text(result: dict[str, Any], fmt: str = ".3g") -> str:
    """`p=0.012` or the note saying why there is no p."""
    if not result.get("decidable"):
        return result["note"]
    return "p=n/a" if result.get("p") is None else f"p={result['p']:{fmt}}"
