"""Study identity: a fingerprint of everything that decides a trial's result.

A study's fingerprint is stored with it when it is created. Rerunning with the same
fingerprint resumes the study; anything else is refused before any work, naming what changed,
because a result must carry everything that produced it: a changed `max_length`, an edited
data file or another model revision would otherwise be reported under the old study's scores.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from suite.errors import SuiteError

# Bump when training semantics change (optimizer, schedule, head, data order, metrics): results
# of an older version are then never resumed as if they were this version's.
# 3: whole-set length bucketing; byte-level tokenizers' prefix space from the backend.
TRAINING_CODE_VERSION = 3

# Task fields that do not touch any trial: citations of published numbers and the sweep's path
# (the sweep's content is fingerprinted itself).
_TASK_FIELDS_AFTER_TRAINING = ("reported", "sweep")
_SWEEP_LABELS = ("name", "description", "references")  # labels: they change no trial
# Sweep fields added after studies were made: left out when empty, so those studies still resume.
_SWEEP_FIELDS_ADDED = ("recipes",)


def study_fingerprint(
    task: dict[str, Any],
    sweep: dict[str, Any],
    model: dict[str, Any],
    data: dict[str, str | None],
    threads: int,
    trainer: dict[str, Any],
) -> dict[str, Any]:
    """Flat {field path: value} of the validated task and sweep (after profile and CLI
    overrides), the model identity, data file contents, thread count and Lightning options."""
    tree = {
        "code_version": TRAINING_CODE_VERSION,
        "task": {k: v for k, v in task.items() if k not in _TASK_FIELDS_AFTER_TRAINING},
        "sweep": {
            k: v
            for k, v in sweep.items()
            if k not in _SWEEP_LABELS and not (k in _SWEEP_FIELDS_ADDED and not v)
        },
        "model": model,
        "data": data,
        "threads": threads,
        "trainer": trainer,
    }
    return _flatten(json.loads(json.dumps(tree, default=str)))


def digest(fingerprint: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(fingerprint, sort_keys=True).encode()).hexdigest()[:16]


def _flatten(tree: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(tree, dict) and tree:
        out: dict[str, Any] = {}
        for key, value in tree.items():
            out.update(_flatten(value, f"{prefix}.{key}" if prefix else str(key)))
        return out
    return {prefix: tree}


def differences(stored: dict[str, Any], current: dict[str, Any], limit: int = 3) -> list[str]:
    """Changed fields as `path old -> new`, data hashes shortened."""
    changed = []
    for path in sorted(set(stored) | set(current)):
        old, new = stored.get(path, "(absent)"), current.get(path, "(absent)")
        if old != new:
            changed.append(f"{path} {_short(old)} -> {_short(new)}")
    if len(changed) > limit:
        changed = [*changed[:limit], f"(+{len(changed) - limit} more)"]
    return changed


def _short(value: Any) -> str:
    text = json.dumps(value) if not isinstance(value, str) else value
    return text[:12] if len(text) == 64 and all(c in "0123456789abcdef" for c in text) else text


def check_same_study(stored: dict[str, Any] | None, current: dict[str, Any], study: str, where: str) -> None:
    """Refuse to resume `study` when its stored fingerprint differs from what would run now."""
    if stored is None:
        raise SuiteError(
            f"study {study!r} in {where} has no fingerprint (made by an older suite): its results "
            "cannot be matched to this spec; start a new study with another --out or --study"
        )
    if changed := differences(stored, current):
        raise SuiteError(
            f"study {study!r} in {where} was run with a different spec: {'; '.join(changed)}. "
            "Its results are kept; start a new study with another --out or --study"
        )
