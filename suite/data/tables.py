"""Readers for row-per-example files: GLUE TSV, CSV and JSON Lines; or a hub dataset.

GLUE TSVs are read with quoting off (RTE has unbalanced quotes) and `utf-8-sig` (MRPC's
header starts with a BOM); header-less files (CoLA) take their column names from the spec.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

from suite.errors import DataError

Row = dict[str, str]


def read_rows(path: Path, fmt: str, header: bool = True, columns: list[str] | None = None) -> list[Row]:
    if fmt == "jsonl":
        return _read_jsonl(path)
    delimiter = "\t" if fmt == "tsv" else ","
    quoting = csv.QUOTE_NONE if fmt == "tsv" else csv.QUOTE_MINIMAL
    with path.open(encoding="utf-8-sig", newline="") as handle:
        reader = csv.reader(handle, delimiter=delimiter, quoting=quoting)
        names = columns if not header else next(reader, None)
        if names is None:
            raise DataError(f"{path}: empty file")
        rows = []
        for line_no, cells in enumerate(reader, start=2 if header else 1):
            if not cells:
                continue
            if len(cells) != len(names):
                raise DataError(f"{path}:{line_no}: expected {len(names)} fields, found {len(cells)}")
            rows.append(dict(zip(names, cells, strict=True)))
    return rows


def _read_jsonl(path: Path) -> list[Row]:
    rows = []
    with path.open(encoding="utf-8") as handle:
        for line_no, line in enumerate(handle, start=1):
            if line.strip():
                try:
                    rows.append(json.loads(line))
                except json.JSONDecodeError as err:
                    raise DataError(f"{path}:{line_no}: not valid JSON ({err.msg})") from None
    return rows


def read_hub_split(path: str, name: str | None, revision: str | None, split: str) -> list[Row]:
    """A split of a Hugging Face hub dataset (needs network or a warm HF cache)."""
    import datasets

    try:
        data = datasets.load_dataset(path, name, revision=revision, split=split)
    except Exception as err:  # the hub raises many kinds; all mean "not available here"
        first = str(err).splitlines()[0] if str(err) else type(err).__name__
        raise DataError(f"hub dataset {path}/{name} split {split}: not available ({first})") from None
    return [dict(row) for row in data]


def require_columns(rows: list[Row], names: list[str], path: str, task: str) -> None:
    if rows and (missing := [n for n in names if n not in rows[0]]):
        raise DataError(f"task {task}: {path}: no column {missing[0]!r} (columns: {', '.join(rows[0])})")
