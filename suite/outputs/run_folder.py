"""A run folder's files, of one study: run.json, trials.jsonl (every ended trial, every attempt),
leaderboard.json; the summary table `run` prints; a storage's studies exported to JSONL or CSV."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from suite.config.task import TaskSpec
from suite.errors import SuiteError


class OutputsNotWritten(SuiteError):
    """Memory ran out while the outputs were written: the trials are kept, a rerun writes them."""

    exit_code = 1


def write_outputs(study: Any, folder: Path, task: TaskSpec) -> tuple[list[dict[str, Any]], str]:
    """The run folder's files, of this study only: run.json, trials.jsonl (every ended trial,
    every attempt), leaderboard.json. Returns the final records and the summary to print (the
    table, a mixed stack, a recipe study's recipe table)."""
    try:
        return _write_outputs(study, folder, task)
    except MemoryError:
        raise OutputsNotWritten(
            f"{folder}: out of memory while writing the outputs; every ended trial is kept in the "
            "storage: rerun the same command with more memory to write them (nothing trains again)"
        ) from None


def _write_outputs(study: Any, folder: Path, task: TaskSpec) -> tuple[list[dict[str, Any]], str]:
    from suite.outputs.leaderboard import write_leaderboard
    from suite.study.plan import planned_keys, study_records
    from suite.study.records import final_records, outcome
    from suite.study.storage import write_atomic, write_jsonl

    every = study_records(study)  # parsed once: trials.jsonl and the final records both read it
    final = {r["key"]: r for r in final_records(every)}  # `plan.finished_records`, on records read
    records = sorted(final.values(), key=lambda r: r.get("trial_number", 0))
    counts = {"ended": sum(outcome(r) != "errored" for r in records), "planned": len(planned_keys(study))}
    info = {**study.user_attrs["run_info"], "fingerprint": study.user_attrs.get("fingerprint")}
    info["trials"] = counts  # ended as runs, of planned: a study stopped partway says so (`partial_note`)
    write_atomic(folder / "run.json", json.dumps(info, indent=2) + "\n")
    write_jsonl(folder / "trials.jsonl", every)
    write_leaderboard([folder], folder / "leaderboard.json")
    lines = [format_summary(task, records, folder)]
    if info.get("stack_mixed"):
        stacks = info.get("stacks", [])
        differ = sorted({k for x in stacks for k in x if len({json.dumps(y.get(k)) for y in stacks}) > 1})
        seen = " vs ".join(", ".join(f"{k} {x.get(k)}" for k in differ) for x in stacks)
        lines.append(
            f"mixed software stack (resumed with --allow-stack-change): {seen}; each trial records its own"
        )
    if any(r.get("hparams", {}).get("recipe") for r in records):  # a recipe study: its table
        from suite.stats.compare import format_recipe_table, recipe_table

        references = info.get("sweep", {}).get("references")
        lines.append(format_recipe_table(recipe_table(records, references=references), task.metric.main))
    return records, "\n".join(lines)


def partial_note(folder: Path, info: dict[str, Any] | None = None) -> str | None:
    """A line for a run folder whose study stopped partway (run.json's `trials`: fewer ended as
    runs than were planned); None when every planned trial ended, or run.json predates the count.
    `info`: run.json as read (default: read here)."""
    if info is None:
        path = folder / "run.json"
        info = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
    counts = info.get("trials") or {}
    ended, planned = counts.get("ended"), counts.get("planned")
    if ended is None or planned is None or ended >= planned:
        return None
    return (
        f"{folder}: {ended} of {planned} planned trials ended as runs (the study stopped partway, or "
        "some errored): what follows is of those; rerun its command to go on"
    )


def export(
    run: Path, storage: str | None, study: str | None, every: bool, output: Path
) -> tuple[int, list[str]]:
    """A run folder's study (or `every` study of its storage) to JSONL or CSV; returns the trials
    written and a line per (size, setting) of a study that has no score."""
    from suite.outputs.unscored import no_score_lines
    from suite.study.plan import export_studies
    from suite.study.storage import storage_of, write_jsonl

    url = storage_of(storage or run)
    name = study
    if name is None and not every and not storage:
        name = (
            json.loads((run / "run.json").read_text()).get("study") if (run / "run.json").is_file() else None
        )
    studies = export_studies(url, None if every else name)
    records = [r for _, rs in studies for r in rs]
    unscored = [
        line for info, rs in studies for line in no_score_lines(info.get("task", {}).get("name", "?"), rs)
    ]
    if output.suffix == ".csv":
        import pandas as pd

        pd.json_normalize(records).drop(columns=["loss_curve"], errors="ignore").to_csv(output, index=False)
    else:
        write_jsonl(output, records)
    return len(records), unscored


def summary_rows(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per (size, full setting): scored runs (`n`), median, IQR, min and max (when any run is
    scored), failed runs of all runs, and the trials that are not runs (errored, pruned): the
    numbers of `summarize`'s `all` block and counts, without its intervals (a table of 100 settings
    bootstrapped each for numbers it does not print: 30 s of a 10,000-run import)."""
    from suite.outputs.unscored import by_unit
    from suite.stats.estimates import spread
    from suite.study.records import counts, runs

    rows = []
    for (size, setting), group in by_unit(records).items():
        tally, ran = counts(group), runs(group)
        a = spread([r.get("score") for r in ran])
        shown = {k: a.get(k) for k in ("median", "iqr", "min", "max")} if a.get("n") else {}
        # imported runs no failure rule judged (outcome unknown): no count to print
        failed = "?" if tally["unknown"] else tally["failed"]
        found = {"failed": failed, "runs": len(ran), "errored": tally["errored"], "pruned": tally["pruned"]}
        rows.append({"size": size, "setting": setting, "n": a.get("n", 0), **shown, **found})
    return rows


def format_summary(task: TaskSpec, records: list[dict[str, Any]], folder: Path) -> str:
    """One row per (size, full setting): runs, median, IQR, min, max, failed runs; a plain line
    per (size, setting) no trial of which produced a score; then the trials that are not runs
    (errored, pruned) and why. No trial ended: one line saying so, no header."""
    from suite.outputs.unscored import no_score_lines
    from suite.study.records import outcome

    split = "dev" if task.eval_split == "validation" else task.eval_split
    title = f"{task.name} ({task.metric.main} x100, {split}) -> {folder / 'trials.jsonl'}"
    if not records:  # a table header without rows would read as a table that lost them
        return f"{title}: no trial has ended"
    lines = [
        title,
        f"{'size':>8s} {'setting':28s} {'n':>4s} {'median':>7s} {'IQR':>7s} {'min':>7s} {'max':>7s}  failed",
    ]
    for row in summary_rows(records):
        cells = (
            " ".join(f"{100 * row[k]:7.2f}" for k in ("median", "iqr", "min", "max"))
            if row["n"]
            else "no scored runs"
        )
        apart = ", ".join(f"{row[k]} {k}" for k in ("errored", "pruned") if row[k])
        lines.append(
            f"{row['size']:>8s} {row['setting']:28s} {row['n']:4d} {cells}  {row['failed']}/{row['runs']}"
            + (f"  ({apart}: not runs)" if apart else "")
        )
    lines += no_score_lines(task.name, records)
    odd = [r for r in records if outcome(r) in ("failed", "errored")]
    for r in odd[:5]:
        lines.append(f"  {outcome(r)} trial {r.get('trial_number', '?')} (seeds {r['seeds']}): {r['reason']}")
    if len(odd) > 5:
        lines.append(f"  ... and {len(odd) - 5} more failed or errored trials (see trials.jsonl)")
    return "\n".join(lines)
