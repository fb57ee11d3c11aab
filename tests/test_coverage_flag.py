"""An entry's intervals where runs can fail: the mean and std stated so that they cover for any
failure rate (suite/stats/estimates/failed_runs.py), and the coverage flag, which states the range
over processes failing 0, 25 and 40% of the time at the shape the entry shows, read from the
committed table (suite/stats/estimates/coverage.py; docs/statistics.md, Coverage by shape)."""

from __future__ import annotations

import itertools
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from scipy import stats

from suite.stats.estimates import failure_bounds, summarize, widened_mean, widened_std
from suite.stats.estimates.coverage import FLAG_BELOW, SOURCE, coverage_table

DOCS = Path(__file__).resolve().parent.parent / "docs" / "statistics.md"
B = 0.527  # RTE's majority baseline; succeeded runs N(0.66, 0.03): 4.4 SD above it


def _run(score: float, failed: bool, init: int, order: int, baseline: float | None = B) -> dict[str, Any]:
    out = {
        "score": score,
        "failed": failed,
        "outcome": "failed" if failed else "succeeded",
        "seeds": {"init": init, "order": order, "subsample": 7},
        "size": 100,
        "hparams": {"lr": 2e-5},
    }
    return out if baseline is None else out | {"baseline": baseline}


def _independent(scores: list[float], n_failed: int, baseline: float | None = B) -> list[dict[str, Any]]:
    return [_run(s, k < n_failed, k, 100 + k, baseline) for k, s in enumerate(scores)]


def _normal(n: int, n_failed: int, seed: int = 0, baseline: float | None = B) -> list[dict[str, Any]]:
    good = np.random.default_rng(seed).normal(0.66, 0.03, n)
    return _independent([B if k < n_failed else float(good[k]) for k in range(n)], n_failed, baseline)


def _grid(failed_rows: int) -> list[dict[str, Any]]:
    """A 3 x 3 init x order grid whose first `failed_rows` init seeds fail on every order seed."""
    good = np.random.default_rng(1).normal(0.66, 0.03, (3, 3))
    return [
        _run(B if a < failed_rows else float(good[a, c]), a < failed_rows, a, 10 + c)
        for a in range(3)
        for c in range(3)
    ]


def _range(shape: str, group: str, statistic: str) -> tuple[float, float]:
    low, high = coverage_table()["shapes"][shape][group][statistic]["range"]
    return low, high


def _expected_flags(shape: str, group: str, found: dict[str, Any]) -> dict[str, str]:
    """From the table itself: the statistics whose range reaches below 93%, as the flag writes them."""
    out = {}
    for name, block in found.items():
        statistic = coverage_table()["shapes"][shape][group].get(name)
        if statistic and block["ci95"] is not None and statistic["range"][0] < FLAG_BELOW:
            low, high = statistic["range"]
            out[name] = f"{100 * low:.1f}-{100 * high:.1f}%"
    return out


def _flags(found: dict[str, Any]) -> dict[str, str]:
    return {name: block["coverage"]["measured"] for name, block in found.items() if "coverage" in block}


def test_the_issues_entry_states_a_mean_that_covers_for_any_failure_rate() -> None:
    """[0.527, 0.63, 0.65, 0.67, 0.69], the first failed: its mean was flagged "covers 88.1-92.7%"
    where such entries covered 524 of 524 times. Now it is (1 - p) m + p b over p's exact interval
    (1 of 5 failed: scipy's Clopper-Pearson) and the succeeded runs' interval m, checked on a grid of
    p and m by brute force, and it carries no flag of another entry's coverage."""
    summary = summarize(_independent([0.527, 0.63, 0.65, 0.67, 0.69], 1), resamples=400)
    mean = summary["intervals"]["mean"]
    assert mean.get("coverage", {}).get("measured") != "88.1-92.7%"
    assert _flags({"mean": mean}) == _expected_flags("5 runs", "intervals", {"mean": mean})
    exact = stats.binomtest(1, 5).proportion_ci(0.95, method="exact")
    assert mean["widened"]["failure_rate"] == pytest.approx([exact.low, exact.high], abs=1e-9)
    succeeded = summary["excluding_failed"]["intervals"]["mean"]["ci95"]
    assert mean["widened"]["succeeded"] == succeeded and mean["widened"]["failed_at"] == [B, B]
    ps, ms = np.linspace(exact.low, exact.high, 401), np.linspace(*succeeded, 401)
    values = (1 - ps[:, None]) * ms[None] + ps[:, None] * B
    assert mean["ci95"] == pytest.approx([values.min(), values.max()], abs=1e-12)
    assert mean["estimate"] == pytest.approx(np.mean([0.527, 0.63, 0.65, 0.67, 0.69]))
    assert "covers for any failure rate" in mean["method"]


def test_an_entry_that_drew_no_failure_still_states_the_failures_it_may_not_have_drawn() -> None:
    """5 runs, none failed, from a task whose failure rule has a baseline: the rate may still be as
    high as 1 - 0.025^(1/5) = 0.52, so the mean reaches down toward the baseline; the interval
    of the succeeded runs alone (what it showed before, covering 42% in such entries) is its top."""
    summary = summarize(_normal(5, 0), resamples=400)
    mean, own = summary["intervals"]["mean"], summary["excluding_failed"]["intervals"]["mean"]["ci95"]
    top = 1 - 0.025 ** (1 / 5)
    assert mean["widened"]["failure_rate"] == pytest.approx([0.0, top])
    assert mean["ci95"] == pytest.approx([(1 - top) * own[0] + top * B, own[1]])
    assert mean["ci95"][0] < own[0] - 0.05  # not the bare interval of runs that drew no failure


def test_the_std_is_widened_by_the_same_rule() -> None:
    """The std of one run, sqrt((1 - p) s^2 + p f^2 + p (1 - p) (m - v)^2), over a brute-force grid of
    p, s, m, v and f (the failed runs' own spread, up to half the hull's width), against
    `widened_std`; on an entry, against its succeeded runs' intervals."""
    rng = np.random.default_rng(5)
    for _ in range(20):
        share = np.sort(rng.random(2))[None]
        mean = np.sort(rng.normal(0.66, 0.05, 2))[None]
        std = np.sort(rng.uniform(0.0, 0.08, 2))[None]
        at = tuple(sorted(rng.uniform(0.45, 0.55, 2)))
        grid = [np.linspace(*share[0], 41), np.linspace(*std[0], 9), np.linspace(*mean[0], 9)]
        grid += [np.linspace(*at, 9), np.linspace(0, (at[1] - at[0]) / 2, 5)]
        p, s, m, v, f = np.meshgrid(*grid, indexing="ij")
        values = np.sqrt((1 - p) * s**2 + p * f**2 + p * (1 - p) * (m - v) ** 2)
        found = widened_std(share, mean, std, at)[0]
        assert found == pytest.approx([values.min(), values.max()], rel=2e-3)
        corners = widened_mean(share, mean, at)[0]
        means = (1 - p) * m + p * v
        assert corners == pytest.approx([means.min(), means.max()], abs=1e-12)
    summary = summarize(_normal(6, 2), resamples=400)
    block, own = summary["intervals"]["std"], summary["excluding_failed"]["intervals"]
    share = np.array([block["widened"]["failure_rate"]])
    expected = widened_std(share, np.array([own["mean"]["ci95"]]), np.array([own["std"]["ci95"]]), (B, B))
    assert block["ci95"] == pytest.approx(list(expected[0]))


def test_failure_bounds_are_clopper_pearson_on_the_seed_units() -> None:
    for failed, n in itertools.product(range(6), (5, 10)):
        exact = stats.binomtest(failed, n).proportion_ci(0.95, method="exact")
        assert failure_bounds(np.array([failed]), np.array([n]), n)[0] == pytest.approx(
            [exact.low, exact.high]
        )
    # A 3 x 3 grid whose failures follow one init seed: 1 of 3 seed units, not 3 of 9 runs.
    one_of_three = stats.binomtest(1, 3).proportion_ci(0.95, method="exact")
    assert failure_bounds(np.array([3]), np.array([9]), 3)[0] == pytest.approx(
        [one_of_three.low, one_of_three.high]
    )
    assert summarize(_grid(1), resamples=400)["intervals"]["mean"]["widened"][
        "failure_rate"
    ] == pytest.approx([one_of_three.low, one_of_three.high])


@pytest.mark.parametrize(
    ("records", "shape"),
    [
        (_normal(3, 0), "3 runs"),
        (_normal(4, 1), "3 runs"),  # the nearest measured shape
        (_normal(5, 0), "5 runs"),
        (_normal(6, 1), "5 runs"),
        (_normal(10, 3), "10 runs"),
        (_normal(12, 2), "10 runs"),  # past 10 runs: read at 10
        (_grid(0), "3 x 3 grid"),
        (_grid(1), "3 x 3 grid"),
    ],
)
def test_the_flag_states_the_range_over_processes_whether_or_not_a_failure_was_drawn(
    records: list[dict[str, Any]], shape: str
) -> None:
    """The flag reads the shape the entry shows (its runs, or a grid), not whether its runs drew a
    failure: an entry without one is flagged as one with one, each interval where its range over
    the processes reaches below 93%, the succeeded runs' own intervals by their own rows."""
    summary = summarize(records, resamples=400)
    found, own = summary["intervals"], summary["excluding_failed"]["intervals"]
    assert _flags(found) == _expected_flags(shape, "intervals", found)
    assert _flags(own) == _expected_flags(shape, "excluding_failed", own)
    for block in (*found.values(), *own.values()):
        if "coverage" in block:
            assert block["coverage"]["source"] == SOURCE and block["coverage"]["shape"].startswith(
                ("succeeded runs of " if block in own.values() else "")
                + shape
                + ", 0, 25 or 40% of runs failing"
            )


def test_plain_scores_have_no_failure_rule_and_say_what_their_mean_covers() -> None:
    """Runs without `baseline`, none failed: nothing says where a failed run would score, so the
    mean and std are the runs' own, flagged by the rows measured without a failure rule."""
    found = summarize(_normal(5, 0, baseline=None), resamples=400)["intervals"]
    assert "widened" not in found["mean"] and "widened" not in found["std"]
    expected = _expected_flags("5 runs", "without a failure rule", {k: found[k] for k in ("mean", "std")})
    assert {k: v for k, v in _flags(found).items() if k in ("mean", "std")} == expected
    low, _ = _range("5 runs", "without a failure rule", "mean")
    assert low < FLAG_BELOW  # the bare mean of runs that can fail: under 93% in some process


def test_a_mean_that_succeeded_runs_cannot_bound_is_not_bounded() -> None:
    """2 of 3 runs failed: the one that succeeded bounds no mean of its own, so the mean of runs
    that can fail has none either (the pooled runs' interval would claim one)."""
    found = summarize(_normal(3, 2), resamples=400)["intervals"]
    assert found["mean"]["ci95"] is None and found["mean"]["method"].startswith("cannot bound")
    assert found["median"]["ci95"] is not None


def test_every_range_in_the_table_is_the_docs_figure_for_its_shape() -> None:
    """The docs' table is the JSON's: each shape's row gives each interval's range as the flag does."""
    lines = DOCS.read_text().splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("| shape | mean |"))
    columns = [c.strip() for c in lines[header].strip("|").split("|")]
    rows = {}
    for line in lines[header + 2 :]:
        if not line.startswith("|"):
            break
        cells = [c.strip() for c in line.strip("|").split("|")]
        rows[cells[0]] = dict(zip(columns, cells, strict=True))
    labels = {
        "intervals": "",
        "excluding_failed": "succeeded runs: ",
        "without a failure rule": "plain scores: ",
    }
    for shape, groups in coverage_table()["shapes"].items():
        for group, found in groups.items():
            row = rows[labels[group] + shape]
            for statistic, value in found.items():
                low, high = value["range"]
                cell = row[statistic.replace("_", " ")]
                assert re.match(rf"\**{100 * low:.1f}-{100 * high:.1f}%", cell), (
                    shape,
                    group,
                    statistic,
                    cell,
                )
