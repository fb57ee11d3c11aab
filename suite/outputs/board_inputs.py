"""What a leaderboard's numbers are made from (`provenance.inputs`), and whether a leaderboard
file is current: kept apart from suite/outputs/leaderboard.py, whose statistics take a second to
import, so that `report` reads a current leaderboard without them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from suite.identity import SUITE, source_stamp, version
from suite.provenance import file_sha256

NUMERICAL = ("numpy", "scipy", "scikit-learn", "optuna")  # the statistics' libraries


def inputs(sources: list[str | Path], reference: str | None = None) -> dict[str, Any]:
    """What a leaderboard's numbers are made from: each run folder's run.json and trials.jsonl
    (sha256, in the order given), the cross-task reference, the suite's code as this process
    has it (`source_stamp`: any edit, or another checkout, is another stamp; the schema is among
    the package's files only as read by that code) and the numerical libraries' versions."""
    files = ("run.json", "trials.jsonl")
    return {
        "runs": [{name: file_sha256(Path(source) / name) for name in files} for source in sources],
        "reference": reference,
        "code": source_stamp(SUITE),
        "libraries": {name: version(name) for name in NUMERICAL},
    }


def current(out: Path, sources: list[str | Path], reference: str | None = None) -> bool:
    """Whether `out` is a leaderboard this code would write from these run folders now: its
    `provenance.inputs` are theirs (what `report` checks before building one again: at 10,000
    trials the statistics take most of its time, and `run` has just written them)."""
    try:
        found = json.loads(Path(out).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    made_from = (found.get("provenance") or {}).get("inputs") if isinstance(found, dict) else None
    return made_from == inputs(sources, reference)
