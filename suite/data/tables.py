"""Readers for row-per-example files: GLUE TSV, CSV and JSON Lines (hub datasets: hub.py).

GLUE TSVs are read with quoting off (RTE has unbalanced quotes) and a leading UTF-8 BOM dropped
(MRPC's header starts with one); header-less files (CoLA) take their column names from the spec.
Blank lines are skipped; any other malformed line is a one-line error naming file and line.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from suite.errors import DataError

Row = dict[str, str]


class Rows(list[Row]):
    """Rows of a file, with the line each one ends on (for error messages); `lines` is empty
    for rows that do not come from a local file (a hub split)."""

    def __init__(self, rows: Iterable[Row] = (), lines: Iterable[int] = ()) -> None:
        super().__init__(rows)
        self.lines = list(lines)

    def where(self, index: int) -> str:
        """`line N` of a row read from a file, else `row N` (1-based)."""
        return f"line {self.lines[index]}" if self.lines else f"row {index + 1}"


def read_text(path: Path) -> str:
    """A data file's text (UTF-8, a leading BOM dropped), or a one-line error naming the line
    that holds the first byte that is not UTF-8."""
    try:
        data = path.read_bytes()
    except OSError as err:
        raise DataError(f"{path}: cannot read ({err.strerror or err})") from None
    try:
        return data.decode("utf-8").removeprefix("\ufeff")
    except UnicodeDecodeError as err:
        line = data[: err.start].count(b"\n") + 1
        raise DataError(f"{path}:{line}: not UTF-8 text (byte {data[err.start]:#04x})") from None


def text_lines(text: str) -> Iterator[tuple[int, str]]:
    """(line number, line) as a file opened in text mode splits them (on \\n, \\r\\n or \\r only:
    `str.splitlines` would also split inside a token or JSON string at U+2028, U+0085, ...)."""
    return enumerate(io.StringIO(text, newline=None), start=1)


def read_rows(path: Path, fmt: str, header: bool = True, columns: list[str] | None = None) -> Rows:
    rows = _read_jsonl(path) if fmt == "jsonl" else _read_delimited(path, fmt, header, columns)
    if not rows:
        raise DataError(f"{path}: no examples")
    return rows


def _read_delimited(path: Path, fmt: str, header: bool, columns: list[str] | None) -> Rows:
    delimiter = "\t" if fmt == "tsv" else ","
    quoting = csv.QUOTE_NONE if fmt == "tsv" else csv.QUOTE_MINIMAL
    reader = csv.reader(io.StringIO(read_text(path), newline=""), delimiter=delimiter, quoting=quoting)
    names = columns if not header else next(reader, None)
    if names is None:
        raise DataError(f"{path}: no examples (an empty file)")
    rows = Rows()
    for cells in reader:
        if not cells:
            continue
        if len(cells) != len(names):
            raise DataError(f"{path}:{reader.line_num}: expected {len(names)} fields, found {len(cells)}")
        rows.append(dict(zip(names, cells, strict=True)))
        rows.lines.append(reader.line_num)
    return rows


def _read_jsonl(path: Path) -> Rows:
    rows = Rows()
    for line_no, line in text_lines(read_text(path)):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as err:
            raise DataError(f"{path}:{line_no}: not valid JSON ({err.msg})") from None
        if not isinstance(row, dict):
            raise DataError(f"{path}:{line_no}: expected a JSON object, got {type(row).__name__}")
        rows.append({k: _as_text(v) for k, v in row.items()})
        rows.lines.append(line_no)
    return rows


def _as_text(value: Any) -> Any:
    # Numbers and booleans as TSV would hold them (labels compare as text); null, lists and
    # objects stay as they are, for `require_columns` to reject.
    return str(value) if isinstance(value, bool | int | float) else value


def require_columns(rows: list[Row], names: list[str], path: str, task: str) -> None:
    """Every row has each named column, holding a value (not null, a list or an object)."""
    if rows and (missing := [n for n in names if n not in rows[0]]):
        names_found = ", ".join(repr(n) for n in rows[0])  # repr: a JSON key may hold a line break
        raise DataError(f"task {task}: {path}: no column {missing[0]!r} (columns: {names_found})")
    table = rows if isinstance(rows, Rows) else Rows(rows)
    for index, row in enumerate(rows):
        for name in names:
            value = row.get(name)
            if value is None or isinstance(value, list | dict):
                got = "no value" if value is None else f"a {type(value).__name__}"
                raise DataError(f"task {task}: {path}: {table.where(index)}: column {name!r} has {got}")
