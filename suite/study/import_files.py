"""What `suite import` reads: a CSV (or TSV) or JSON-lines file of one row per run, or a tree of
Hugging Face Trainer output folders (`all_results.json` or `eval_results.json`, with
`trainer_state.json`), each as a `Table` of rows whose every error can name the file, the row and
the column. Reading only: what a row means is suite/study/import_rows.py's."""

from __future__ import annotations

import csv
import hashlib
import io
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from suite.config.runs_map import pattern_regex
from suite.errors import SuiteError
from suite.study.records import collector_paused

RESULTS = ("all_results.json", "eval_results.json")  # a Trainer folder's final metrics, either file
STATE = "trainer_state.json"
# What a Trainer's state says about a run's setting (its per-device batch, its epochs) and the
# searched parameters `hyperparameter_search` stored (`trial_params`).
STATE_FIELDS = ("train_batch_size", "num_train_epochs", "max_steps", "global_step")


@dataclass
class Table:
    """Rows of one input, in order. `kind`: csv | jsonl | trainer; `places[i]` names row i in an
    error (`row 3`, `line 5`, a folder); `sha256` is the file's content hash (a folder tree: of its
    result files), kept as provenance."""

    source: str
    kind: str
    columns: list[str]
    rows: list[dict[str, Any]]
    places: list[str]
    sha256: str

    def where(self, i: int, column: str | None = None) -> str:
        """`FILE row 3, column score`: where a bad value is, for a one-line error."""
        field = "field" if self.kind != "csv" else "column"
        return f"{self.source} {self.places[i]}" + (f", {field} {column}" if column else "")


def read_input(path: Path, max_bytes: int, pattern: str | None = None) -> Table:
    """A file as a table (`.jsonl`/`.json` JSON lines, `.tsv` tab-separated, else CSV), or a folder
    as a tree of Trainer output folders. An empty input or a file over `max_bytes` is one line."""
    if path.is_dir():
        return read_trainer_tree(path, max_bytes, pattern)
    if not path.is_file():
        raise SuiteError(f"{path}: no such file or folder")
    if (size := path.stat().st_size) > max_bytes:
        raise SuiteError(f"{path}: {size:,} bytes, over the {max_bytes:,} one imported file may hold")
    data = path.read_bytes()
    if not data.strip():
        raise SuiteError(f"{path}: empty file (no rows)")
    digest = hashlib.sha256(data).hexdigest()
    if path.suffix.lower() in (".jsonl", ".json", ".ndjson"):
        return _jsonl(path, data, digest)
    return _csv(path, data, digest, "\t" if path.suffix.lower() == ".tsv" else ",")


def _text(path: Path, data: bytes) -> str:
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        line = data[: err.start].count(b"\n") + 1
        raise SuiteError(f"{path} line {line}: not UTF-8 text (byte {data[err.start]:#04x})") from None


def _csv(path: Path, data: bytes, digest: str, delimiter: str) -> Table:
    reader = csv.reader(io.StringIO(_text(path, data), newline=""), delimiter=delimiter)
    header = next(reader, [])
    columns = [c.strip() for c in header]
    if len(set(columns)) < len(columns) or "" in columns:
        twice = next((c for c in columns if columns.count(c) > 1 or not c), "")
        raise SuiteError(
            f"{path} line 1: the header names column {twice!r} " + ("twice" if twice else "empty")
        )
    rows, places = [], []
    for number, cells in enumerate(reader, start=1):
        if not any(c.strip() for c in cells):
            continue  # a blank line is no row
        if len(cells) != len(columns):
            raise SuiteError(
                f"{path} row {number}: {len(cells)} cells under a header of {len(columns)} columns"
            )
        rows.append(dict(zip(columns, cells, strict=True)))
        places.append(f"row {number}")
    if not rows:
        raise SuiteError(f"{path}: empty file (no rows under its header)")
    return Table(str(path), "csv", columns, rows, places, digest)


def _jsonl(path: Path, data: bytes, digest: str) -> Table:
    rows, places, columns = [], [], {}
    with collector_paused():  # parsed JSON holds no cycle (records.read_jsonl)
        for number, line in enumerate(data.split(b"\n"), start=1):
            if not line.strip():
                continue
            try:
                row = orjson.loads(line)
            except orjson.JSONDecodeError:
                try:  # NaN, which older code and pandas write, is read by the standard library
                    row = json.loads(line)
                except json.JSONDecodeError as err:
                    raise SuiteError(f"{path} line {number}: not valid JSON ({err.msg})") from None
            if not isinstance(row, dict):
                raise SuiteError(
                    f"{path} line {number}: expected a JSON object (one run), got {type(row).__name__}"
                )
            rows.append(row)
            places.append(f"line {number}")
            columns.update(dict.fromkeys(row))
    return Table(str(path), "jsonl", list(columns), rows, places, digest)


def read_trainer_tree(root: Path, max_bytes: int, pattern: str | None) -> Table:
    """Every folder under `root` (itself included) holding a Trainer's final results, as one row:
    the results' metrics (`eval_accuracy`, `train_samples`, ...), the state's setting
    (`train_batch_size`, `num_train_epochs`) and searched parameters (`trial_params.learning_rate`),
    and the placeholders of `pattern` read from the folder's name (`folder.seed`)."""
    folders = sorted({p.parent for name in RESULTS for p in root.rglob(name)})
    if not folders:
        raise SuiteError(f"{root}: empty folder (no {' or '.join(RESULTS)} under it)")
    regex = pattern_regex(pattern) if pattern else None
    rows, places, columns, digest = [], [], {}, hashlib.sha256()
    for folder in folders:
        name = folder.relative_to(root).as_posix() if folder != root else folder.name
        row: dict[str, Any] = {}
        for file in (
            folder / RESULTS[0] if (folder / RESULTS[0]).is_file() else folder / RESULTS[1],
            folder / STATE,
        ):
            if file.is_file():
                found = _json_file(file, max_bytes)
                digest.update(file.read_bytes())
                row |= _state_fields(found) if file.name == STATE else found
        if regex is not None:
            match = regex.fullmatch(name) or regex.fullmatch(folder.name)
            if match is None:
                raise SuiteError(f"{folder}: its name does not match the folder pattern {pattern!r}")
            row |= {f"folder.{k}": v for k, v in match.groupdict().items() if v is not None}
        rows.append(row)
        places.append(f"folder {name}")
        columns.update(dict.fromkeys(row))
    return Table(str(root), "trainer", list(columns), rows, places, digest.hexdigest())


def _json_file(path: Path, max_bytes: int) -> dict[str, Any]:
    if (size := path.stat().st_size) > max_bytes:
        raise SuiteError(f"{path}: {size:,} bytes, over the {max_bytes:,} one imported file may hold")
    try:
        found = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise SuiteError(f"{path}: not valid JSON ({getattr(err, 'msg', err)})") from None
    if not isinstance(found, dict):
        raise SuiteError(f"{path}: expected a JSON object, got {type(found).__name__}")
    return found


def _state_fields(state: dict[str, Any]) -> dict[str, Any]:
    out = {k: state[k] for k in STATE_FIELDS if k in state}
    params = state.get("trial_params")
    if isinstance(params, dict):
        out |= {f"trial_params.{k}": v for k, v in params.items()}
    return out


def cell(row: dict[str, Any], column: str) -> Any:
    """A row's value under `column`: the column itself, else a dotted name walked through a JSON
    line's objects (`config.learning_rate`); None where it has none."""
    if column in row:
        return row[column]
    value: Any = row
    for part in column.split("."):
        if not isinstance(value, dict) or part not in value:
            return None
        value = value[part]
    return value
