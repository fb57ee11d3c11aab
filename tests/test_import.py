"""`suite import`: runs trained elsewhere as a run folder every output command reads (docs/runs.md).
The docs' example CSV through leaderboard, site, compare and the gap to RTE's reported numbers; a
tree of Hugging Face Trainer output folders; the identity of an imported study; outcomes where no
baseline is known; and the commands that train refusing an imported folder."""

from __future__ import annotations

import csv
import hashlib
import json
import random
from pathlib import Path

import pytest

from suite.commands.cli import main
from suite.outputs.leaderboard import read_leaderboard
from suite.stats.decide import pair_up
from tests.test_site import write_run

REPO = Path(__file__).resolve().parent.parent
EXAMPLE = REPO / "examples" / "import" / "rte-30.csv"
BASELINE = "0.527"
RTE = {"labels": ["entailment", "not_entailment"]}  # a native study's task as run.json holds it


def _import(tmp_path: Path, *args: str, out: str = "imported") -> Path:
    assert main(["import", *args, "--out", str(tmp_path / out)]) == 0
    return next((tmp_path / out).glob("*/*"))


@pytest.fixture
def example(tmp_path: Path) -> Path:
    """The docs' example imported as docs/runs.md shows it (its baseline given: no data is read)."""
    return _import(
        tmp_path, str(EXAMPLE), "--task", "rte", "--model", "bert-base-uncased", "--baseline", BASELINE
    )


def _rows() -> list[dict[str, str]]:
    with EXAMPLE.open() as f:
        return list(csv.DictReader(f))


def test_the_docs_example_is_the_file_its_script_writes() -> None:
    """The shipped CSV is what examples/import/make_rte_30.py draws (a fixed seed), 30 runs."""
    import runpy

    made = runpy.run_path(str(REPO / "examples/import/make_rte_30.py"))["rows"]()
    assert [{k: str(v) for k, v in r.items()} for r in made] == _rows() and len(made) == 30


def test_the_docs_example_reads_as_the_leaderboard_the_site_and_the_gap_say(
    example: Path, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    rows = _rows()
    records = [json.loads(line) for line in (example / "trials.jsonl").read_text().splitlines()]
    assert sorted(p.name for p in example.iterdir()) == ["leaderboard.json", "run.json", "trials.jsonl"]
    info = json.loads((example / "run.json").read_text())
    assert info["imported"]["files"][0]["sha256"] == hashlib.sha256(EXAMPLE.read_bytes()).hexdigest()
    assert info["fingerprint"]["baseline"] == float(BASELINE) and len(records) == 30
    # outcomes by the failure rule, counted by hand: a score no better than the baseline failed
    failed = {
        r["size"]: sum(float(x["score"]) <= float(BASELINE) for x in rows if x["size"] == r["size"])
        for r in rows
    }
    assert main(["leaderboard", str(example), "-o", str(tmp_path / "board.json")]) == 0
    board = read_leaderboard(tmp_path / "board.json")
    assert [e["size"] for e in board["entries"]] == [64, 500, "full"]
    for entry in board["entries"]:
        assert entry["imported"] is True and entry["summary"]["runs"] == 10
        assert entry["summary"]["failed"] == failed[str(entry["size"])]
        mine = sorted(float(x["score"]) for x in rows if x["size"] == str(entry["size"]))
        assert entry["summary"]["all"]["median"] == pytest.approx((mine[4] + mine[5]) / 2)
    full = board["entries"][-1]
    (gap,) = [r for r in full["reported"] if r["comparable"]]  # BERT-base, median of 5, full data
    assert gap["model"] == "bert-base-uncased" and gap["gap"]["decidable"] and "fallback" not in gap["gap"]
    assert gap["gap"]["our_value"] == pytest.approx(100 * full["summary"]["all"]["median"])
    assert main(["site", str(example), "-o", str(tmp_path / "site")]) == 0
    page = (tmp_path / "site" / "index.html").read_text()
    assert "bert-base-uncased (imported)" in page
    sst2 = write_run(tmp_path / "native/sst2/bert-base", "sst2", "bert-base", sizes=(64,))
    assert main(["leaderboard", str(example), str(sst2), "-o", str(tmp_path / "two.json")]) == 0
    across = read_leaderboard(tmp_path / "two.json")["aggregates"]  # across tasks, at their shared size 64
    assert set(across["64"]["groups"]) == {"bert-base-uncased", "bert-base"}


def test_compare_with_a_native_study_is_unpaired_and_names_what_the_import_does_not_state(
    example: Path, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """A native RTE study at the full size with seeds 0-5 (init = order, subsample 0): the imported
    runs of seeds 1-5 carry the same seed numbers, yet no run pairs with one the suite trained."""
    native = write_run(tmp_path / "native/rte/bert-base", sizes=("full",), grid=((2e-5, 32),), task_extra=RTE)
    native_records = [json.loads(line) for line in (native / "trials.jsonl").read_text().splitlines()]
    imported = [json.loads(line) for line in (example / "trials.jsonl").read_text().splitlines()]
    same = {json.dumps(r["seeds"], sort_keys=True) for r in native_records} & {
        json.dumps(r["seeds"], sort_keys=True) for r in imported
    }
    assert len(same) == 5 and not pair_up(native_records, imported)
    capsys.readouterr()
    assert main(["compare", str(native), str(example), "--size", "full"]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[:4] == [
        "B is imported (suite import): its runs pair with no run the suite trained",
        "B states no task.eval_limit (A: full): not compared",
        "B states no task.max_length (A: 128): not compared",
        "B's data content is not hashed (scored elsewhere): the same data is assumed, not checked",
    ]
    assert "no runs with the same seeds on both sides: no paired test" in out and "Mann-Whitney" in out
    stated = _import(tmp_path, str(EXAMPLE), "--task", "rte", "--model", "bert-base-uncased", "--baseline",
                     BASELINE, "--max-length", "256", out="stated")  # fmt: skip
    assert main(["compare", str(native), str(stated)]) == 2  # what both state and differs: refused
    refused = "compare: the studies differ in task.max_length (128 vs 256): their scores are not comparable"
    assert capsys.readouterr().err == f"error: {refused}\n"


def test_compare_with_an_rte_study_the_suite_trained(
    example: Path,
    tiny_models: dict[str, Path],
    shared_data: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture,
) -> None:
    """The docs' example against RTE's smoke study, trained here on the tiny BERT (size 64, 2 seeds,
    1 epoch): the stated unpaired form at the size both hold."""
    run = [
        "run",
        "rte",
        "--model",
        str(tiny_models["bert"]),
        "--profile",
        "smoke",
        "--size",
        "64",
        "--seeds",
        "2",
    ]
    out = tmp_path / "native"
    assert main([*run, "--out", str(out), "--data-dir", str(shared_data), "--quiet", "--threads", "1"]) == 0
    native = next(out.glob("rte/*"))
    capsys.readouterr()
    assert main(["compare", str(native), str(example)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "B is imported (suite import): its runs pair with no run the suite trained"
    assert "B's data content is not hashed (scored elsewhere): the same data is assumed, not checked" in lines
    assert (
        "size 64 (runs are the unit):" in lines and "only in B (not compared): size 500; size full" in lines
    )
    assert "  no runs with the same seeds on both sides: no paired test" in lines


def test_the_gap_reads_the_head_the_runs_trained(tmp_path: Path) -> None:
    """BERT-base's reported RTE median is of the `auto` head: runs stated to train the pooler head
    are not compared with it, and the reason says so."""
    folder = _import(
        tmp_path, str(EXAMPLE), "--task", "rte", "--model", "bert-base-uncased", "--baseline", BASELINE,
        "--head", "pooler",
    )  # fmt: skip
    full = read_leaderboard(folder / "leaderboard.json")["entries"][-1]
    (bert,) = [r for r in full["reported"] if r["model"] == "bert-base-uncased"]
    assert not bert["comparable"] and bert["reasons"] == ["head: reported auto, ours pooler"]


def test_the_failure_rule_is_the_one_a_trial_is_judged_by() -> None:
    """An imported score is judged as suite/training/trial.py judges a trained run's, on either side
    of the baseline and at it, for both rules."""
    from types import SimpleNamespace

    from suite.config.task import FailureSpec, TaskSpec, load_task
    from suite.study.import_columns import Rule
    from suite.study.import_rows import judge
    from suite.training.trial import judge as trial_judge

    rte = load_task(REPO / "tasks" / "rte.yaml")
    for failure in (FailureSpec(), FailureSpec(margin=0.01), FailureSpec(rule="threshold", threshold=0.6)):
        spec = TaskSpec.model_validate({**rte.model_dump(), "failure": failure.model_dump()})
        prepared = SimpleNamespace(spec=spec, baseline={"accuracy": 0.527})
        rule = Rule("rte", "accuracy", ("accuracy",), 0.0, 1.0, True, failure.rule, failure.margin,
                    failure.threshold, 0.527, None, "auto", "validation", "m", "s")  # fmt: skip
        for score in (0.0, 0.5, 0.527, 0.53, 0.537, 0.6, 0.61, 1.0):
            assert judge(rule, score) == trial_judge(prepared, score), (failure, score)


@pytest.mark.slow
def test_report_reads_the_docs_example(example: Path, capfd: pytest.CaptureFixture) -> None:
    import nbformat

    assert main(["report", str(example)]) == 0
    notebook = nbformat.read(example / "report.ipynb", as_version=4)
    outputs = [o for c in notebook.cells if c.cell_type == "code" for o in c.get("outputs", [])]
    assert not [o for o in outputs if o.get("output_type") == "error"]
    assert sum("image/png" in o.get("data", {}) for o in outputs) >= 2  # distribution, expected max
    assert "6/10" in (example / "report.html").read_text()  # size 64's failed runs


RESULTS = {"epoch": 3.0, "eval_loss": 0.66, "eval_runtime": 1.3, "eval_samples": 277, "total_flos": 1.4e15,
           "train_loss": 0.61, "train_runtime": 118.2, "train_samples": 2490}  # fmt: skip


def _trainer_tree(root: Path) -> dict[str, tuple[float, float, int]]:
    """Six output folders as run_glue.py leaves them (`--output_dir rte_lr{lr}_seed{seed}`): their
    results, the Trainer's state and the model's config; folder -> (lr, score, seed)."""
    rng, made = random.Random(5), {}
    for lr in ("2e-05", "3e-05"):
        for seed in (11, 12, 13):
            folder = root / f"rte_lr{lr}_seed{seed}"
            folder.mkdir(parents=True)
            score = rng.uniform(0.55, 0.7)
            results = {**RESULTS, "eval_accuracy": score}
            logged = [{"epoch": 2.14, "learning_rate": 1e-5, "loss": 0.63, "step": 200}]
            state = {"epoch": 3.0, "global_step": 234, "max_steps": 234, "num_train_epochs": 3,
                     "train_batch_size": 32, "trial_params": None, "log_history": logged}  # fmt: skip
            files = {
                "eval_results.json": {
                    k: v for k, v in results.items() if k.startswith("eval") or k == "epoch"
                },
                "all_results.json": results,
                "trainer_state.json": state,
                "config.json": {"architectures": ["BertForSequenceClassification"]},
            }
            for name, content in files.items():
                (folder / name).write_text(json.dumps(content, indent=2))
            made[folder.name] = (float(lr), score, seed)
    return made


def test_a_trainer_output_tree_imports_with_its_seeds_and_hyperparameters(
    tmp_path: Path, shared_data: Path
) -> None:
    made = _trainer_tree(tmp_path / "outputs")
    folder = _import(
        tmp_path, str(tmp_path / "outputs"), "--task", "rte", "--model", "bert-base-uncased",
        "--folder-pattern", "rte_lr{lr}_seed{seed}", "--data-dir", str(shared_data),
    )  # fmt: skip
    records = [json.loads(line) for line in (folder / "trials.jsonl").read_text().splitlines()]
    assert len(records) == 6
    for r in records:
        lr, score, seed = made[r["imported"]["row"].removeprefix("folder ")]
        assert r["hparams"] == {"lr": lr, "batch_size": 32, "epochs": 3}
        assert r["seeds"] == {"init": seed, "order": seed, "subsample": 0}  # all 2,490 examples: full
        assert r["size"] == "full" and r["n_dev"] == 277 and r["score"] == score
        assert r["outcome"] == ("succeeded" if score > 146 / 277 else "failed")
    board = read_leaderboard(folder / "leaderboard.json")
    assert sorted(e["setting"]["lr"] for e in board["entries"]) == [2e-5, 3e-5]


def _write_csv(path: Path, rows: list[dict]) -> Path:
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    return path


def _runs(n: int, size: int = 64, first: int = 1) -> list[dict]:
    return [
        {"size": size, "seed": s, "lr": "2e-5", "score": round(0.55 + 0.01 * s, 3)}
        for s in range(first, first + n)
    ]


def _docs_mapping(name: str) -> str:
    """A mapping YAML as docs/runs.md shows it (the block that starts `# NAME`)."""
    text = (REPO / "docs" / "runs.md").read_text()
    return next(b for b in text.split("```yaml\n")[1:] if b.startswith(f"# {name}")).split("```")[0]


@pytest.mark.parametrize(
    ("name", "header", "rows"),
    [
        ("wandb.yaml", "Name,State,eval/accuracy,seed,max_train_samples,learning_rate,"
         "per_device_train_batch_size,num_train_epochs,Runtime",
         ["a,finished,0.61,1,,2e-05,32,3,100", "b,crashed,,2,,2e-05,32,3,5",
          "c,finished,0.64,3,500,2e-05,32,3,90"]),
        ("mlflow.yaml", "run_id,status,metrics.eval_accuracy,params.seed,params.learning_rate,"
         "params.per_device_train_batch_size", ["x,FINISHED,0.61,1,2e-05,32", "y,FAILED,,2,2e-05,32"]),
    ],
)  # fmt: skip
def test_the_docs_mappings_read_a_wandb_and_an_mlflow_export(
    name: str, header: str, rows: list[str], tmp_path: Path
) -> None:
    (tmp_path / name).write_text(_docs_mapping(name))
    (tmp_path / "export.csv").write_text("\n".join([header, *rows]) + "\n")
    folder = _import(
        tmp_path, str(tmp_path / "export.csv"), "--task", "rte", "--model", "bert-base-uncased",
        "--baseline", BASELINE, "--map", str(tmp_path / name),
    )  # fmt: skip
    records = [json.loads(line) for line in (folder / "trials.jsonl").read_text().splitlines()]
    assert [r["outcome"] for r in records] == ["succeeded", "errored", "succeeded"][: len(rows)]
    assert (
        records[0]["size"] == "full" and records[0]["hparams"]["lr"] == 2e-5 and records[0]["score"] == 0.61
    )
    assert records[0]["hparams"]["batch_size"] == 32 and records[0]["seeds"]["init"] == 1


def test_an_imported_study_is_its_identity_and_its_keys(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """Importing again changes nothing; new keys grow the study; a changed row, or another
    identity, is refused in one line and nothing is written."""
    base = ["--task", "rte", "--model", "bert-base-uncased", "--baseline", BASELINE]
    first = _write_csv(tmp_path / "a.csv", _runs(4))
    folder = _import(tmp_path, str(first), *base)
    files = {p.name: p.read_bytes() for p in folder.iterdir()}
    _import(tmp_path, str(first), *base)
    assert "nothing new in 4 rows" in capsys.readouterr().out
    assert {p.name: p.read_bytes() for p in folder.iterdir()} == files
    grown = _write_csv(tmp_path / "b.csv", _runs(3, first=4))  # seed 4 again (the same row), 5 and 6 new
    _import(tmp_path, str(grown), *base)
    records = [json.loads(line) for line in (folder / "trials.jsonl").read_text().splitlines()]
    assert [r["seeds"]["init"] for r in records] == [1, 2, 3, 4, 5, 6]
    assert [r["imported"]["file"] for r in records] == [str(first)] * 4 + [str(grown)] * 2
    assert [f["added"] for f in json.loads((folder / "run.json").read_text())["imported"]["files"]] == [4, 2]
    kept = {p.name: p.read_bytes() for p in folder.iterdir()}
    changed = _write_csv(tmp_path / "c.csv", [{**_runs(1, first=2)[0], "score": 0.6}])
    capsys.readouterr()
    assert main(["import", str(changed), *base, "--out", str(tmp_path / "imported")]) == 2
    err = capsys.readouterr().err
    assert err == (
        f"error: {changed} row 1, column score: key size=64|...|init=2,order=2,subsample=465539299 imported "
        "before (a.csv row 2), score 0.57 vs 0.6: one key with two different scores; refused (fix the row, "
        "or import into another --out)\n"
    )
    assert main(["import", str(first), *base[:-1], "0.5", "--out", str(tmp_path / "imported")]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {folder}: imported before as another study (baseline 0.527 -> 0.5)")
    assert {p.name: p.read_bytes() for p in folder.iterdir()} == kept


def test_without_a_baseline_outcomes_are_unknown_and_every_statistic_that_needs_one_says_so(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """RTE's data not reachable (an empty data folder, the hub offline) and no --baseline: no run
    is called failed or succeeded; the failure rate is unknown, and the gap test states its fallback."""
    rows = [{**r, "size": "full"} for r in _runs(5)]
    path = _write_csv(tmp_path / "runs.csv", rows)
    (tmp_path / "empty").mkdir()
    folder = _import(
        tmp_path,
        str(path),
        "--task",
        "rte",
        "--model",
        "bert-base-uncased",
        "--data-dir",
        str(tmp_path / "empty"),
    )
    out = capsys.readouterr().out
    assert "?/5" in out and "failed: unknown for every run (unknown: the task's data was not read" in out
    (entry,) = read_leaderboard(folder / "leaderboard.json")["entries"]
    summary = entry["summary"]
    assert summary["failure_rate"] is None and summary["unknown"] == 5 and summary["failed"] == 0
    assert summary["intervals"]["failure_rate"]["method"].startswith("unknown: 5 runs have no outcome")
    assert {r["outcome"] for r in entry["runs"]} == {"unknown"} and "widened" not in summary["intervals"][
        "mean"
    ]
    (gap,) = [r for r in entry["reported"] if r["comparable"]]
    assert gap["gap"]["fallback"].startswith("no failure baseline")
    native = write_run(tmp_path / "native/rte/bert-base", sizes=("full",), grid=((2e-5, 32),), task_extra=RTE)
    capsys.readouterr()
    assert main(["compare", str(native), str(folder)]) == 0
    out = capsys.readouterr().out
    assert "failures, B - A: unknown; B: outcomes unknown (imported without a baseline)" in out
    sst2 = write_run(tmp_path / "native/sst2/bert-base", "sst2", "bert-base", sizes=("full",))
    assert main(["leaderboard", str(folder), str(sst2), "-o", str(tmp_path / "two.json")]) == 0
    groups = read_leaderboard(tmp_path / "two.json")["aggregates"]["full"]["groups"]
    assert groups["bert-base-uncased"]["failure_rate"] is None  # across tasks too: not stated
    assert groups["bert-base"]["failure_rate"] == pytest.approx(2 / 6)  # write_run fails 2 runs of 6


def test_the_commands_that_train_refuse_an_imported_folder(
    example: Path, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    out = str(example.parent.parent)
    line = f"error: {example}: imported runs (suite import), not a study the suite can train"
    capsys.readouterr()
    assert main(["run", "rte", "--model", "bert-base-uncased", "--out", out, "--quiet"]) == 2
    assert main(["launch", "rte", "--model", "bert-base-uncased", "--out", out, "--executor", "local",
                 "--workers", "1", "--storage", f"sqlite:///{tmp_path}/elsewhere.db"]) == 2  # fmt: skip
    url = f"sqlite:///{example}/study.db"
    assert main(["worker", "--storage", url, "--study", "rte|bert-base-uncased|imported"]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 3 and all(e.startswith(line) for e in err), err
    assert not (example / "study.db").exists()
    assert main(["export", str(example), "-o", str(tmp_path / "x.jsonl")]) == 2
    assert "its trials.jsonl holds every record" in capsys.readouterr().err
