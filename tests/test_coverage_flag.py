"""An entry's intervals flagged with the coverage measured on the shape its runs show
(suite/stats/estimates/coverage.py; docs/statistics.md, Coverage by shape)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from suite.stats.estimates.coverage import MEASURED, SOURCE
from suite.stats.estimates.summary import summarize

DOCS = Path(__file__).resolve().parent.parent / "docs" / "statistics.md"


def _run(score: float, failed: bool, init: int, order: int) -> dict[str, Any]:
    return {
        "score": score,
        "failed": failed,
        "outcome": "failed" if failed else "succeeded",
        "seeds": {"init": init, "order": order, "subsample": 7},
        "size": 100,
        "hparams": {"lr": 2e-5},
    }


def _independent(n: int, n_failed: int, seed: int = 0) -> list[dict[str, Any]]:
    """RTE's shape: succeeded runs N(0.66, 0.03), failed ones at the 0.527 baseline (4.4 SD)."""
    good = np.random.default_rng(seed).normal(0.66, 0.03, n)
    return [_run(0.527 if k < n_failed else float(good[k]), k < n_failed, k, 100 + k) for k in range(n)]


def _grid(failed_rows: int) -> list[dict[str, Any]]:
    """A 3 x 3 init x order grid whose first `failed_rows` init seeds fail on every order seed."""
    good = np.random.default_rng(1).normal(0.66, 0.03, (3, 3))
    return [
        _run(0.527 if a < failed_rows else float(good[a, c]), a < failed_rows, a, 10 + c)
        for a in range(3)
        for c in range(3)
    ]


def _flags(records: list[dict[str, Any]]) -> dict[str, str]:
    found = summarize(records, resamples=400)["intervals"]
    return {name: block["coverage"]["measured"] for name, block in found.items() if "coverage" in block}


@pytest.mark.parametrize(
    ("n", "failed", "read_at", "mean", "std"),
    [
        (3, 1, 3, "90.8-94.1%", "49.8-66.9%"),
        (6, 1, 5, "88.1-92.7%", "85.9-88.7%"),
        (12, 2, 10, "91.3-92.1%", "76.4-91.0%"),  # past 10 runs: read at 10
    ],
)
def test_failed_runs_beside_succeeded_ones_flag_the_mean_and_std_at_the_nearest_measured_n(
    n: int, failed: int, read_at: int, mean: str, std: str
) -> None:
    assert _flags(_independent(n, failed)) == {"mean": mean, "std": std}
    block = summarize(_independent(n, failed), resamples=400)["intervals"]["mean"]["coverage"]
    assert block == {
        "shape": f"failed runs beside succeeded ones, {read_at} runs"
        + (", under 25% failed" if read_at == 10 else ""),
        "measured": mean,
        "source": SOURCE,
    }


def test_shapes_it_cannot_see_or_that_hold_are_not_flagged() -> None:
    assert _flags(_independent(5, 0)) == {}  # no failed run: a collapse the sample did not draw
    assert _flags(_independent(5, 5)) == {}  # every run failed: no two shapes side by side
    found = summarize(_independent(5, 1), resamples=400)
    assert "coverage" not in found["intervals"]["median"]  # the median holds (97.9-98.6%)
    assert all("coverage" not in b for b in found["excluding_failed"]["intervals"].values())


def test_grids_and_two_peaked_runs_take_their_own_rows() -> None:
    assert _flags(_grid(1)) == {"mean": "82.9-93.2%"}  # one init seed of three failed
    two_peaked = {"mean": "88.5-96.2%", "median": "89.0-96.0%", "std": "92.6-96.2%"}
    assert _flags(_grid(2)) == two_peaked  # two of three init seeds failed: 67%
    assert _flags(_independent(10, 5)) == {"std": "73.5-88.9%"}  # two-peaked runs: the std only
    assert _flags(_independent(10, 3)) == {"std": "76.4-91.0%"}  # 30% failed at 10: the mean holds


def test_every_measured_figure_is_the_docs_figure_for_its_shape() -> None:
    """The flag quotes the docs' table: each figure appears there, in its statistic's column."""
    lines = DOCS.read_text().splitlines()
    start = lines.index("| shape | mean | median | std |") + 2
    rows = lines[start : start + next(i for i, line in enumerate(lines[start:]) if not line.startswith("|"))]
    columns = {"mean": 2, "median": 3, "std": 4}
    for (shape, statistic), measured in MEASURED.items():
        low, high = re.findall(r"[\d.]+(?=%)|[\d.]+(?=-)", measured)
        cells = [row.split("|")[columns[statistic]] for row in rows]
        assert any(low in cell for cell in cells) and any(high in cell for cell in cells), (shape, statistic)
