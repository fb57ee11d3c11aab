"""Each user error is one line on stderr naming the file/field/trial, exit code 2."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from suite.commands.cli import main
from tests.conftest import run_tiny

REPO = Path(__file__).resolve().parent.parent


def _run_error(capsys: pytest.CaptureFixture, args: list[str]) -> str:
    assert main(args) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and "\n" not in err, err
    return err


def test_missing_data_file(capsys, tmp_path: Path) -> None:  # noqa: ANN001
    err = _run_error(
        capsys,
        [
            "run",
            str(REPO / "tasks/rte.yaml"),
            "--data-dir",
            str(tmp_path),
            "--out",
            str(tmp_path / "runs"),
            "--quiet",
        ],
    )
    assert err.strip() == (
        f"error: task rte: field 'data.local': data folder {tmp_path}/glue/RTE not found; the data directory "
        f"{tmp_path} comes from --data-dir or SUITE_DATA_DIR (a task with a hub source reads it when neither "
        "is set)"
    )
    (tmp_path / "glue/RTE").mkdir(parents=True)  # the folder, without its files
    err = _run_error(capsys, ["run", str(REPO / "tasks/rte.yaml"), "--data-dir", str(tmp_path), "--quiet",
                              "--out", str(tmp_path / "runs")])  # fmt: skip
    assert "task rte: field 'data.train': data file not found" in err and "RTE/train.tsv" in err


def test_unknown_model_offline(capsys, tmp_path: Path) -> None:  # noqa: ANN001
    err = _run_error(
        capsys,
        [
            "run",
            str(REPO / "tasks/rte.yaml"),
            "--model",
            "no-org/no-model",
            "--out",
            str(tmp_path),
            "--offline",
            "--quiet",
        ],
    )
    assert "unknown model 'no-org/no-model'" in err and "offline" in err


def test_unknown_task_field(capsys, tmp_path: Path) -> None:  # noqa: ANN001
    path = tmp_path / "t.yaml"
    path.write_text((REPO / "tasks/rte.yaml").read_text() + "epochs: 3\n")
    err = _run_error(capsys, ["run", str(path), "--out", str(tmp_path), "--quiet"])
    assert "t.yaml: field 'epochs': Extra inputs are not permitted" in err


def test_label_not_in_label_list(capsys, tiny_task: Path, tiny_models) -> None:  # noqa: ANN001
    text = tiny_task.read_text().replace("labels: ['no', 'yes']", "labels: ['no', 'maybe']")
    tiny_task.write_text(text)
    err = _run_error(
        capsys,
        [
            "run",
            str(tiny_task),
            "--model",
            str(tiny_models["bert"]),
            "--data-dir",
            str(tiny_task.parent.parent / "data"),
            "--quiet",
        ],
    )
    assert "train.tsv: line 2: label 'yes' is not in the spec's labels" in err


def test_bad_size_flag(capsys, tmp_path: Path) -> None:  # noqa: ANN001
    err = _run_error(capsys, ["run", str(REPO / "tasks/rte.yaml"), "--size", "ten", "--quiet"])
    assert "--size" in err


def test_diverging_trial_is_kept_and_the_study_goes_on(tiny_task, tiny_models, capsys) -> None:  # noqa: ANN001
    sweep = tiny_task.parent.parent / "sweeps" / "tiny.yaml"
    sweep.write_text(sweep.read_text().replace("lr: 1.0e-3", "lr: 0.9"))  # far too large
    folder = run_tiny(tiny_task, tiny_models["bert"])
    records = [json.loads(line) for line in (folder / "trials.jsonl").open()]
    assert len(records) == 3 and all("failed" in r and "reason" in r for r in records)


def test_end_to_end_on_the_tiny_task(tiny_task: Path, tiny_models, capsys) -> None:  # noqa: ANN001
    folder = run_tiny(tiny_task, tiny_models["roberta"])
    assert folder.name == "roberta"
    records = [json.loads(line) for line in (folder / "trials.jsonl").open()]
    assert len(records) == 3 and len({r["seeds"]["init"] for r in records}) == 3
    for r in records:
        assert set(r) >= {
            "hparams",
            "seeds",
            "epochs",
            "loss_curve",
            "wall_time_s",
            "tokens",
            "failed",
            "reason",
            "threads",
        }
        assert [e["epoch"] for e in r["epochs"]] == [1, 2]
    info = json.loads((folder / "run.json").read_text())
    assert info["task"]["name"] == "tiny" and info["versions"]["torch"]
    assert "median" in capsys.readouterr().out


def test_unreachable_storage_is_one_line_without_its_password(capsys, tmp_path: Path) -> None:  # noqa: ANN001
    err = _run_error(
        capsys,
        [
            "run",
            str(REPO / "tasks/rte.yaml"),
            "--out",
            str(tmp_path),
            "--offline",
            "--storage",
            "postgresql://u:secret@nohost.invalid/db",
            "--quiet",
        ],
    )
    assert "--storage 'postgresql://u:***@nohost.invalid/db': cannot open" in err and "secret" not in err


HEAVY = ["torch", "transformers", "lightning", "optuna"]
# `main` in a fresh interpreter: its exit code and the heavy modules it imported.
IMPORTS = """
import json, sys
from suite.commands.cli import main
code = main(sys.argv[2:])
print(json.dumps({"code": code, "heavy": sorted(m for m in json.loads(sys.argv[1]) if m in sys.modules)}))
"""


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (["run", "rte", "--workers", "0"], "--workers"),
        (["run", "rte", "--workers", "auto", "--threads", "0"], "--threads"),
        (["plan", "rte", "--workers", "two"], "--workers"),
        (["run", "rte", "--size", "ten"], "--size"),  # a spec error: the task's YAML is read, no model
        (["run", "rte", "--set", "max_length=-3"], "max_length"),
        (["worker", "--storage", "sqlite:///x.db", "--study", "s", "--threads", "-1"], "--threads"),
    ],
)
def test_argument_and_spec_errors_come_before_any_heavy_import(
    args: list[str], named: str, tmp_path: Path
) -> None:
    """Answered from the arguments and the YAMLs alone: one line, exit 2, and neither torch,
    transformers, lightning nor optuna imported (seconds of imports for a typo)."""
    done = subprocess.run(
        [sys.executable, "-c", IMPORTS, json.dumps(HEAVY), *args],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen == {"code": 2, "heavy": []}, done.stderr
    err = done.stderr.strip()
    assert err.startswith("error: ") and "\n" not in err and named in err, err


def test_run_with_zero_workers_is_one_line_exit_2() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "suite", "run", "rte", "--workers", "0"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr == "error: --workers: expected a positive integer or auto, got '0'\n"
