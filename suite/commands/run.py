"""`suite run`: spec -> data -> study -> trials.jsonl and a summary table."""

from __future__ import annotations

import json
import os
import platform
import signal
import socket
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import torch

from suite import __version__
from suite.config.request import Request
from suite.config.sweep import SweepSpec
from suite.config.task import TaskSpec, spec_hash
from suite.data.hub import source_sha256
from suite.errors import SuiteError
from suite.model.devices import worker_environment
from suite.outputs.leaderboard import write_leaderboard
from suite.provenance import git_commit
from suite.stats.summary import summarize
from suite.study.fingerprint import STACK
from suite.study.setup import Setup, join_study, setup_study
from suite.study.storage import public_url


def run(request: Request) -> int:
    """Check every input, plan the study into its storage (or resume or grow it when its
    fingerprint allows), run it with local workers, write the outputs. Returns the exit code: 0
    when every planned trial ended as a run, 1 when some trial is still errored or unfinished."""
    return run_study(request)[0]


def run_study(request: Request) -> tuple[int, Setup, list[dict[str, Any]]]:
    """`run`, also giving its setup and the final records it wrote (what `--until-*` reads)."""
    from suite.study.plan import enqueue_plan
    from suite.study.preflight import check_writable, make_run_folder
    from suite.study.storage import open_storage

    s = setup_study(request)
    task, sweep, folder, url, name = s.task, s.sweep, s.folder, s.url, s.name
    assert folder is not None  # a run's setup always has one
    storage = open_storage(url) if request.storage else None  # reachable before anything is written
    check_writable(folder)
    make_run_folder(folder)
    storage = storage or open_storage(url)
    study = _open_or_resume(storage, s)
    if "run_info" not in study.user_attrs:  # the study's creation is its provenance
        info = run_info(task, sweep, request.profile, s.model, s.prepared)
        study.set_user_attr(
            "run_info",
            {
                **info,
                "study": name,
                "storage": public_url(url),
                "trainer": s.trainer,
                "threads": s.threads,
                "stack": s.stack,
            },
        )
    enqueue_plan(study, task, sweep)

    try:
        if s.workers == 1:
            torch.set_num_threads(s.threads)
            run_worker(study, s, progress=not request.quiet)
        else:
            spawn_workers(s, study, progress=not request.quiet)
    except KeyboardInterrupt:
        print(interrupted_note(study, _planned(s)), file=sys.stderr)
        raise
    records = write_outputs(study, folder, task)
    return exit_status(study), s, records


def _open_or_resume(storage: Any, s: Setup) -> Any:
    """The stored study when it resumes (the same plan, a grown plan, or an allowed stack change),
    a new one when none exists; else refuse before anything is written."""
    import optuna

    from suite.study.resume import resumption
    from suite.study.storage import open_study

    how = None
    if s.name in optuna.study.get_all_study_names(storage):
        existing = optuna.load_study(study_name=s.name, storage=storage)
        stored = existing.user_attrs.get("fingerprint")
        if stored is not None or existing.get_trials(deepcopy=False):  # else: killed while created
            info = existing.user_attrs.get("run_info")
            allow = s.request.allow_stack_change
            how = resumption(stored, s.fingerprint, info, s.task, s.sweep, s.name, str(s.folder), allow)
    study = open_study(storage, s.name, s.sweep, s.task.metric.higher_is_better)
    if "fingerprint" not in study.user_attrs:
        study.set_user_attr("fingerprint", s.fingerprint)
    if how is not None:
        _record_resumption(study, s, how)
    return study


def _record_resumption(study: Any, s: Setup, how: Any) -> None:
    """A grown plan becomes the study's plan (fingerprint, task and sweep: workers and later runs
    compare against it); an allowed stack change is kept as the study's list of stacks."""
    if how.adopt_stack:  # from now on its stack is checked like any other study's
        current = {k: v for k, v in s.fingerprint.items() if k.startswith(STACK)}
        study.set_user_attr("fingerprint", {**study.user_attrs["fingerprint"], **current})
    if not (how.grown or how.stack_changed):
        return
    info = dict(study.user_attrs.get("run_info") or {})
    if how.grown:
        stack = {k: v for k, v in study.user_attrs["fingerprint"].items() if k.startswith(STACK)}
        study.set_user_attr("fingerprint", {**_plan_fields(s.fingerprint), **stack})
        info.update(
            task=s.task.model_dump(mode="json"),
            task_hash=spec_hash(s.task),
            sweep=s.sweep.model_dump(mode="json"),
        )
        info["grown"] = [*info.get("grown", []), {"date": _now(), "fields": how.grown, "added": how.added}]
    if how.stack_changed:
        info = _with_stack(info, s.stack)
    study.set_user_attr("run_info", info)
    print(f"study {s.name}: {how.describe()}", file=sys.stderr)


def _with_stack(info: dict[str, Any], stack: dict[str, Any]) -> dict[str, Any]:
    """Run info marked mixed, with `stack` among the stacks its trials ran on."""
    stacks = [x for x in info.get("stacks") or [info.get("stack")] if x]
    return {**info, "stacks": stacks if stack in stacks else [*stacks, stack], "stack_mixed": True}


def _plan_fields(fingerprint: dict[str, Any]) -> dict[str, Any]:
    """The fingerprint without its stack: a grown plan keeps the study's first stack on record."""
    return {k: v for k, v in fingerprint.items() if not k.startswith(STACK)}


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def exit_status(study: Any) -> int:
    """0 when every planned trial ended as a run; 1 (and why) when some did not."""
    from suite.study.plan import finished_records, planned_keys
    from suite.study.records import outcome

    final = finished_records(study)
    errored = [r for r in final.values() if outcome(r) == "errored"]
    missing = sorted(planned_keys(study) - set(final))
    for r in errored[:5]:
        print(
            f"errored trial {r.get('trial_number', '?')} (seeds {r.get('seeds')}): {r.get('reason')}",
            file=sys.stderr,
        )
    if missing:
        print(
            f"{len(missing)} planned trials did not end (a worker died?); rerun to continue", file=sys.stderr
        )
    if errored or missing:
        print(
            f"{len(errored)} errored, {len(missing)} unfinished: rerun the same command to retry them",
            file=sys.stderr,
        )
        return 1
    return 0


def spawn_workers(s: Setup, study: Any, progress: bool = True) -> None:
    """N local worker processes on the shared storage, each with its share of the CPU threads
    (or, on GPUs, its own device).
    A worker that dies leaves its trial to the others (its heartbeat stops); the study's state,
    not the workers' exit codes, decides the run's exit code. Workers run in their own session, so
    a terminal's Ctrl-C reaches this process only: it passes SIGINT on once and waits for each
    worker to put its running trial back in the queue."""
    command = [
        sys.executable,
        "-m",
        "suite",
        "worker",
        "--storage",
        s.url,
        "--study",
        s.name,
        "--threads",
        str(s.threads),
        "--quiet",
    ]
    if s.request.data_dir:
        command += ["--data-dir", str(s.request.data_dir)]
    for option, value in s.trainer.items():
        command += [f"--{option}", str(value)]
    if s.request.allow_stack_change:
        command += ["--allow-stack-change"]
    workers = [
        subprocess.Popen(
            command, env={**os.environ, **worker_environment(i, s.trainer)}, start_new_session=True
        )
        for i in range(s.workers)
    ]
    try:
        codes = _wait(workers, study if progress else None, s)
    except KeyboardInterrupt:
        _stop(workers)
        raise
    if bad := [c for c in codes if c]:
        print(
            f"study {s.name}: {len(bad)} of {len(codes)} workers exited early (codes {bad})", file=sys.stderr
        )


def _stop(workers: list[subprocess.Popen], grace_s: float = 60.0) -> None:
    """SIGINT to each worker still running, then wait: each puts its trial back in the queue (a
    worker killed outright leaves its trial to the heartbeat, which re-queues it on the next run)."""
    for w in workers:
        if w.poll() is None:
            w.send_signal(signal.SIGINT)
    deadline = time.monotonic() + grace_s
    for w in workers:
        try:
            w.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            w.kill()


def _wait(workers: list[subprocess.Popen], study: Any, s: Setup) -> list[int]:
    """Exit codes of the worker processes; meanwhile a progress bar over the study's ended trials,
    with each running trial's epoch and step and the time left from the measured time per step."""
    if study is None:
        return [w.wait() for w in workers]
    from tqdm.auto import tqdm

    from suite.study.progress import study_progress

    planned = _planned(s)
    form = "{l_bar}{bar}| {n_fmt}/{total_fmt} [{elapsed}{postfix}]"  # tqdm's own ETA counts completions
    with tqdm(desc=f"trials ({len(workers)} workers)", total=planned, unit="trial", bar_format=form) as bar:
        while any(w.poll() is None for w in workers):
            _show(bar, study_progress(study, planned, len(workers)))
            time.sleep(2)
        _show(bar, study_progress(study, planned, len(workers)))
    return [w.returncode for w in workers]


def _show(bar: Any, progress: Any) -> None:
    bar.total = progress.planned
    bar.update(progress.ended - bar.n)
    bar.set_postfix_str(progress.describe(), refresh=True)


def _planned(s: Setup) -> int:
    from suite.study.setup import planned_trials

    return planned_trials(s.task, s.sweep)


def interrupted_note(study: Any, planned: int) -> str:
    """What Ctrl-C leaves: trials ended, trials left, and how to go on."""
    from suite.study.plan import finished_records
    from suite.study.records import outcome

    ended = sum(1 for r in finished_records(study).values() if outcome(r) != "errored")
    return (
        f"interrupted: {ended} of {planned} planned trials ended, {max(0, planned - ended)} left (a running "
        "trial went back to the queue); rerun the same command to resume: ended trials are kept, not rerun"
    )


def run_worker(study: Any, s: Setup, progress: bool) -> int:
    from tqdm.auto import tqdm

    from suite.study.plan import finished_records
    from suite.study.progress import study_progress
    from suite.study.work import work

    info = study.user_attrs["run_info"]
    stamp = {
        "worker": f"{socket.gethostname()}:{os.getpid()}",
        "study": study.study_name,
        "sweep": s.sweep.name,
        "profile": info.get("profile"),
        "eval_split": s.prepared.spec.eval_split,
        "stack": s.stack,
    }
    planned = _planned(s)
    form = "{l_bar}{bar}| {n_fmt}/{total_fmt} [{elapsed}{postfix}]"  # the ETA is from time per step
    bar = tqdm(
        desc="trials",
        total=planned,
        initial=len(finished_records(study)),
        disable=not progress,
        unit="trial",
        bar_format=form,
    )

    def done(record: dict[str, Any]) -> None:
        score = record.get("score")
        text = f"{record['metric']}={score:.3f}" if score is not None else "no score"
        eta = study_progress(study, planned, 1).describe(limit=0) if progress else ""
        bar.set_postfix_str(f"{text} {record['outcome']} | {eta}")
        bar.update()

    try:
        return work(study, s.prepared, s.model, s.sweep, stamp, s.trainer, progress, on_done=done)
    finally:
        bar.close()


def worker(request: Request) -> int:
    """`suite worker`: join a study from another process or machine and run trials until done.
    Refuses a study whose stored fingerprint differs from what this worker would run (another
    data file, model, thread count or suite version)."""
    import optuna

    from suite.study.resume import resumption
    from suite.study.storage import open_storage

    if request.offline:
        os.environ["HF_HUB_OFFLINE"] = "1"
    storage = open_storage(str(request.storage))
    try:
        study = optuna.load_study(study_name=request.study, storage=storage)
    except KeyError:
        raise SuiteError(
            f"--study {request.study!r}: no such study in {public_url(str(request.storage))}"
        ) from None
    info = study.user_attrs.get("run_info")
    if not info:
        raise SuiteError(f"study {request.study!r}: has no run info (start it with `suite run`)")
    s = join_study(request, info)
    torch.set_num_threads(s.threads)
    stored = study.user_attrs.get("fingerprint")
    how = resumption(
        stored, s.fingerprint, info, s.task, s.sweep, s.name, public_url(s.url), request.allow_stack_change
    )
    if how.grown:  # `run` re-plans a study; a worker runs the plan it finds
        raise SuiteError(
            f"study {s.name!r}: its stored plan differs from its run info; rerun `suite run` first"
        )
    if how.stack_changed:  # re-read just before writing: other workers may have added their stacks
        fresh = optuna.load_study(study_name=s.name, storage=storage).user_attrs.get("run_info") or info
        study.set_user_attr("run_info", _with_stack(fresh, s.stack))
    try:
        run_worker(study, s, progress=not request.quiet)
    except KeyboardInterrupt:
        if not request.quiet:  # a worker `run` started is quiet: `run` speaks for the study
            print(interrupted_note(study, _planned(s)), file=sys.stderr)
        raise
    return 0


def write_outputs(study: Any, folder: Path, task: TaskSpec) -> list[dict[str, Any]]:
    """The run folder's files, of this study only: run.json, trials.jsonl (every ended trial,
    every attempt), leaderboard.json and the printed summary."""
    from suite.study.plan import finished_records, study_records
    from suite.study.storage import write_atomic, write_jsonl

    info = {**study.user_attrs["run_info"], "fingerprint": study.user_attrs.get("fingerprint")}
    write_atomic(folder / "run.json", json.dumps(info, indent=2) + "\n")
    write_jsonl(folder / "trials.jsonl", study_records(study))
    write_leaderboard([folder], folder / "leaderboard.json")
    records = sorted(finished_records(study).values(), key=lambda r: r.get("trial_number", 0))
    print(format_summary(task, records, folder))
    if info.get("stack_mixed"):
        stacks = info.get("stacks", [])
        differ = sorted({k for x in stacks for k in x if len({json.dumps(y.get(k)) for y in stacks}) > 1})
        seen = " vs ".join(", ".join(f"{k} {x.get(k)}" for k in differ) for x in stacks)
        print(f"mixed software stack (resumed with --allow-stack-change): {seen}; each trial records its own")
    if any(r.get("hparams", {}).get("recipe") for r in records):  # a recipe study: its table
        from suite.stats.recipes import format_recipe_table, recipe_table

        references = info.get("sweep", {}).get("references")
        print(format_recipe_table(recipe_table(records, references=references), task.metric.main))
    return records


def export(run: Path, storage: str | None, study: str | None, every: bool, output: Path) -> None:
    """`suite export`: a run folder's study (or `every` study of its storage) to JSONL or CSV."""
    from suite.study.plan import export_studies
    from suite.study.storage import storage_of, write_jsonl

    url = storage_of(storage or run)
    name = study
    if name is None and not every and not storage:
        name = (
            json.loads((run / "run.json").read_text()).get("study") if (run / "run.json").is_file() else None
        )
    records = [r for _, rs in export_studies(url, None if every else name) for r in rs]
    if output.suffix == ".csv":
        import pandas as pd

        pd.json_normalize(records).drop(columns=["loss_curve"], errors="ignore").to_csv(output, index=False)
    else:
        write_jsonl(output, records)
    print(f"{output}: {len(records)} trials")


def run_info(task: TaskSpec, sweep: SweepSpec, profile: str, model: str, prepared: Any) -> dict[str, Any]:
    """Provenance of one study: what ran, on what data, with which versions."""
    import transformers

    from suite.model.encoders import model_revision

    return {
        "suite_version": __version__,
        "date": _now(),
        "task": task.model_dump(mode="json"),
        "task_hash": spec_hash(task),
        "sweep": sweep.model_dump(mode="json"),
        "profile": profile,
        "model": model,
        "model_revision": model_revision(model),
        "data_origin": prepared.data.origin,  # local files, or hub path/name/revision
        "data_sources": prepared.data.sources,
        "data_sha256": {k: source_sha256(v) for k, v in prepared.data.sources.items()},
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
    """One row per (size, full setting): runs, median, IQR, min, max, failed runs; then the
    trials that are not runs (errored, pruned) and why."""
    from suite.study.records import outcome, setting_key, setting_labels

    split = "dev" if task.eval_split == "validation" else task.eval_split
    lines = [
        f"{task.name} ({task.metric.main} x100, {split}) -> {folder / 'trials.jsonl'}",
        f"{'size':>6s} {'setting':28s} {'n':>4s} {'median':>7s} {'IQR':>7s} {'min':>7s} {'max':>7s}  failed",
    ]
    labels = setting_labels(records)
    groups: dict[tuple, list[dict[str, Any]]] = {}
    for r in records:
        groups.setdefault((str(r["size"]), labels[setting_key(r["hparams"])]), []).append(r)
    for (size, setting), rows in groups.items():
        s = summarize(rows)
        a = s["all"]
        cells = (
            " ".join(f"{100 * a[k]:7.2f}" for k in ("median", "iqr", "min", "max"))
            if a.get("n")
            else "no scored runs"
        )
        apart = ", ".join(f"{s[k]} {k}" for k in ("errored", "pruned") if s[k])
        lines.append(
            f"{size:>6s} {setting:28s} {a['n']:4d} {cells}  {s['failed']}/{s['runs']}"
            + (f"  ({apart}: not runs)" if apart else "")
        )
    odd = [r for r in records if outcome(r) in ("failed", "errored")]
    for r in odd[:5]:
        lines.append(f"  {outcome(r)} trial {r.get('trial_number', '?')} (seeds {r['seeds']}): {r['reason']}")
    if len(odd) > 5:
        lines.append(f"  ... and {len(odd) - 5} more failed or errored trials (see trials.jsonl)")
    return "\n".join(lines)
