"""`suite run`: spec -> data -> study -> trials.jsonl and a summary table."""

from __future__ import annotations

import argparse
import os
import platform
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import torch

from suite import __version__
from suite.data.paths import data_dir
from suite.errors import SpecError
from suite.leaderboard import write_leaderboard
from suite.provenance import file_sha256, git_commit
from suite.spec import SweepSpec, TaskSpec, load_sweep, load_task, spec_hash
from suite.statistics import summarize


def resolve_sweep_path(task_path: Path, sweep: str) -> Path:
    """A task's `sweep:` is relative to the working directory, else to the task's repo root."""
    candidates = [Path(sweep), task_path.resolve().parent.parent / sweep]
    return next((p for p in candidates if p.is_file()), candidates[0])


def apply_overrides(
    task: TaskSpec, sweep: SweepSpec, sizes: list[str] | None, seeds: int | None
) -> tuple[TaskSpec, SweepSpec]:
    """`--size` and `--seeds` re-validated through the schema, like any other input."""
    if sizes:
        parsed = [s if s == "full" else _int_size(s) for s in sizes]
        task = TaskSpec.model_validate({**task.model_dump(), "sizes": parsed})
    if seeds is not None:
        if seeds < 1:
            raise SpecError(f"--seeds: expected a positive integer, got {seeds}")
        key = {"crossed": {"init": seeds, "order": seeds}}.get(sweep.seeds.design, {"replicates": seeds})
        sweep = sweep.model_copy(update={"seeds": sweep.seeds.model_copy(update=key)})
    return task, sweep


def _int_size(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise SpecError(f"--size: expected an integer or 'full', got {text!r}") from None
    if value < 2:
        raise SpecError(f"--size: expected at least 2 examples, got {value}")
    return value


def run(args: argparse.Namespace) -> list[dict[str, Any]]:
    if args.offline:
        os.environ["HF_HUB_OFFLINE"] = "1"
    from suite.heads.registry import prepare_task
    from suite.models import load_encoder, load_tokenizer, model_revision
    from suite.study import run_folder, run_study

    torch.set_num_threads(max(1, args.threads))
    task_path = Path(args.task)
    task = load_task(task_path, args.profile)
    sweep_path = Path(args.sweep) if args.sweep else resolve_sweep_path(task_path, task.sweep)
    sweep = load_sweep(sweep_path, args.profile)
    task, sweep = apply_overrides(task, sweep, args.size, args.seeds)
    model = args.model or task.model

    tokenizer = load_tokenizer(model)
    load_encoder(model)  # fail on a bad model before any data work; the weights stay cached
    prepared = prepare_task(task, data_dir(args.data_dir), tokenizer)
    folder = run_folder(Path(args.out), task, model)
    info = run_info(task, sweep, args.profile, model, model_revision(model), prepared)
    name = f"{task.name}|{model}|{sweep.name}|{args.profile}"
    records = run_study(prepared, model, sweep, folder, name, info, progress=not args.quiet)
    write_leaderboard([folder], folder / "leaderboard.json")
    print(format_summary(task, records, folder))
    return records


def run_info(
    task: TaskSpec, sweep: SweepSpec, profile: str, model: str, revision: str | None, prepared: Any
) -> dict[str, Any]:
    """Provenance of one study: what ran, on what data, with which versions."""
    import transformers

    return {
        "suite_version": __version__,
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "task": task.model_dump(mode="json"),
        "task_hash": spec_hash(task),
        "sweep": sweep.model_dump(mode="json"),
        "profile": profile,
        "model": model,
        "model_revision": revision,
        "data_sources": prepared.data.sources,
        "data_sha256": {k: file_sha256(v) for k, v in prepared.data.sources.items()},
        "git_commit": git_commit(),
        "baseline": prepared.baseline,
        "threads": torch.get_num_threads(),
        "versions": {
            "python": platform.python_version(),
            "torch": torch.__version__,
            "transformers": transformers.__version__,
        },
    }


def format_summary(task: TaskSpec, records: list[dict[str, Any]], folder: Path) -> str:
    s = summarize(records)
    a = s["all"]
    lines = [f"{task.name} ({task.metric.main} x100, dev) -> {folder / 'trials.jsonl'}"]
    if a.get("n"):
        lines.append("    n  median     IQR     min     max  failed")
        cells = " ".join(f"{100 * a[k]:7.2f}" for k in ("median", "iqr", "min", "max"))
        lines.append(f"{a['n']:5d} {cells}  {s['failed']}/{s['runs']}")
    else:
        lines.append(f"no scored runs; failed {s['failed']}/{s['runs']}")
    for r in records:
        if r.get("failed"):
            lines.append(f"  failed {r['key']}: {r['reason']}")
    return "\n".join(lines)
