"""Summary statistics of a study's scores (numpy only; no plotting)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np


def spread(scores: Sequence[float]) -> dict[str, float | int]:
    """n, median, IQR, mean, std (ddof=1), min, max of finite scores."""
    x = np.asarray([s for s in scores if s is not None and np.isfinite(s)], dtype=float)
    if x.size == 0:
        return {"n": 0}
    q1, median, q3 = np.percentile(x, [25, 50, 75])
    return {
        "n": int(x.size),
        "median": float(median),
        "iqr": float(q3 - q1),
        "mean": float(x.mean()),
        "std": float(x.std(ddof=1)) if x.size > 1 else 0.0,
        "min": float(x.min()),
        "max": float(x.max()),
    }


def summarize(records: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Spread with failed runs included (as scored) and excluded, and the failure count."""
    failed = [r for r in records if r.get("failed")]
    ok = [r for r in records if not r.get("failed")]
    return {
        "runs": len(records),
        "failed": len(failed),
        "failure_rate": len(failed) / len(records) if records else 0.0,
        "all": spread([r.get("score") for r in records]),
        "excluding_failed": spread([r.get("score") for r in ok]),
    }
