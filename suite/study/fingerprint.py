"""Study identity: a fingerprint of everything that decides a trial's result.

A study's fingerprint is stored with it when it is created. Rerunning with the same
fingerprint resumes the study; anything else is refused before any work, naming what changed,
because a result must carry everything that produced it: a changed `max_length`, an edited
data file or another model revision would otherwise be reported under the old study's scores.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from typing import Any

# Bump when training semantics change (optimizer, schedule, head, data order, metrics): results
# of an older version are then never resumed as if they were this version's.
# 3: whole-set length bucketing; byte-level tokenizers' prefix space from the backend.
TRAINING_CODE_VERSION = 3
# Per-head versions, in a fingerprint only when a planned trial uses the head: a change to one head
# refuses that head's studies and leaves the others resumable.
# auto 2: the family's head built alone under the init seed (no throwaway encoder: other initial values).
HEAD_CODE_VERSIONS = {"auto": 2}


def code_versions() -> str:
    """The training code's versions in one label, e.g. `3+auto2` (the code pin's key)."""
    return f"{TRAINING_CODE_VERSION}" + "".join(f"+{h}{v}" for h, v in sorted(HEAD_CODE_VERSIONS.items()))


# The modules whose code decides a trial's numbers: tests/test_code_pin.py pins a digest of them per
# TRAINING_CODE_VERSION, so editing them fails until the version is bumped (or the pin consciously
# updated for a change that provably keeps every number).
GPU_CODE_VERSION = 2  # 2: issue 22's GPU path (see study_fingerprint)

TRAINING_MODULES = (
    "config/sweep.py",  # hyperparameter defaults, epochs and evaluation steps, the seed streams
    "data/buckets.py",
    "data/classification.py",
    "data/conll.py",
    "data/module.py",
    "data/pieces.py",
    "data/squad.py",
    "data/subsample.py",
    "data/tables.py",
    "data/tagging.py",
    "heads/base.py",
    "heads/classification.py",
    "heads/registry.py",
    "heads/span.py",
    "heads/tagging.py",
    "model/encoders.py",
    "model/metrics.py",
    "model/optim.py",
    "model/stabilisers.py",
    "training/replicas.py",
    "training/trial.py",
)


def training_code_digest() -> str:
    """A digest of TRAINING_MODULES' syntax trees: comments, docstrings and formatting do not count."""
    import ast
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    blob = hashlib.sha256()
    for name in TRAINING_MODULES:
        tree = ast.parse((root / name).read_text())
        for node in ast.walk(tree):
            body = getattr(node, "body", None)
            if isinstance(body, list) and body and isinstance(body[0], ast.Expr):
                if isinstance(body[0].value, ast.Constant) and isinstance(body[0].value.value, str):
                    node.body = body[1:] or [ast.Pass()]
        blob.update(name.encode() + ast.dump(tree).encode())
    return blob.hexdigest()[:16]


# Task fields that do not touch any trial: citations of published numbers and the sweep's path
# (the sweep's content is fingerprinted itself).
_TASK_FIELDS_AFTER_TRAINING = ("reported", "sweep")
_SWEEP_LABELS = ("name", "description", "references")  # labels: they change no trial
# Sweep fields added after studies were made: left out when empty, so those studies still resume.
_SWEEP_FIELDS_ADDED = ("recipes",)


STACK = "stack."  # the software stack's fields in a fingerprint


def software_stack(trainer: dict[str, Any], attention: str | None) -> dict[str, Any]:
    """What decides a trial's numerics besides the spec: library versions, the CPU kernels torch
    dispatches to, the attention implementation, and on a GPU the device and its precision flags."""
    import platform
    from importlib import metadata

    import torch

    names = ("torch", "transformers", "tokenizers", "lightning", "datasets", "numpy")
    stack: dict[str, Any] = {"python": platform.python_version()}
    for name in names:
        try:
            stack[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            stack[name] = None
    stack["cpu_capability"] = torch.backends.cpu.get_cpu_capability()
    stack["attention"] = attention
    if trainer.get("accelerator") == "gpu":
        stack["gpu"] = torch.cuda.get_device_name()
        stack["tf32_matmul"] = torch.backends.cuda.matmul.allow_tf32
        stack["tf32_cudnn"] = torch.backends.cudnn.allow_tf32
        stack["bf16_reduced_precision"] = torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction
    return stack


def study_fingerprint(
    task: dict[str, Any],
    sweep: dict[str, Any],
    model: dict[str, Any],
    data: dict[str, str | None],
    threads: int,
    trainer: dict[str, Any],
    stack: dict[str, Any] | None = None,
    heads: Iterable[str] = (),
) -> dict[str, Any]:
    """Flat {field path: value} of the validated task and sweep (after profile and CLI
    overrides), the model identity, data file contents, thread count, Lightning options and the
    software stack; `heads`: the classifiers its trials use (their own code versions)."""
    versioned = {h: HEAD_CODE_VERSIONS[h] for h in sorted(set(heads)) if h in HEAD_CODE_VERSIONS}
    tree = {
        "code_version": TRAINING_CODE_VERSION,
        **({"head_code": versioned} if versioned else {}),
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
        # The GPU path's own version: CPU records stayed bit-identical when it changed (fp32 output
        # layers, whole batches, deferred loss reads), so CPU studies still resume; GPU ones do not.
        **({"gpu_code": GPU_CODE_VERSION} if trainer.get("accelerator") == "gpu" else {}),
        **({"stack": stack} if stack else {}),
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


def refusal(study: str, where: str, changed: list[str] | None) -> str:
    """Why a stored study is not resumed: no fingerprint (`changed` None), or what changed."""
    if changed is None:
        return (
            f"study {study!r} in {where} has no fingerprint (made by an older suite): its results "
            "cannot be matched to this spec; start a new study with another --out or --study"
        )
    return (
        f"study {study!r} in {where} was run with a different spec: {'; '.join(changed)}. "
        "Its results are kept; start a new study with another --out or --study"
    )
