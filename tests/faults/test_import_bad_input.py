"""Bad input to `suite import`: each case is one `error:` line naming the file, the row and the
column (where there is one), exit code 2, no traceback, and nothing written. The runs are RTE's with
`--baseline`, so no case reads the benchmark data."""

from __future__ import annotations

from pathlib import Path

import pytest

from suite.commands.cli import main
from suite.config import runs_map

HEADER = "size,seed,lr,score\n"
GOOD = "64,1,2e-5,0.61\n64,2,2e-5,0.58\n"
KEY = "size=64|...|init=1,order=1,subsample=465539299"
CASES = {
    "missing score": (HEADER + "64,1,2e-5,0.61\n64,2,2e-5,\n", "{f} row 2, column score: missing score"),
    "non-numeric score": (HEADER + "64,1,2e-5,abc\n", "{f} row 1, column score: score 'abc' is not a number"),
    "out of range": (
        HEADER + "64,1,2e-5,66.8\n",
        "{f} row 1, column score: score 66.8 is outside accuracy's range [0, 1]; scores on 0-100? give "
        "--scale 100",
    ),
    "one key, two scores": (
        HEADER + "64,1,2e-5,0.61\n64,2,2e-5,0.58\n64,1,2.0e-05,0.57\n",
        f"{{f}} row 3, column score: key {KEY} given by {{f}} row 1, score 0.61 vs 0.57: one key with two "
        "different scores; refused (fix the row, or import into another --out)",
    ),
    "non-numeric size": (
        HEADER + "sixty-four,1,2e-5,0.61\n",
        "{f} row 1, column size: size 'sixty-four' is not a number of examples (at least 2), full or K/class",
    ),
    "unknown column": (
        "size,seed,lr,score,notes\n64,1,2e-5,0.61,ok\n",
        "{f}: unknown column 'notes' (not a hyperparameter or a field of the suite's records); map the "
        "columns (--map FILE, or --score, --seed, --size, --hparam NAME=COLUMN)",
    ),
    "empty file": ("", "{f}: empty file (no rows)"),
    "only a header": (HEADER, "{f}: empty file (no rows under its header)"),
    "a bad hyperparameter": (
        HEADER + "64,1,2,0.61\n",
        "{f} row 1, column lr: hyperparameter lr: Input should be less than 1",
    ),
    "a seed that is not a whole number": (
        HEADER + "64,1.5,2e-5,0.61\n",
        "{f} row 1, column seed: seed (init) 1.5 is not a whole number in [0, 2^32)",
    ),
}


def _import(tmp_path: Path, path: Path, *extra: str) -> int:
    args = ["import", str(path), "--task", "rte", "--model", "bert-base-uncased", "--baseline", "0.527"]
    return main([*args, "--out", str(tmp_path / "runs"), *extra])


@pytest.mark.parametrize("case", list(CASES))
def test_bad_input_is_one_line_naming_file_row_and_column(
    case: str, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    text, line = CASES[case]
    path = tmp_path / "runs.csv"
    path.write_text(text)
    assert _import(tmp_path, path) == 2
    captured = capsys.readouterr()
    assert captured.err == f"error: {line.format(f=path)}\n" and not captured.out
    assert not (tmp_path / "runs").exists()  # nothing written


def test_a_file_over_the_stated_size_is_refused_before_it_is_read(
    tmp_path: Path, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "runs.csv"
    path.write_text(HEADER + GOOD)
    monkeypatch.setattr(runs_map, "MAX_FILE_BYTES", 40)
    assert _import(tmp_path, path) == 2
    size = path.stat().st_size
    assert (
        capsys.readouterr().err == f"error: {path}: {size:,} bytes, over the 40 one imported file may hold\n"
    )
    assert not (tmp_path / "runs").exists()


def test_the_right_scale_reads_what_the_range_check_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    path = tmp_path / "runs.csv"
    path.write_text(HEADER + "64,1,2e-5,66.8\n64,2,2e-5,52.7\n")
    assert _import(tmp_path, path, "--scale", "100") == 0
    trials = (tmp_path / "runs" / "rte" / "bert-base-uncased" / "trials.jsonl").read_text()
    assert '"score": 0.668' in trials and '"outcome": "failed"' in trials  # 52.7 / 100: the baseline


def test_a_bad_line_of_a_jsonl_file_and_a_bad_mapping_are_named(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    path = tmp_path / "runs.jsonl"
    path.write_text('{"size": 64, "seed": 1, "score": 0.6}\n\n{"size": 64, "seed": 2, "score": 0.6\n')
    assert _import(tmp_path, path) == 2
    assert capsys.readouterr().err.startswith(f"error: {path} line 3: not valid JSON (")
    path.write_text('{"size": 64, "seed": 1, "score": 0.6}\n')
    mapping = tmp_path / "map.yaml"
    mapping.write_text("score: acc\nseed: run\nsize: n\nunknown: x\n")
    assert _import(tmp_path, path, "--map", str(mapping)) == 2
    assert capsys.readouterr().err == f"error: {mapping}: field 'unknown': Extra inputs are not permitted\n"
    mapping.write_text("score: acc\nseed: run\n")
    assert _import(tmp_path, path, "--map", str(mapping)) == 2
    assert capsys.readouterr().err == f"error: {path}: no column 'acc' (mapped as score)\n"
    assert not (tmp_path / "runs").exists()
