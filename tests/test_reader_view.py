"""What a reader sees, in headless Chromium: a site of three inputs (two RTE studies given as a
leaderboard file and a run folder, and an SST-2 study of three recipes, each setting written out
in full as a real sweep stores it) and that study's report. One assertion each: inputs named by
path, compact settings, one across-tasks block over all inputs, a page no wider than a 1,400 px
window, no network request from the report, loss and dev curves drawn per setting."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from suite.commands.cli import main
from suite.outputs.leaderboard import write_leaderboard
from tests.test_site import _browser, write_run

FULL = {"warmup_ratio": 0.1, "weight_decay": 0.01, "bias_correction": True, "max_grad_norm": 1.0,
        "group_by_length": False, "split_batches": True, "min_steps": 0, "classifier": "task"}  # fmt: skip
RECIPES = {"devlin": (2e-5, 32, 3), "mosbach": (1e-5, 16, 20), "bert-adam": (2e-5, 16, 3)}


def _written_out(folder: Path, recipes: bool = False) -> Path:
    """The run's settings as a real sweep stores them: every hyperparameter (and a recipe name),
    dev curves per epoch."""
    lines = (folder / "trials.jsonl").read_text().splitlines()
    records = [json.loads(line) for line in lines]
    names = list(RECIPES)
    settings = sorted({(r["hparams"]["lr"], r["hparams"]["batch_size"]) for r in records})
    for r in records:
        h = r["hparams"]
        if recipes:
            name = names[settings.index((h["lr"], h["batch_size"]))]
            lr, batch, epochs = RECIPES[name]
            h.update(recipe=name, lr=lr, batch_size=batch, epochs=epochs)
        h.update(FULL)
        r["epochs"] = [{"epoch": e, "accuracy": r["score"] - 0.02 * (2 - e)} for e in range(3)]
    (folder / "trials.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    return folder


@pytest.fixture
def inputs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    monkeypatch.chdir(tmp_path)
    runs = Path("runs")
    first = _written_out(write_run(runs / "rte/bert-base", "rte", "bert-base", 0.62, 1))
    write_leaderboard([first], first / "leaderboard.json")
    second = _written_out(write_run(runs / "rte/minilm", "rte", "minilm", 0.55, 2))
    grid = ((2e-5, 16), (4e-5, 16), (5e-5, 32))
    third = _written_out(write_run(runs / "sst2/bert-base", "sst2", "bert-base", 0.8, 3, grid=grid), True)
    write_leaderboard([third], third / "leaderboard.json")
    return [first / "leaderboard.json", second, third / "leaderboard.json"]


def test_the_site_reads_as_a_reader_needs(inputs: list[Path], tmp_path: Path) -> None:
    assert main(["site", *map(str, inputs), "-o", "site"]) == 0
    with _browser(tmp_path / "site/index.html") as view:
        view.set_viewport_size({"width": 1400, "height": 900})
        names = [
            "runs/rte/bert-base/leaderboard.json",
            "runs/rte/minilm",
            "runs/sst2/bert-base/leaderboard.json",
        ]
        assert view.inner_text("p.sources").startswith(f"7 entries from {', '.join(names)}.")
        assert sorted(set(view.locator("td.group:last-child").all_inner_texts())) == names
        settings = view.locator("td.setting").all_inner_texts()
        assert sorted(set(settings)) == [
            "lr=2e-05", "lr=4e-05", "recipe=bert-adam", "recipe=devlin", "recipe=mosbach"
        ]  # fmt: skip
        assert view.locator(".aggregate h3").all_inner_texts() == ["all inputs, size 500"]
        stood = view.locator("ul.iqm .stood").all_inner_texts()
        assert stood == [
            "rte: lr=4e-05 from runs/rte/bert-base/leaderboard.json (best of 2 settings)",
            "rte: lr=4e-05 from runs/rte/minilm (best of 2 settings)",
        ]
        width = view.evaluate("document.documentElement.scrollWidth")
        assert width <= 1400, width
        view.screenshot(path=str(tmp_path / "site.png"), full_page=True)


def test_site_of_a_folder_that_is_no_run_folder_is_one_line(tmp_path: Path, capsys) -> None:  # noqa: ANN001
    """A run folder is an input (above); any other folder is one line, exit 2, nothing written."""
    (tmp_path / "runs").mkdir()
    assert main(["site", str(tmp_path / "runs"), "-o", str(tmp_path / "site")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "a folder without trials.jsonl" in err and "Traceback" not in err
    assert not (tmp_path / "site").exists()


def test_the_report_opens_offline_with_curves_per_setting(inputs: list[Path], tmp_path: Path) -> None:
    """The recipes study's report: no request beyond the file itself (`_browser` fails on one),
    and its loss and dev curves drawn one panel per setting (tests/test_plots.py checks the panels)."""
    run = inputs[2].parent
    assert main(["report", str(run)]) == 0
    assert "cdnjs" not in (run / "report.html").read_text()
    with _browser((run / "report.html").resolve()) as view:
        for heading in ("Loss curves per size and setting", "Dev curves per size and setting"):
            section = view.locator(f"h2:has-text('{heading}')")
            assert section.count() == 1
            figure = section.locator("xpath=following::img[1]")
            # one panel per recipe: three side by side (~1,330 px); one panel for all was ~600 px
            assert figure.evaluate("img => img.naturalWidth") > 1000
