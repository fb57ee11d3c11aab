"""The (size, setting) units of a study that have no score: every trial errored, was pruned or
diverged. Each output names them in one plain line, `no trial of TASK SIZE SETTING produced a
score (...)`, where its statistics would be, and gives the scored ones their usual output."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from suite.study.records import counts, final_records, scored, setting_key, setting_labels

Records = Sequence[dict[str, Any]]


def by_unit(records: Records) -> dict[tuple[str, str], list[dict[str, Any]]]:
    """(size, label of the full setting) -> its records, in order of first appearance."""
    labels = setting_labels(records)
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for r in records:
        groups.setdefault((str(r["size"]), labels[setting_key(r["hparams"])]), []).append(r)
    return groups


def no_score_lines(task: str, records: Records, model: str | None = None) -> list[str]:
    """One line per (size, setting) of `task` whose trials (every attempt, or the final records)
    produced no score, with how they ended; [] when every unit has one."""
    found = by_unit(final_records(records))  # one record per planned trial: a retry is not counted twice
    lines = []
    for (size, setting), group in found.items():
        if not scored(group):
            ended = ", ".join(f"{n} {kind}" for kind, n in counts(group).items() if n)
            whose = f"{model}: " if model else ""
            lines.append(f"no trial of {task} {size} {setting} produced a score ({whose}{ended})")
    return lines


def entry_lines(entries: Records) -> list[str]:
    """`no_score_lines` of leaderboard entries (per task and model, from each entry's runs)."""
    studies: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for e in entries:
        runs = [{**r, "size": e["size"], "hparams": e["setting"]} for r in e["runs"]]
        studies.setdefault((e["task"], e["model"]), []).extend(runs)
    return [line for (task, model), rs in studies.items() for line in no_score_lines(task, rs, model)]
