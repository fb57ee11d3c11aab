"""A study without scores: every output command, and the run's own summary, answers in plain lines.

Two studies made without training, as `suite run` leaves them (an Optuna storage holding each
trial's record, then `write_outputs`, which writes the run folder and returns the summary `run`
prints): (a) every trial errored, (b) one setting's trials all errored beside a setting that ran.
"""

from __future__ import annotations

import json
from pathlib import Path

import nbformat
import numpy as np
import optuna
import pytest
from optuna.trial import TrialState, create_trial

from suite.commands.cli import main
from suite.config.task import TaskSpec
from suite.outputs.run_folder import write_outputs
from suite.outputs.site import build_rows
from suite.stats.estimates import gap_to_reported, intervals, summarize
from suite.stats.estimates.uncertainty import NO_SCORE, reduce
from tests.test_site import REPORTED, write_run

ERROR = "error: RuntimeError: the optimizer does not allow gradient clipping (amp.py:108)"
SCORED, UNSCORED = "lr=2e-05", "lr=4e-05"


def errored_study(folder: Path, all_errored: bool) -> tuple[Path, str]:
    """A run folder of rte at size 500, two settings x 6 seeds, whose trials at lr 4e-05 (every
    trial where `all_errored`) errored; returns it and the summary `run` would print."""
    write_run(folder, "rte", "bert-base", 0.6, 0, [REPORTED], examples=40)
    info = json.loads((folder / "run.json").read_text()) | {"study": "s"}
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    url = f"sqlite:///{folder / 'study.db'}"
    study = optuna.create_study(study_name="s", storage=url, direction="maximize")
    study.set_user_attr("run_info", info)
    for number, line in enumerate((folder / "trials.jsonl").read_text().splitlines()):
        record = json.loads(line) | {"trial_number": number}
        if all_errored or record["hparams"]["lr"] == 4e-5:
            record |= {"outcome": "errored", "failure": None, "failed": False, "score": None, "reason": ERROR}
            state, value = TrialState.FAIL, None
        else:
            state, value = TrialState.COMPLETE, record["score"]
        attrs = {"key": record["key"], "record": record}
        study.add_trial(create_trial(state=state, value=value, user_attrs=attrs))
    task = TaskSpec.model_validate(
        {"name": "rte", "version": 1, "head": "classification", "labels": ["a", "b"], "sizes": [500],
         "metric": {"main": "accuracy"},
         "data": {"local": "rte", "format": "tsv", "train": "t.tsv", "validation": "d.tsv", "text": ["s"],
                  "label": "label"}}
    )  # fmt: skip
    return folder, write_outputs(study, folder, task)[1]


@pytest.fixture(scope="module")
def studies(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, str]]:
    root = tmp_path_factory.mktemp("no-scores")
    return {"none": errored_study(root / "none", True), "one": errored_study(root / "one", False)}


def unscored(*settings: str) -> list[str]:
    return [f"no trial of rte 500 {s} produced a score" for s in settings]


def expected_lines(kind: str) -> list[str]:
    return unscored(SCORED, UNSCORED) if kind == "none" else unscored(UNSCORED)


def scored_median(folder: Path) -> float:
    """The scored setting's median x100, from its records (independent of the statistics)."""
    records = [json.loads(line) for line in (folder / "trials.jsonl").read_text().splitlines()]
    return 100 * float(np.median([r["score"] for r in records if r["score"] is not None]))


def plain(out: str, kind: str) -> None:
    """Each unscored (size, setting) named in one line (and the scored one not), no traceback."""
    assert "Traceback" not in out
    for line in unscored(SCORED, UNSCORED):
        named = [x for x in out.splitlines() if line in x]
        assert len(named) == (1 if line in expected_lines(kind) else 0), (line, out)


@pytest.mark.parametrize("kind", ["none", "one"])
def test_the_run_summary_names_each_setting_without_a_score(studies, kind: str) -> None:  # noqa: ANN001
    folder, summary = studies[kind]
    plain(summary, kind)
    if kind == "one":  # the scored setting keeps its row: its median, 6 runs, 2 failed
        (row,) = [x for x in summary.splitlines() if x.split()[:3] == ["500", SCORED, "6"]]
        assert f"{scored_median(folder):.2f}" in row and row.rstrip().endswith("2/6")


@pytest.mark.parametrize("kind", ["none", "one"])
def test_leaderboard_and_site_say_it_and_stay_valid(studies, kind: str, tmp_path: Path, capsys) -> None:  # noqa: ANN001
    folder, _ = studies[kind]
    board = tmp_path / "board.json"
    assert main(["leaderboard", str(folder), "-o", str(board)]) == 0
    assert main(["check-leaderboard", str(board)]) == 0  # the schema holds
    assert main(["site", str(board), "-o", str(tmp_path / "site")]) == 0
    out = capsys.readouterr().out
    plain(out.split("wrote ")[0], kind)  # the leaderboard's lines
    plain(out.split("wrote ")[1], kind)  # the site's
    entries = {e["setting"]["lr"]: e for e in json.loads(board.read_text())["entries"]}
    empty = entries[4e-5]["summary"]
    assert empty["runs"] == 0 and empty["errored"] == 6 and empty["all"] == {**empty["all"], "n": 0}
    median = empty["intervals"]["median"]
    assert median["estimate"] is None and median["ci95"] is None and median["method"] == NO_SCORE
    rows = {row["setting"].split()[0]: row for row in build_rows([board])}
    assert rows["lr=4e-05"]["median"] is None and rows["lr=4e-05"]["failure_rate"] is None
    if kind == "one":  # the scored entry ranks first, with its own median
        assert entries[2e-5]["rank"] == 1 and entries[4e-5]["rank"] == 2
        assert rows["lr=2e-05"]["median"] == pytest.approx(scored_median(folder))


@pytest.mark.parametrize("kind", ["none", "one"])
def test_compare_and_export_say_it(studies, kind: str, tmp_path: Path, capsys) -> None:  # noqa: ANN001
    folder, _ = studies[kind]
    assert main(["compare", str(folder), str(folder)]) == 0
    out = capsys.readouterr().out
    assert "Traceback" not in out
    named = [x.removeprefix(f"{folder}: ") for x in out.splitlines() if x.startswith(f"{folder}: no trial")]
    given = 1 if kind == "none" else 2  # a study without any score ends it: the second is not read
    assert sorted(named) == sorted(given * [f"{x} (6 errored)" for x in expected_lines(kind)])
    if kind == "none":
        assert f"nothing to compare: no trial of {folder} produced a score" in out
    else:  # the scored setting is compared as usual
        assert f"{scored_median(folder):.2f}" in out and "Mann-Whitney" in out
    exported = tmp_path / "trials.jsonl"
    assert main(["export", str(folder), "-o", str(exported)]) == 0
    out = capsys.readouterr().out
    plain(out, kind)
    assert f"{exported}: 12 trials" in out and len(exported.read_text().splitlines()) == 12


@pytest.mark.parametrize("kind", ["none", "one"])
def test_the_report_says_it(studies, kind: str, tmp_path: Path, capsys) -> None:  # noqa: ANN001
    """The notebook runs through (slow: a Jupyter kernel) and names the unscored settings."""
    folder, _ = studies[kind]
    assert main(["report", str(folder)]) == 0
    assert "Traceback" not in capsys.readouterr().out
    notebook = nbformat.read(folder / "report.ipynb", as_version=4)
    outputs = [o for c in notebook.cells if c.cell_type == "code" for o in c.get("outputs", [])]
    assert not [o for o in outputs if o.get("output_type") == "error"]
    plain("".join(o.get("text", "") for o in outputs if o.get("output_type") == "stream"), kind)
    if kind == "one":  # the scored entry's figures are drawn
        assert any("image/png" in o.get("data", {}) for o in outputs)


def test_statistics_of_no_score_are_no_value() -> None:
    """Quantiles, reductions, intervals and variance components of no score give NaN or None, not
    an IndexError; the gap to a reported number carries the fields the schema asks of a comparable
    one."""
    empty = np.empty((3, 0))
    for statistic in ("median", "iqr", "mean", "std", "max", "min", np.median):
        assert np.isnan(reduce(empty, statistic)).all() and reduce(empty, statistic).shape == (3,)
    seeds = {"init": 0, "order": 0, "subsample": 0}
    found = intervals([{"key": "k", "size": 500, "hparams": {}, "seeds": seeds, "outcome": "errored"}])
    for name in ("median", "mean", "std", "iqr"):
        assert (found[name]["estimate"], found[name]["ci95"], found[name]["method"]) == (None, None, NO_SCORE)
    run = {"size": 500, "hparams": {}, "outcome": "failed", "failure": "diverged", "score": None}
    diverged = [run | {"key": f"k{i}", "seeds": seeds | {"init": i, "order": i}} for i in range(3)]
    summary = summarize(diverged)  # runs without a score: no variance to split either
    assert (summary["runs"], summary["all"]["n"], summary["variance_components"]["total"]) == (3, 0, None)
    gap = gap_to_reported([], 69.3, "median", n_runs=5)
    assert gap["n"] == 0 and gap["percentile"] is gap["p_two_sided"] is gap["reference"] is None
