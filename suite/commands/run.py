"""`suite run`: spec -> data -> study -> trials.jsonl and a summary table."""

from __future__ import annotations

import dataclasses
import json
import os
import socket
import sys
import time
from pathlib import Path
from typing import Any

from suite.config.request import Request
from suite.config.task import TaskSpec
from suite.errors import SuiteError
from suite.study.setup import Setup, join_study
from suite.study.storage import public_url
from suite.study.supervise import Stopped, run_workers, stop_with_parent, stops_as_interrupts


def run(request: Request) -> int:
    """Check every input, plan the study into its storage (or resume or grow it when its
    fingerprint allows), run it with local workers, write the outputs. Returns the exit code: 0
    when every planned trial ended as a run, 1 when some trial is still errored or unfinished."""
    return run_study(request)[0]


def run_study(request: Request) -> tuple[int, Setup, list[dict[str, Any]]]:
    """`run`, also giving its setup and the final records it wrote (what `--until-*` reads).
    With several workers, the planning runs in a child process: this one, which only waits for
    the workers, then never holds torch, the data or the pre-flight's model (benchmarks/memory.py)."""
    s, study, environments, planned = (
        _planned_in_child(request) if str(request.workers) != "1" else (None, None, None, 0)
    )
    if study is None:  # one worker, in this process
        from suite.study.planning import plan_study

        s, study = plan_study(request if s is None else s.request)
        planned = _planned(s)
    assert s.folder is not None  # a planned study always has a run folder
    try:
        with stops_as_interrupts():
            if s.workers == 1:
                import torch

                torch.set_num_threads(s.threads)
                run_worker(study, s, progress=not request.quiet)
            else:
                _run_workers(s, study, environments, planned, progress=not request.quiet)
    except KeyboardInterrupt as stop:
        print(interrupted_note(study, planned, _what_became_of(stop)), file=sys.stderr)
        raise
    records = write_outputs(study, s.folder, s.task)
    return exit_status(study), s, records


def _planned_in_child(request: Request) -> tuple[Setup, Any, list[dict[str, str]] | None, int]:
    """`plan_study` in a child process: the setup without its prepared task, the study, each
    worker's environment and the planned trials (counting them imports torch); (setup, None, None,
    0) when it found that one worker is enough (`--workers auto` on one CPU or GPU, or one trial
    left): its request then asks for that one."""
    import optuna

    from suite.study.offload import in_child
    from suite.study.storage import open_storage

    s, environments, planned = in_child(_plan_for_workers, request)
    if s.workers == 1:
        return dataclasses.replace(s, request=dataclasses.replace(request, workers="1")), None, None, 0
    if request.offline:  # the workers inherit it, as from a process that planned itself
        os.environ["HF_HUB_OFFLINE"] = "1"
    return s, optuna.load_study(study_name=s.name, storage=open_storage(s.url)), environments, planned


def _plan_for_workers(request: Request) -> tuple[Setup, list[dict[str, str]], int]:
    """The child's side of `_planned_in_child`."""
    from suite.model.devices import worker_environment
    from suite.study.planning import plan_study

    s, _ = plan_study(request)
    environments = [worker_environment(i, s.trainer) for i in range(s.workers)]
    return dataclasses.replace(s, prepared=None), environments, _planned(s)


def _run_workers(
    s: Setup, study: Any, environments: list[dict[str, str]] | None, planned: int, progress: bool
) -> None:
    desc = f"trials ({s.workers} workers)"
    shown = (lambda running: watch(study, planned, s.workers, running, desc)) if progress else None
    codes = run_workers(s, study, environments, watch=shown)
    if bad := [c for c in codes if c]:
        print(
            f"study {s.name}: {len(bad)} of {len(codes)} workers exited early (codes {bad})", file=sys.stderr
        )


def _what_became_of(stop: KeyboardInterrupt) -> str:
    """The running trials of a stopped `run`: put back, or (named) waiting for their heartbeat."""
    if not isinstance(stop, Stopped) or not stop.waiting:
        return PUT_BACK
    trials = f"trial{'s' if len(stop.waiting) > 1 else ''} {', '.join(map(str, stop.waiting))}"
    return (
        f"{trials} still marked running, not put back within {stop.grace_s:.0f} s: each goes back to "
        "the queue once its heartbeat is stale"
    )


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


def watch(study: Any, planned: int, workers: int, running: Any, desc: str, poll_s: float = 2.0) -> None:
    """A progress bar until `running()` turns false: trials ended of planned, each running trial's
    epoch, step and last dev score, and the time left from the measured time per step."""
    from tqdm.auto import tqdm

    from suite.study.progress import study_progress

    with tqdm(desc=desc, total=planned, unit="trial", bar_format=BAR_FORMAT) as bar:
        while running():
            _show(bar, study_progress(study, planned, workers))
            time.sleep(poll_s)
        _show(bar, study_progress(study, planned, workers))


def _show(bar: Any, progress: Any) -> None:
    bar.total = progress.planned
    bar.update(progress.ended - bar.n)
    bar.set_postfix_str(progress.describe(), refresh=True)


def _planned(s: Setup) -> int:
    from suite.study.setup import planned_trials

    return planned_trials(s.task, s.sweep)


PUT_BACK = "a running trial went back to the queue"
# tqdm's own ETA counts completions; the postfix carries the one from the measured time per step
BAR_FORMAT = "{l_bar}{bar}| {n_fmt}/{total_fmt} [{elapsed}{postfix}]"


def interrupted_note(study: Any, planned: int, running: str = PUT_BACK) -> str:
    """What Ctrl-C leaves: trials ended, trials left, what became of the running ones, how to go on."""
    from suite.study.plan import ended_runs

    ended = len(ended_runs(study))
    left = max(0, planned - ended)
    return (
        f"interrupted: {ended} of {planned} planned trials ended, {left} left ({running}); "
        "rerun the same command to resume: ended trials are kept, not rerun"
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
    bar = tqdm(
        desc="trials",
        total=planned,
        initial=len(finished_records(study)),
        disable=not progress,
        unit="trial",
        bar_format=BAR_FORMAT,
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

    from suite.study.storage import open_storage

    stop_with_parent()  # first: whatever stop handling this process inherited, a stop reaches it
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
    import torch

    torch.set_num_threads(s.threads)
    _join_checked(study, s)
    try:
        run_worker(study, s, progress=not request.quiet)
    except KeyboardInterrupt:
        if not request.quiet:  # a worker `run` started is quiet: `run` speaks for the study
            print(interrupted_note(study, _planned(s)), file=sys.stderr)
        raise
    return 0


def _join_checked(study: Any, s: Setup) -> None:
    """Refuse a stored study this worker would not run the same way; store this worker's stack
    when the study has none yet (planned by `launch`), or mark it mixed for an allowed stack."""
    from suite.study.planning import adopt_stack, with_stack
    from suite.study.resume import resumption

    def check() -> Any:  # the study's attributes are read afresh on each call
        stored, info = study.user_attrs.get("fingerprint"), study.user_attrs.get("run_info")
        allow = s.request.allow_stack_change
        return resumption(stored, s.fingerprint, info, s.task, s.sweep, s.name, public_url(s.url), allow)

    how = check()
    if how.grown:  # `run` re-plans a study; a worker runs the plan it finds
        raise SuiteError(
            f"study {s.name!r}: its stored plan differs from its run info; rerun `suite run` first"
        )
    if how.adopt_stack and not adopt_stack(study, s):  # another worker stored its stack first
        how = check()
    if how.stack_changed:  # re-read just before writing: other workers may have added their stacks
        study.set_user_attr("run_info", with_stack(study.user_attrs["run_info"], s.stack))


def write_outputs(study: Any, folder: Path, task: TaskSpec) -> list[dict[str, Any]]:
    """The run folder's files, of this study only: run.json, trials.jsonl (every ended trial,
    every attempt), leaderboard.json and the printed summary."""
    from suite.outputs.leaderboard import write_leaderboard
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
        from suite.stats.compare import format_recipe_table, recipe_table

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


def format_summary(task: TaskSpec, records: list[dict[str, Any]], folder: Path) -> str:
    """One row per (size, full setting): runs, median, IQR, min, max, failed runs; then the
    trials that are not runs (errored, pruned) and why."""
    from suite.stats.estimates import summarize
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
