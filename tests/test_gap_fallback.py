"""No silent fallback in the gap test: without the failure rule's baseline (plain scores, records
without `baseline`, none failed) a reported median or mean is tested on every run, a test whose
type-I is not held where runs collapse. The result says so in `fallback`, and the leaderboard
(JSON, schema), the site and the report print it; with the baseline, given or carried, nothing
changes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import nbformat
import pytest

from suite.outputs.leaderboard import write_leaderboard
from suite.outputs.site import build_rows
from suite.stats.estimates import gap_to_reported
from suite.stats.estimates.gap import FALLBACK, FALLBACK_TYPE_I
from tests.test_site import REPORTED, write_run

OURS = [0.64, 0.65, 0.655, 0.665, 0.67, 0.68]
TEMPLATE = Path(__file__).resolve().parent.parent / "analysis" / "variance_report.ipynb"


def runs(scores: list[float], failed: int = 0) -> list[dict[str, Any]]:
    done = [{"score": s, "outcome": "succeeded", "baseline": 0.527} for s in scores]
    return [{"score": 0.527, "outcome": "failed", "baseline": 0.527}] * failed + done


@pytest.mark.parametrize("statistic", ["mean", "median"])
def test_plain_scores_say_the_test_does_not_hold_where_runs_collapse(statistic: str) -> None:
    gap = gap_to_reported(OURS, 63.34, statistic, n_runs=5)
    assert gap["fallback"] == FALLBACK.format(rate=FALLBACK_TYPE_I[statistic], statistic=statistic)
    assert (
        "type-I is not held where runs collapse" in gap["fallback"]
        and FALLBACK_TYPE_I[statistic] in gap["fallback"]
    )
    no_baseline = gap_to_reported(
        [{"score": s, "outcome": "succeeded"} for s in OURS], 63.34, statistic, n_runs=5
    )
    assert no_baseline["fallback"] == gap["fallback"]


@pytest.mark.parametrize("statistic", ["mean", "median"])
def test_the_baseline_given_as_a_keyword_is_the_baseline_the_records_carry(statistic: str) -> None:
    """failure_baseline=0.527 on plain scores: the same answer as records carrying `baseline`
    (one failed run of five explains a reported mean of 63.34), and no fallback."""
    given = gap_to_reported(OURS, 63.34, statistic, n_runs=5, failure_baseline=0.527)
    carried = gap_to_reported(runs(OURS), 63.34, statistic, n_runs=5)
    assert given == carried and "fallback" not in carried


def test_tests_that_do_not_fall_back_say_nothing() -> None:
    """A single run and a max of k are exact rank tests on our runs; a study with a failed run says
    where failed runs score; k unknown tests nothing."""
    for statistic, k in (("single", None), ("max", 3), ("median", None)):
        assert "fallback" not in gap_to_reported(OURS, 63.0, statistic, n_runs=k), statistic
    assert "fallback" not in gap_to_reported(runs(OURS, failed=1), 63.0, "mean", n_runs=5)


def _plain_run(folder: Path) -> Path:
    """A run folder whose records carry no `baseline` and no failed run (imported scores)."""
    write_run(folder, reported=[REPORTED], grid=((2e-5, 16),))
    records = [json.loads(line) for line in (folder / "trials.jsonl").read_text().splitlines()]
    plain = [
        {k: v for k, v in r.items() if k != "baseline"}
        | {"outcome": "succeeded", "failed": False, "failure": None, "score": 0.6 + 0.01 * i}
        for i, r in enumerate(records)
    ]
    (folder / "trials.jsonl").write_text("".join(json.dumps(r) + "\n" for r in plain))
    return folder


def test_the_leaderboard_site_and_report_print_the_fallback(tmp_path: Path) -> None:
    plain = _plain_run(tmp_path / "plain")
    carried = write_run(tmp_path / "carried", "mrpc", reported=[REPORTED], grid=((2e-5, 16),))
    board = write_leaderboard([plain, carried], tmp_path / "board.json")  # validated against the schema
    gaps = {e["task"]: e["reported"][0] for e in board["entries"]}
    statement = FALLBACK.format(rate=FALLBACK_TYPE_I["median"], statistic="median")
    assert gaps["rte"]["comparable"] and gaps["rte"]["gap"]["fallback"] == statement
    assert gaps["mrpc"]["comparable"] and "fallback" not in gaps["mrpc"]["gap"]
    site = {r["task"]: r["reported"] for r in build_rows([tmp_path / "board.json"])}
    assert statement in site["rte"][0]["notes"] and statement not in site["mrpc"][0]["notes"]
    # The report's cell of comparable numbers, run on this leaderboard without a kernel.
    cell = next(
        c.source
        for c in nbformat.read(TEMPLATE, as_version=4).cells
        if c.cell_type == "code" and c.source.startswith("comparable = ")
    )
    shown: list = []
    scope = {
        "board": board,
        "labels": {},
        "setting_key": lambda s: json.dumps(s, sort_keys=True),
        "display": shown.append,
        "print": shown.append,
        "pd": __import__("pandas"),
    }
    exec(cell, scope)  # noqa: S102 (the template's own cell)
    notes = list(shown[0]["note"])
    assert any(statement in note for note in notes) and not all(statement in note for note in notes)
