"""Leaderboard JSON (schema-validated), the executed report notebook, and `suite compare`."""

import json
from pathlib import Path

import nbformat
import pytest

from suite.cli import main
from suite.compare import compare
from suite.errors import SuiteError
from suite.leaderboard import read_leaderboard, validate
from tests.conftest import run_tiny


@pytest.fixture
def finished_run(tiny_task: Path, tiny_models) -> Path:  # noqa: ANN001
    return run_tiny(tiny_task, tiny_models["bert"])


def test_run_writes_a_valid_leaderboard_entry(finished_run: Path) -> None:
    board = read_leaderboard(finished_run / "leaderboard.json")
    (entry,) = board["entries"]
    assert entry["task"] == "tiny" and entry["size"] == 32 and entry["sweep"] == "tiny"
    assert len(entry["runs"]) == 3 and entry["summary"]["runs"] == 3
    assert {"all", "excluding_failed"} <= set(entry["summary"])
    assert len(entry["data_sha256"]["train"]) == 64 and entry["git_commit"] is not None
    assert board["provenance"]["versions"]["torch"]


def test_leaderboard_command_merges_and_ranks(finished_run: Path, tmp_path: Path, capsys) -> None:  # noqa: ANN001
    out = tmp_path / "board.json"
    assert main(["leaderboard", str(finished_run), "-o", str(out)]) == 0
    assert main(["check-leaderboard", str(out)]) == 0
    assert [e["rank"] for e in json.loads(out.read_text())["entries"]] == [1]


@pytest.mark.parametrize(
    "edit, field",
    [
        (lambda d: d["entries"][0]["summary"].update(failure_rate=1.7), "entries/0/summary/failure_rate"),
        (lambda d: d["entries"][0]["runs"][0]["seeds"].pop("order"), "entries/0/runs/0/seeds"),
        (lambda d: d["entries"][0].update(rank="first"), "entries/0/rank"),
        (lambda d: d.update(schema_version=1), "schema_version"),
    ],
)
def test_hand_edited_leaderboard_fails_naming_the_field(
    finished_run: Path, tmp_path: Path, edit, field
) -> None:  # noqa: ANN001
    document = json.loads((finished_run / "leaderboard.json").read_text())
    edit(document)
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(document))
    with pytest.raises(SuiteError, match=f"bad.json: field '{field}'"):
        read_leaderboard(bad)


def test_corrupted_leaderboard_is_a_one_line_error(tmp_path: Path, capsys) -> None:  # noqa: ANN001
    bad = tmp_path / "cut.json"
    bad.write_text('{"schema_version": 2, "entries": [')
    assert main(["check-leaderboard", str(bad)]) == 2
    assert "cut.json: not valid JSON" in capsys.readouterr().err


def test_schema_accepts_what_build_writes_only() -> None:
    with pytest.raises(SuiteError, match="field '\\(top level\\)'"):
        validate({"schema_version": 1}, "x")


def test_report_executes_with_every_figure(finished_run: Path, capsys) -> None:  # noqa: ANN001
    assert main(["report", str(finished_run)]) == 0
    notebook = nbformat.read(finished_run / "report.ipynb", as_version=4)
    images = [
        o
        for c in notebook.cells
        if c.cell_type == "code"
        for o in c.get("outputs", [])
        if "image/png" in o.get("data", {})
    ]
    assert len(images) == 7  # distribution, expected max, lr x batch, init x order, shares, importance, loss
    errors = [o for c in notebook.cells for o in c.get("outputs", []) if o.get("output_type") == "error"]
    assert not errors
    html = (finished_run / "report.html").read_text()
    assert html.count("<img") >= 7 and "across seeds" in html


def test_compare_detects_a_shift() -> None:
    a = [{"score": 0.60 + 0.01 * i, "failed": i < 2} for i in range(10)]
    b = [{"score": 0.70 + 0.01 * i, "failed": False} for i in range(10)]
    result = compare(a, b)
    assert result["median_diff"] == pytest.approx(0.10)
    assert result["mann_whitney_p"] < 0.01 and result["permutation_median_p"] < 0.01
    assert result["failure_rate_diff"] == pytest.approx(-0.2)
    same = compare(a, a)
    assert same["median_diff"] == 0 and same["mann_whitney_p"] > 0.5


def test_compare_command(finished_run: Path, tmp_path: Path, capsys) -> None:  # noqa: ANN001
    png = tmp_path / "cmp.png"
    assert main(["compare", str(finished_run), str(finished_run), "--plot", str(png)]) == 0
    assert "Mann-Whitney" in capsys.readouterr().out and png.stat().st_size > 1000


def test_export_writes_jsonl_and_csv(finished_run: Path, tmp_path: Path, capsys) -> None:  # noqa: ANN001
    import csv

    jsonl, table = tmp_path / "t.jsonl", tmp_path / "t.csv"
    assert main(["export", str(finished_run), "-o", str(jsonl)]) == 0
    assert main(["export", "--storage", f"sqlite:///{finished_run / 'study.db'}", "-o", str(table)]) == 0
    records = [json.loads(line) for line in jsonl.open()]
    rows = list(csv.DictReader(table.open()))
    assert len(records) == len(rows) == 3
    assert {r["key"] for r in records} == {row["key"] for row in rows}
    assert "seeds.init" in rows[0] and "loss_curve" not in rows[0]
