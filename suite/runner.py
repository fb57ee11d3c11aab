"""`suite run`: spec -> data -> study -> trials.jsonl and a summary table."""

from __future__ import annotations

import argparse
import json
import os
import platform
import socket
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import torch

from suite import __version__
from suite.data.paths import data_dir
from suite.errors import SpecError, SuiteError
from suite.leaderboard import write_leaderboard
from suite.provenance import file_sha256, git_commit
from suite.spec import TaskSpec, load_sweep, load_task, spec_hash
from suite.statistics import summarize
from suite.sweep import SweepSpec


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
    """Lightning Trainer options passed through to every trial (one trial may use several GPUs)."""
    names = ("accelerator", "devices", "strategy", "precision")
    return {n: getattr(args, n) for n in names if getattr(args, n, None) is not None}


def run(args: argparse.Namespace) -> list[dict[str, Any]]:
    """Plan the study into its storage, run it with local workers, write the outputs."""
    if args.offline:
        os.environ["HF_HUB_OFFLINE"] = "1"
    from suite.heads.registry import prepare_task
    from suite.models import load_encoder, load_tokenizer, model_revision
    from suite.study import enqueue_plan, open_storage, open_study, public_url, run_folder, sqlite_url

    task_path = Path(args.task)
    task = load_task(task_path, args.profile)
    sweep_path = Path(args.sweep) if args.sweep else resolve_sweep_path(task_path, task.sweep)
    sweep = load_sweep(sweep_path, args.profile)
    task, sweep = apply_overrides(task, sweep, args.size, args.seeds)
    if args.eval_split:
        task = TaskSpec.model_validate({**task.model_dump(), "eval_split": args.eval_split})
    model = args.model or task.model
    if args.workers < 1:
        raise SpecError(f"--workers: expected a positive integer, got {args.workers}")

    tokenizer = load_tokenizer(model)
    load_encoder(model)  # fail on a bad model before any data work; the weights stay cached
    prepared = prepare_task(task, data_dir(args.data_dir), tokenizer)
    folder = run_folder(Path(args.out), task, model)
    folder.mkdir(parents=True, exist_ok=True)
    url = args.storage or sqlite_url(folder)
    storage = open_storage(url)
    name = args.study or f"{task.name}|{model}|{sweep.name}|{args.profile}"
    study = open_study(storage, name, sweep, task.metric.higher_is_better)
    if "run_info" not in study.user_attrs:  # the study's creation is its provenance
        info = run_info(task, sweep, args.profile, model, model_revision(model), prepared)
        study.set_user_attr(
            "run_info", {**info, "storage": public_url(url), "trainer": trainer_options(args)}
        )
    enqueue_plan(study, task, sweep)

    if args.workers == 1:
        torch.set_num_threads(max(1, args.threads))
        run_worker(study, prepared, model, sweep, trainer_options(args), progress=not args.quiet)
    else:
        spawn_workers(args, url, name)
    return write_outputs(study, storage, folder, task, url)


def spawn_workers(args: argparse.Namespace, url: str, name: str) -> None:
    """N local worker processes on the shared storage, each with its share of the CPU threads."""
    threads = max(1, args.threads // args.workers)
    command = [
        sys.executable,
        "-m",
        "suite",
        "worker",
        "--storage",
        url,
        "--study",
        name,
        "--threads",
        str(threads),
        "--quiet",
    ]
    if args.data_dir:
        command += ["--data-dir", str(args.data_dir)]
    for option, value in trainer_options(args).items():
        command += [f"--{option}", str(value)]
    workers = [subprocess.Popen(command) for _ in range(args.workers)]
    codes = [w.wait() for w in workers]
    if any(codes):
        raise SuiteError(
            f"study {name}: {sum(1 for c in codes if c)} of {len(codes)} workers exited with an error"
        )


def run_worker(
    study: Any, prepared: Any, model: str, sweep: SweepSpec, trainer: dict[str, Any], progress: bool
) -> int:
    from tqdm.auto import tqdm

    from suite.study import finished_records, plan_trials, work

    info = study.user_attrs["run_info"]
    stamp = {
        "worker": f"{socket.gethostname()}:{os.getpid()}",
        "study": study.study_name,
        "sweep": sweep.name,
        "profile": info.get("profile"),
        "eval_split": prepared.spec.eval_split,
    }
    total = None if sweep.adaptive else len(plan_trials(prepared.spec, sweep))
    bar = tqdm(
        desc="trials", total=total, initial=len(finished_records(study)), disable=not progress, unit="trial"
    )

    def done(record: dict[str, Any]) -> None:
        score = record.get("score")
        text = f"{record['metric']}={score:.3f}" if score is not None else "no score"
        bar.set_postfix_str(text + (" FAILED" if record.get("failed") else ""))
        bar.update()

    try:
        return work(study, prepared, model, sweep, stamp, trainer, progress, on_done=done)
    finally:
        bar.close()


def worker(args: argparse.Namespace) -> int:
    """`suite worker`: join a study from another process or machine and run trials until done."""
    import optuna

    from suite.heads.registry import prepare_task
    from suite.models import load_tokenizer
    from suite.study import open_storage, public_url
    from suite.sweep import SweepSpec as Sweep

    if args.offline:
        os.environ["HF_HUB_OFFLINE"] = "1"
    torch.set_num_threads(max(1, args.threads))
    storage = open_storage(args.storage)
    try:
        study = optuna.load_study(study_name=args.study, storage=storage)
    except KeyError:
        raise SuiteError(f"--study {args.study!r}: no such study in {public_url(args.storage)}") from None
    info = study.user_attrs.get("run_info")
    if not info:
        raise SuiteError(f"study {args.study!r}: has no run info (start it with `suite run`)")
    task, sweep = TaskSpec.model_validate(info["task"]), Sweep.model_validate(info["sweep"])
    prepared = prepare_task(task, data_dir(args.data_dir), load_tokenizer(info["model"]))
    trainer = {**info.get("trainer", {}), **trainer_options(args)}
    return run_worker(study, prepared, info["model"], sweep, trainer, progress=not args.quiet)


def write_outputs(study: Any, storage: Any, folder: Path, task: TaskSpec, url: str) -> list[dict[str, Any]]:
    """trials.jsonl (every study in the storage), run.json, leaderboard.json and the summary."""
    from suite.study import export_studies, finished_records, write_jsonl

    info = study.user_attrs["run_info"]
    (folder / "run.json").write_text(json.dumps(info, indent=2) + "\n", encoding="utf-8")
    write_jsonl(folder / "trials.jsonl", [r for _, rs in export_studies(storage) for r in rs])
    write_leaderboard([url], folder / "leaderboard.json")
    records = sorted(finished_records(study).values(), key=lambda r: r.get("trial_number", 0))
    print(format_summary(task, records, folder))
    return records


def export(args: argparse.Namespace) -> None:
    """`suite export`: trials from any storage to JSONL or CSV."""
    from suite.study import export_studies, storage_of, write_jsonl

    url = storage_of(args.storage or args.run)
    records = [
        r for _, rs in export_studies(url) for r in rs if not args.study or r.get("study") == args.study
    ]
    out = Path(args.output)
    if out.suffix == ".csv":
        import pandas as pd

        pd.json_normalize(records).drop(columns=["loss_curve"], errors="ignore").to_csv(out, index=False)
    else:
        write_jsonl(out, records)
    print(f"{out}: {len(records)} trials")


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
    """One row per (size, hyperparameter setting): n, median, IQR, min, max, failed runs."""
    split = "dev" if task.eval_split == "validation" else task.eval_split
    lines = [
        f"{task.name} ({task.metric.main} x100, {split}) -> {folder / 'trials.jsonl'}",
        f"{'size':>6s} {'setting':28s} {'n':>4s} {'median':>7s} {'IQR':>7s} {'min':>7s} {'max':>7s}  failed",
    ]
    groups: dict[tuple, list[dict[str, Any]]] = {}
    for r in records:
        h = r["hparams"]
        groups.setdefault(
            (str(r["size"]), f"lr={h['lr']:g} bs={h['batch_size']} ep={h['epochs']}"), []
        ).append(r)
    for (size, setting), rows in groups.items():
        s = summarize(rows)
        a = s["all"]
        cells = (
            " ".join(f"{100 * a[k]:7.2f}" for k in ("median", "iqr", "min", "max"))
            if a.get("n")
            else "no scored runs"
        )
        lines.append(f"{size:>6s} {setting:28s} {a['n']:4d} {cells}  {s['failed']}/{s['runs']}")
    failed = [r for r in records if r.get("failed")]
    for r in failed[:5]:
        lines.append(f"  failed trial {r.get('trial_number', '?')} (seeds {r['seeds']}): {r['reason']}")
    if len(failed) > 5:
        lines.append(f"  ... and {len(failed) - 5} more failed runs (see trials.jsonl)")
    return "\n".join(lines)
