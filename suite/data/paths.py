"""Where the benchmark data lives: `--data-dir`, else `SUITE_DATA_DIR`."""

from __future__ import annotations

import os
from pathlib import Path

from suite.errors import DataError

ENV_VAR = "SUITE_DATA_DIR"


def data_dir(flag: str | Path | None = None) -> Path | None:
    value = flag or os.environ.get(ENV_VAR)
    return Path(value).expanduser() if value else None


def local_file(root: Path | None, folder: str, name: str | None, field: str, task: str) -> Path:
    """The path of one split's file, or a one-line error naming task, field and path."""
    if name is None:
        raise DataError(f"task {task}: field 'data.{field}': no {field} file is named in the spec")
    if root is None:
        raise DataError(
            f"task {task}: field 'data.local' needs a data directory; set {ENV_VAR} or --data-dir"
        )
    if not (root / folder).is_dir():
        raise DataError(
            f"task {task}: field 'data.local': data folder {root / folder} not found; the data "
            f"directory {root} comes from --data-dir or {ENV_VAR} (a task with a hub source reads it "
            "when neither is set)"
        )
    path = root / folder / name
    if not path.is_file():
        name = field if "." in field else f"data.{field}"
        raise DataError(f"task {task}: field '{name}': data file not found: {path}")
    return path
