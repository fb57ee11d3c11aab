"""An imported study's run folder (`suite import`): trials.jsonl (every row as a trial record),
run.json (its identity and each import's files) and leaderboard.json, as `run` leaves a folder but
with no study.db; and the summary it prints."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from suite.config.task import TaskSpec


def write_imported(folder: Path, info: dict[str, Any], records: list[dict[str, Any]]) -> None:
    """trials.jsonl and run.json (each written whole, atomically), then the leaderboard made from
    them, so that `report` finds it current."""
    from suite.outputs.leaderboard import write_leaderboard
    from suite.study.storage import write_atomic, write_jsonl

    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        from suite.errors import SuiteError

        raise SuiteError(f"--out {folder}: cannot write here ({err.strerror or err})") from None
    write_jsonl(folder / "trials.jsonl", records)
    write_atomic(folder / "run.json", json.dumps(info, indent=2) + "\n")
    write_leaderboard([folder], folder / "leaderboard.json")


def imported_summary(task: TaskSpec, folder: Path, records: list[dict[str, Any]], unknown: str | None) -> str:
    """The table `run` prints, per (size, setting); where the outcomes are unknown (no failure
    baseline) a line says so, since the table's failed column then counts none."""
    from suite.outputs.run_folder import format_summary
    from suite.study.records import final_records

    lines = [format_summary(task, final_records(records), folder)]
    if unknown:
        lines.append(f"failed: unknown for every run ({unknown}); give --baseline to judge them")
    return "\n".join(lines)
