"""`suite compare`: two studies per shared (size, setting) block, tests that know when they can decide."""

from __future__ import annotations

import numpy as np
import pytest

from suite.compare import compare, format_comparison
from suite.uncertainty import wilson
from tests.designs import grid_records


def test_compare_tests_spread_shift_failures_and_matched_seeds() -> None:
    rng = np.random.default_rng(7)
    seed_effect = rng.normal(0, 0.05, 30)  # the same seeds move both studies alike
    a = [
        {"score": 0.70 + e + rng.normal(0, 0.002), "outcome": "failed" if i < 6 else "succeeded", "seeds": s}
        for i, (e, s) in enumerate(
            zip(seed_effect, ({"init": i, "order": i, "subsample": 0} for i in range(30)), strict=True)
        )
    ]
    b = [{**r, "score": r["score"] + 0.01, "outcome": "succeeded"} for r in a]
    result = compare(a, b)
    assert result["paired"]["n_pairs"] == 30 and result["paired"]["wilcoxon_p"] < 0.001
    assert (
        result["mann_whitney_p"] > 0.2
    )  # the unpaired test cannot see a 1-point shift under 5-point seed noise
    assert result["hodges_lehmann"]["estimate"] == pytest.approx(0.01, abs=0.02)
    assert result["a"]["failure_rate_ci95"] == pytest.approx(wilson(6, 30)["ci95"])
    wide = [{"score": 0.7 + 4 * (r["score"] - 0.7)} for r in a]
    assert compare(a, wide)["brown_forsythe_p"] < 0.001 and compare(a, wide)["paired"] is None
    text = format_comparison(result, ("A", "B"), "accuracy")
    for phrase in ("Hodges-Lehmann", "Brown-Forsythe", "Wilcoxon", "Wilson", "across runs"):
        assert phrase in text
    crossed = compare(
        grid_records(rng.normal(0.7, 0.02, (1, 4, 4))), grid_records(rng.normal(0.72, 0.02, (1, 4, 4)))
    )
    assert "init x order seeds" in crossed["hodges_lehmann"]["unit"]
