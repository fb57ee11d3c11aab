"""Leaderboard JSON (schema-validated), the executed report notebook, and `suite compare`."""

import json
import random
from pathlib import Path

import nbformat
import pytest

from suite.commands.cli import main
from suite.errors import SuiteError
from suite.outputs import leaderboard
from suite.outputs.leaderboard import read_leaderboard, validate, write_leaderboard
from suite.stats.compare import compare
from suite.study.records import read_jsonl
from tests.test_site import REPORTED, write_run

ONE_SETTING = ((2e-5, 16),)


@pytest.fixture
def finished_run(tiny_study: tuple[Path, Path]) -> Path:
    """The finished tiny study's run folder, a copy of this test's own (conftest's session fixture
    trains it once per test process): a test may write its report beside it."""
    return tiny_study[1]


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
    # indented, each run on a line of its own (the C encoder: 10,000 runs in a fraction of a second)
    lines = out.read_text().splitlines()
    runs = [json.loads(line.strip().rstrip(",")) for line in lines if line.startswith('    {"attempt"')]
    assert runs == json.loads(out.read_text())["entries"][0]["runs"] and len(runs) == 3
    assert lines[0] == "{" and lines[1].startswith(' "')  # the rest as before: one space an indent


def test_ranking_separates_evaluation_sets_data_and_max_length(tmp_path: Path) -> None:
    """Entries that differ in eval_limit, data content or max_length are never ranked together;
    entries equal on every rank term are."""
    variants = {
        "base": {},
        "limit": {"task_extra": {"eval_limit": 300}},
        "data": {"info_extra": {"data_sha256": {"train": "1" * 64, "dev": "3" * 64}}},
        "length": {"task_extra": {"max_length": 256}},
    }
    folders = {
        name: write_run(tmp_path / name, "rte", name, 0.6, i, grid=ONE_SETTING, **kw)
        for i, (name, kw) in enumerate(variants.items())
    }
    entries = write_leaderboard(list(folders.values()), tmp_path / "board.json")["entries"]
    assert [e["rank"] for e in entries] == [1, 1, 1, 1]  # four groups, one entry each
    groups = {e["model"]: e["rank_group"] for e in entries}
    assert groups["limit"]["eval_limit"] == 300 and groups["base"]["eval_limit"] is None
    assert groups["length"]["max_length"] == 256 and groups["data"]["data"] != groups["base"]["data"]
    better = write_run(tmp_path / "better", "rte", "better", 0.8, 9, grid=ONE_SETTING)
    entries = write_leaderboard([folders["base"], better], tmp_path / "same.json")["entries"]
    assert [(e["model"], e["rank"]) for e in entries] == [("better", 1), ("base", 2)]


def test_an_eval_limit_entry_adds_its_sampling_error_to_the_gap_test(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Scored on 300 of the dev examples: still comparable with a full-dev number, and the gap
    test gets the subsample's sampling error (eval_sd); a full-set entry gets none, nor does
    one whose limit exceeds the set (it scored every example)."""
    passed: list = []
    real = leaderboard.gap_to_reported

    def spy(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        passed.append(kwargs["eval_sd"])
        return real(*args, **kwargs)

    monkeypatch.setattr(leaderboard, "gap_to_reported", spy)
    folders = [
        write_run(
            tmp_path / name, reported=[REPORTED], grid=ONE_SETTING, examples=n, task_extra={"eval_limit": cap}
        )
        for name, n, cap in (("full", 300, None), ("subsample", 300, 300), ("small", 200, 300))
    ]
    entries = write_leaderboard(folders, tmp_path / "board.json")["entries"]
    full, small, sub = sorted(entries, key=lambda e: (e["eval_limit"] or 0, e["eval_examples"]))
    assert full["eval_limit"] is small["eval_limit"] is None and full["eval_sd"] is small["eval_sd"] is None
    assert sub["eval_limit"] == 300 and 2.0 < sub["eval_sd"] < 3.5  # ~ sqrt(.6 x .4 / 300) x 100
    (rep,) = sub["reported"]
    assert rep["comparable"] and rep["gap"]["eval_sd"] == sub["eval_sd"]
    sd = f"{sub['eval_sd']:.2f}"
    assert rep["notes"] == [
        f"evaluated on 300 of the dev examples: sampling error (sd {sd} points) added to the test"
    ]
    assert full["reported"][0]["notes"] == [] and full["reported"][0]["gap"]["eval_sd"] == 0
    assert sorted(passed) == [0, 0, sub["eval_sd"]]


def _lower_is_better(folder: Path, metric: str) -> Path:
    """The run folder's runs with their scores negated under a lower-is-better metric; run.json
    keeps the direction a spec once gave (`higher_is_better: true`): the metric decides."""
    info = json.loads((folder / "run.json").read_text())
    info["task"]["metric"] = {"main": metric, "extra": [], "higher_is_better": True}
    (folder / "run.json").write_text(json.dumps(info))
    records = [json.loads(line) for line in (folder / "trials.jsonl").read_text().splitlines()]
    flipped = [r | {"score": -r["score"], "baseline": -r["baseline"]} for r in records]
    (folder / "trials.jsonl").write_text("".join(json.dumps(r) + "\n" for r in flipped))
    return folder


def test_a_lower_is_better_metric_ranks_the_lowest_first(tmp_path: Path, monkeypatch) -> None:  # noqa: ANN001
    """The same studies with negated scores under a lower-is-better metric (faked through the metric
    table) rank in the same order: the entry with the lowest median first."""
    from suite.config import task

    monkeypatch.setattr(task, "LOWER_IS_BETTER", {"error_rate"})
    centres = {"weak": 0.55, "best": 0.8, "middle": 0.7}
    order = {}
    for name in ("accuracy", "error_rate"):
        folders = [write_run(tmp_path / name / m, "rte", m, c, i) for i, (m, c) in enumerate(centres.items())]
        if name == "error_rate":
            folders = [_lower_is_better(f, name) for f in folders]
        entries = write_leaderboard(folders, tmp_path / f"{name}.json")["entries"]
        order[name] = [(e["model"], e["setting"]["lr"], e["rank"]) for e in entries]
        assert {e["higher_is_better"] for e in entries} == {name == "accuracy"}
    assert order["accuracy"] == order["error_rate"]
    assert [m for m, _, rank in order["accuracy"] if rank == 1] == ["best"]


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


@pytest.mark.parametrize(
    "lines, line",
    [(['{"a": 1}', "", '{"a": 2', '{"a": 3}'], 3), (['{"a": 1}', "{}{}"], 2), (["", "", "[1, 2"], 3)],
)
def test_a_bad_trials_line_is_named_by_its_own_number(tmp_path: Path, lines: list[str], line: int) -> None:
    path = tmp_path / "trials.jsonl"
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(SuiteError, match=rf"{tmp_path}: .* in trials.jsonl \(line {line}\)$"):
        read_jsonl(path)


def test_trials_read_as_one_array_are_the_lines_each_parsed(tmp_path: Path) -> None:
    records = [{"key": f"t{k}", "per_example": {"correct": [k, 1]}, "score": k / 3} for k in range(5)]
    path = tmp_path / "trials.jsonl"
    path.write_text("\n\n".join(json.dumps(r) for r in records) + "\n\n")
    assert read_jsonl(path) == records
    path.write_text("[1\n2]\n3, 4\n")  # a value cut in two and two on one line: not two records
    with pytest.raises(SuiteError, match=r"in trials.jsonl \(line 1\)"):
        read_jsonl(path)
    path.write_text('{"a": 1}\n1, 2\n')  # one JSON value a line: two on a line is refused
    with pytest.raises(SuiteError, match=r"Extra data in trials.jsonl \(line 2\)"):
        read_jsonl(path)


@pytest.mark.parametrize("nan_at", [None, 0, 250])
def test_trials_read_in_parts_or_with_nan_are_each_line_parsed(tmp_path: Path, nan_at: int | None) -> None:
    """orjson reads 100 lines a call, across parts; a NaN (older code wrote them), which orjson
    refuses, anywhere: the file as the standard library reads it, each value as parsing its line."""
    from suite.study.records import _LINES_A_CALL

    draw = random.Random(0).random
    lines = [
        json.dumps({"key": f"t{k}", "score": draw(), "curve": [draw(), draw() * 1e-300, -draw()], "n": k})
        for k in range(2 * _LINES_A_CALL + 57)
    ]
    if nan_at is not None:
        lines[nan_at] = json.dumps({"key": "nan", "score": float("nan"), "loss": [1.5, float("inf")]})
    path = tmp_path / "trials.jsonl"
    path.write_text("\n".join(lines[:150]) + "\n\n" + "\n".join(lines[150:]) + "\n")  # a blank line too
    got, expected = read_jsonl(path), [json.loads(line) for line in lines]
    assert json.dumps(got) == json.dumps(expected)  # as text: NaN != NaN; floats to the last digit
    assert [type(r["score"]) for r in got] == [float] * len(lines)
    path.write_text("\n".join(lines[:130]) + '\n{"a": 1} {"b": 2}\n' + "\n".join(lines[130:]) + "\n")
    with pytest.raises(SuiteError, match=r"Extra data in trials.jsonl \(line 131\)"):
        read_jsonl(path)


EDITS = [  # each breaks one keyword the schema uses: type, minimum/maximum, required, enum/const, items
    lambda d: d["entries"][0]["summary"].update(failure_rate=1.7),
    lambda d: d["entries"][0]["runs"][0]["seeds"].pop("order"),
    lambda d: d["entries"][0].update(rank="first"),
    lambda d: d.update(schema_version=1),
    lambda d: d["entries"][0]["runs"][0].update(score="0.5"),
    lambda d: d["entries"][0]["summary"]["intervals"]["median"].update(ci95=[0.1]),
    lambda d: d["entries"][0].pop("task"),
    lambda d: d["entries"][0]["runs"].append(1),
]


def test_the_compiled_schema_and_jsonschema_give_one_verdict(finished_run: Path) -> None:
    """`validate` takes fastjsonschema's verdict and asks jsonschema only for the field of a
    refusal: the two must agree on what the schema accepts, whatever the edit."""
    import fastjsonschema
    import jsonschema

    full = jsonschema.Draft202012Validator(leaderboard.schema())
    original = json.loads((finished_run / "leaderboard.json").read_text())
    verdicts = []
    for edit in [None, *EDITS]:
        document = json.loads(json.dumps(original))
        if edit is not None:
            edit(document)
        try:
            leaderboard._compiled()(document)
            fast = True
        except fastjsonschema.JsonSchemaException:
            fast = False
        verdicts.append((fast, full.is_valid(document)))
    assert verdicts == [(True, True)] + [(False, False)] * len(EDITS)


def test_schema_accepts_what_build_writes_only() -> None:
    with pytest.raises(SuiteError, match="field '\\(top level\\)'"):
        validate({"schema_version": 1}, "x")


def test_report_executes_with_every_figure(finished_run: Path, capfd) -> None:  # noqa: ANN001
    """One size, one setting, independent seeds: the figures that apply are drawn, and each
    section that does not is one line of text (no empty figure). The kernel (a child process, so
    `capfd`) prints nothing: no warning about TCP without encryption."""
    assert main(["report", str(finished_run)]) == 0
    out, err = capfd.readouterr()
    assert out.startswith("wrote ") and not err, err
    notebook = nbformat.read(finished_run / "report.ipynb", as_version=4)
    outputs = [o for c in notebook.cells if c.cell_type == "code" for o in c.get("outputs", [])]
    images = [o for o in outputs if "image/png" in o.get("data", {})]
    assert len(images) == 4  # distribution, expected max, loss curves, dev curves
    lines = "".join(o.get("text", "") for o in outputs if o.get("output_type") == "stream").splitlines()
    variance = ("one identifiable variance", "no variance components")
    sections = (
        "one learning rate and batch size",
        "seeds drawn independently",
        variance,
        "one hyperparameter",
    )
    for start in sections:  # one line each (tiny runs may all score alike: then no component at all)
        assert len([line for line in lines if line.startswith(start)]) == 1, (start, lines)
    assert not [o for o in outputs if o.get("output_type") == "error"]
    html = (finished_run / "report.html").read_text()
    assert html.count("<img") >= 3 and "across seeds" in html


def test_a_leaderboard_is_current_while_its_runs_code_and_reference_are(tmp_path: Path, monkeypatch) -> None:  # noqa: ANN001
    from suite.outputs import board_inputs

    run = write_run(tmp_path / "run", grid=ONE_SETTING)
    out = tmp_path / "board.json"
    write_leaderboard([run], out)
    inputs = json.loads(out.read_text())["provenance"]["inputs"]
    assert len(inputs["runs"]) == 1 and inputs["reference"] is None and inputs["code"]
    assert leaderboard.current(out, [run]) and not leaderboard.current(out, [run], reference="bert")
    assert not leaderboard.current(out, [run, run])  # other sources
    monkeypatch.setattr(board_inputs, "source_stamp", lambda root: "another checkout")
    assert not leaderboard.current(out, [run])
    monkeypatch.undo()
    with (run / "trials.jsonl").open("a") as trials:
        trials.write("\n")  # any change to the trials: the numbers may change
    assert not leaderboard.current(out, [run])
    out.write_text("{cut")
    assert not leaderboard.current(out, [run]) and not leaderboard.current(tmp_path / "none.json", [run])


def test_report_builds_the_leaderboard_only_when_it_is_not_current(tmp_path: Path, monkeypatch) -> None:  # noqa: ANN001
    import nbclient

    from suite.outputs import report

    monkeypatch.setattr(nbclient.NotebookClient, "execute", lambda self, **kwargs: None)
    run = write_run(tmp_path / "run", grid=ONE_SETTING)
    built = []
    write = leaderboard.write_leaderboard
    monkeypatch.setattr(leaderboard, "write_leaderboard", lambda *a, **k: built.append(a) or write(*a, **k))
    report.make_report(run)  # `write_run` wrote no leaderboard: built
    report.make_report(run)  # current: read as it is
    assert len(built) == 1 and (run / "report.html").is_file()
    (run / "run.json").write_text((run / "run.json").read_text() + " ")
    report.make_report(run, entry_figures=3)  # its run.json changed: built again
    assert len(built) == 2
    (parameters,) = [
        c
        for c in nbformat.read(run / "report.ipynb", as_version=4).cells
        if c.get("metadata", {}).get("tags")
    ]
    assert parameters.source == f"RUN_DIR = {str(run.resolve())!r}\nENTRY_FIGURES = 3"


@pytest.mark.parametrize("value", ["-1", "x", "2.5"])
def test_report_entry_figures_is_a_whole_number_or_one_line(tmp_path: Path, value: str, capsys) -> None:  # noqa: ANN001
    assert main(["report", "--entry-figures", value, str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err == f"error: --entry-figures: expected a whole number of at least 0, got {value!r}\n"


@pytest.mark.parametrize("error", ["timeout", "dead kernel", "no kernel"])
def test_a_report_whose_kernel_times_out_or_dies_is_one_line(
    tmp_path: Path,
    monkeypatch,
    capsys,
    error: str,  # noqa: ANN001
) -> None:
    """nbclient's timeout and dead-kernel errors (and a missing kernel) are one line, exit 2, and
    no report is written."""
    import nbclient
    from jupyter_client.kernelspec import NoSuchKernel
    from nbclient.exceptions import CellTimeoutError, DeadKernelError

    raised = {
        "timeout": CellTimeoutError("A cell timed out while it was being executed, after 600 seconds.\nThe"),
        "dead kernel": DeadKernelError("Kernel died"),
        "no kernel": NoSuchKernel("python3"),
    }[error]

    def fail(self, **kwargs):  # noqa: ANN001, ANN003, ANN202
        raise raised

    async def fail_to_start(self, **kwargs):  # noqa: ANN001, ANN003, ANN202
        raise raised

    if error == "no kernel":  # where a missing kernel is found: starting it, before any cell
        from jupyter_client import AsyncKernelManager

        monkeypatch.setattr(AsyncKernelManager, "start_kernel", fail_to_start)
    else:
        monkeypatch.setattr(nbclient.NotebookClient, "execute", fail)
    run = write_run(tmp_path / "run", grid=ONE_SETTING)
    assert main(["report", str(run)]) == 2
    err = capsys.readouterr().err
    assert (
        err.count("\n") == 1 and err.startswith("error: variance_report.ipynb: ") and "Traceback" not in err
    )
    assert {"timeout": "timeout", "dead kernel": "kernel died", "no kernel": "no 'python3'"}[error] in err
    assert not (run / "report.ipynb").exists() and not (run / "report.html").exists()


def test_compare_detects_a_shift() -> None:
    a = [{"score": 0.60 + 0.01 * i, "failed": i < 2} for i in range(10)]
    b = [{"score": 0.70 + 0.01 * i, "failed": False} for i in range(10)]
    (result,) = compare(a, b)["blocks"]
    assert result["median_diff"] == pytest.approx(0.10)
    assert result["mann_whitney"]["p"] < 0.01 and result["permutation_median"]["p"] < 0.01
    assert result["failure_rate_diff"] == pytest.approx(-0.2)
    (same,) = compare(a, a)["blocks"]
    assert same["median_diff"] == 0 and same["mann_whitney"]["p"] > 0.5


def test_compare_command(finished_run: Path, tmp_path: Path, capsys) -> None:  # noqa: ANN001
    png = tmp_path / "cmp.png"
    assert main(["compare", str(finished_run), str(finished_run), "--plot", str(png)]) == 0
    out = capsys.readouterr().out
    assert "size 32 (runs are the unit)" in out and "Mann-Whitney: cannot decide with 3 runs per arm" in out
    assert png.stat().st_size > 1000


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
