"""What `run` and `plan` share: the specs after every override, and a study as `run` would run
it (model, data, pre-flight, fingerprint, folder, storage URL, name), before anything is written."""

from __future__ import annotations

import argparse
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from suite.data.paths import data_dir
from suite.devices import resolve_trainer, resolve_workers
from suite.errors import SpecError
from suite.spec import TaskSpec, load_sweep, load_task
from suite.sweep import SweepSpec


def load_specs(args: argparse.Namespace) -> tuple[Path, TaskSpec, Path, SweepSpec]:
    """The task (a file or a name) and its sweep, with the profile, `--set` overrides, `--size`,
    `--seeds` and `--eval-split` applied and validated: what `run` and `plan` use."""
    from suite.overrides import parse_sets
    from suite.resources import resolve, resolve_sweep_path

    task_sets, sweep_sets = parse_sets(args.set)
    task_path = resolve(args.task, "tasks", "task")
    task = load_task(task_path, args.profile, task_sets)
    sweep_path = (
        resolve(args.sweep, "sweeps", "--sweep") if args.sweep else resolve_sweep_path(task_path, task.sweep)
    )
    sweep = load_sweep(sweep_path, args.profile, sweep_sets)
    task, sweep = apply_overrides(task, sweep, args.size, args.seeds)
    if args.eval_split:
        task = TaskSpec.model_validate({**task.model_dump(), "eval_split": args.eval_split})
    return task_path, with_model_head(task, args.model or task.model), sweep_path, sweep


def with_model_head(task: TaskSpec, model: str) -> TaskSpec:
    """`classifier: model` made concrete for the model that runs, so the study's record and
    fingerprint name the head that trained (a changed default is then a changed study)."""
    from suite.models import default_head

    if task.classifier != "model":
        return task
    return task.model_copy(update={"classifier": default_head(model)})


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
        key = {"crossed": {"init": seeds, "order": seeds}}.get(sweep.seeds.design, {"repeats": seeds})
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


def trainer_options(args: argparse.Namespace) -> dict[str, Any]:
    """Lightning Trainer options given on the command line (`resolve_trainer` completes them)."""
    names = ("accelerator", "devices", "strategy", "precision")
    return {n: getattr(args, n) for n in names if getattr(args, n, None) is not None}


@dataclass
class StudySetup:
    """A study as `run` would run it, checked before anything is written: `run` and `plan`."""

    task_path: Path
    task: TaskSpec
    sweep: SweepSpec
    model: str
    prepared: Any  # PreparedTask
    threads: int  # per worker: part of the study's identity
    trainer: dict[str, Any]
    fingerprint: dict[str, Any]
    folder: Path
    url: str
    name: str


def setup_study(args: argparse.Namespace) -> StudySetup:
    """Specs, model, data and pre-flight of every planned trial; the study's fingerprint,
    folder, storage URL and name. Reads only (and fills the feature cache)."""
    if args.offline:
        os.environ["HF_HUB_OFFLINE"] = "1"
    from suite.heads.registry import prepare_task
    from suite.models import load_encoder, load_tokenizer
    from suite.preflight import check_planned_inputs
    from suite.stabilisers import check_sweep
    from suite.study import run_folder, sqlite_url

    task_path, task, sweep_path, sweep = load_specs(args)
    model = args.model or task.model
    if args.threads < 1:
        raise SpecError(f"--threads: expected a positive integer, got {args.threads}")
    trainer = resolve_trainer(trainer_options(args))
    args.workers = resolve_workers(args.workers, trainer, args.threads)

    tokenizer = load_tokenizer(model)
    # A bad model, or a stabiliser it cannot take, fails before any data work; the weights stay cached.
    check_sweep(load_encoder(model), sweep, sweep_path, task.head, task.classifier)
    prepared = prepare_task(task, data_dir(args.data_dir), tokenizer)
    check_planned_inputs(prepared, sweep, task_path)
    threads = max(1, args.threads // args.workers)
    folder = run_folder(Path(args.out), task, model)
    return StudySetup(
        task_path,
        task,
        sweep,
        model,
        prepared,
        threads,
        trainer,
        fingerprint_of(prepared, sweep, model, threads, trainer),
        folder,
        args.storage or sqlite_url(folder),
        args.study or f"{task.name}|{model}|{sweep.name}|{args.profile}",
    )


def fingerprint_of(
    prepared: Any, sweep: SweepSpec, model: str, threads: int, trainer: dict[str, Any]
) -> dict[str, Any]:
    from suite.fingerprint import study_fingerprint
    from suite.models import model_identity
    from suite.preflight import data_hashes

    task = prepared.spec.model_dump(mode="json")
    return study_fingerprint(
        task, sweep.model_dump(mode="json"), model_identity(model), data_hashes(prepared), threads, trainer
    )
