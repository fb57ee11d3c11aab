"""An imported study: runs trained elsewhere (`suite import`), kept as a run folder of the suite's own
records so that every output command reads them, with no storage and nothing to train.

Its identity (run.json's `fingerprint`) is the task, the mapping, and the model and evaluation
description (head, max_length, eval split, the failure rule's baseline); each row is a trial keyed
by (size, setting, seeds), with the attempt. Importing again changes nothing; new keys grow the
study; a key whose row changed is refused, naming the row. A file's sha256 is provenance only."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from suite import __version__
from suite.config.resources import resolve
from suite.config.runs_map import ImportRequest
from suite.config.task import TaskSpec, higher_is_better, load_task, metric_range, spec_hash
from suite.errors import SuiteError
from suite.study.import_columns import Columns, Rule
from suite.study.import_files import Table
from suite.study.records import read_jsonl, short_key

SWEEP = "imported"  # the sweep an imported entry names: no suite sweep planned its runs
PROVENANCE = ("imported", "trial_number")  # where and when a row came: not what the row says


@dataclass(frozen=True)
class Evaluation:
    """What an import states about its runs: the rule they are read and judged by, the task as
    run.json keeps it, where the baseline came from, and the identity they are refused against."""

    rule: Rule
    task: TaskSpec
    info_task: dict[str, Any]
    baseline_from: str
    fingerprint: dict[str, Any]


def evaluation(request: ImportRequest) -> Evaluation:
    """The task's spec with the flags' evaluation description; the failure rule's baseline from
    `--baseline`, else the task's data where it is reachable, else unknown (every outcome then is)."""
    task = load_task(resolve(request.task, "tasks", "task"))
    if request.eval_split != task.eval_split:
        task = TaskSpec.model_validate({**task.model_dump(), "eval_split": request.eval_split})
    metric = task.metric.main
    baseline, source, train_size = _baseline(task, request)
    low, high = metric_range(metric)
    head = request.head or "auto"
    rule = Rule(
        task=task.name,
        metric=metric,
        metrics=(metric, *task.metric.extra),
        low=low,
        high=high,
        higher=higher_is_better(metric),
        failure=task.failure.rule,
        margin=task.failure.margin,
        threshold=task.failure.threshold,
        baseline=baseline,
        train_size=train_size,
        head=head,
        eval_split=task.eval_split,
        model=request.model,
        study=f"{task.name}|{request.model}|{SWEEP}",
        scale=request.scale,
    )
    # What the runs were scored on is what the import was told: no max_length unless given, no
    # eval_limit subsample or QA pool (comparisons name these as not stated, docs/runs.md).
    info_task = task.model_dump(mode="json") | {"classifier": head}
    for unstated in ("max_length", "eval_limit", "qa", "sizes", "model", "sweep", "profiles"):
        info_task.pop(unstated, None)
    if request.max_length is not None:
        info_task["max_length"] = request.max_length
    identity = {
        "imported": True,
        "task": task.name,
        "task.head": task.head,
        "task.metric": metric,
        "task.labels": task.labels,
        "task.failure": task.failure.model_dump(mode="json"),
        "model": request.model,
        "head": head,
        "max_length": request.max_length,
        "eval_split": task.eval_split,
        "baseline": baseline,
        "mapping": request.mapping.identity() if request.mapping is not None else "the suite's spelling",
        "scale": request.scale,
    }
    return Evaluation(rule, task, info_task, source, identity)


def _baseline(task: TaskSpec, request: ImportRequest) -> tuple[float | None, str, int | None]:
    """(baseline, where it came from, the training set's size where the data was read: a Trainer
    folder's `train_samples` of all of it is `full`). The best
    constant prediction scores 0 on every tagging and span metric (suite/heads/registry.py) without
    reading any data; a classification task's is computed from its evaluation split's labels."""
    train_size = None
    if request.baseline is not None and not any(path.is_dir() for path in request.files):
        return float(request.baseline), "--baseline", None  # nothing to read the data for
    if task.head == "classification":
        try:
            from suite.data.classification import ClassificationData
            from suite.data.paths import data_dir
            from suite.model.metrics import trivial_baseline

            whole = task.model_copy(update={"eval_limit": None})  # their runs: scored on the whole split
            data = ClassificationData(whole, data_dir(request.data_dir), tokenizer=None)
            dev = data.labels["dev"][data.dev_indices()]
            names = [task.metric.main]
            computed = trivial_baseline(names, dev, task.regression, data.num_labels)[task.metric.main]
            train_size = len(data.labels["train"])
            source = f"the task's {task.eval_split} data"
        except Exception as err:  # unreachable data (no folder, offline hub, no labels): stated, not fatal
            computed, source = None, f"unknown: the task's data was not read ({str(err).splitlines()[0]})"
    else:
        computed, source = 0.0, f"the best constant prediction scores 0 on every {task.head} metric"
    if request.baseline is not None:
        return float(request.baseline), "--baseline", train_size
    return computed, source, train_size


def study_folder_check(
    folder: Path, fingerprint: dict[str, Any]
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """A run folder's imported study (its run.json and records), or nothing for a new one; a folder
    of a study the suite trained, or an imported one of another identity, is refused in one line."""
    info_path = folder / "run.json"
    native = (folder / "study.db").exists() or (folder / "trials.jsonl").exists() and not info_path.is_file()
    if native or (info_path.is_file() and not _is_imported(info_path)):
        raise SuiteError(
            f"{folder}: holds a study the suite trained; its runs and these are not one study: "
            "import into another --out"
        )
    if not info_path.is_file():
        return {}, []
    info = json.loads(info_path.read_text(encoding="utf-8"))
    stored = info.get("fingerprint") or {}
    differ = [k for k in sorted(set(stored) | set(fingerprint)) if stored.get(k) != fingerprint.get(k)]
    if differ:
        shown = "; ".join(f"{k} {_show(stored.get(k))} -> {_show(fingerprint.get(k))}" for k in differ)
        raise SuiteError(
            f"{folder}: imported before as another study ({shown}); its identity is the task, the mapping, "
            "the model and the evaluation: import into another --out"
        )
    trials = folder / "trials.jsonl"
    return info, read_jsonl(trials) if trials.is_file() else []


def _is_imported(info_path: Path) -> bool:
    try:
        return bool(json.loads(info_path.read_text(encoding="utf-8")).get("imported"))
    except (OSError, ValueError, AttributeError):
        return False


def _show(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, sort_keys=True)


Batch = tuple[Table, Columns, list[dict[str, Any]]]  # a table, how it was read, its records


def merged(stored: list[dict[str, Any]], batches: list[Batch]) -> tuple[list[dict[str, Any]], list[int]]:
    """The stored records, then each new (key, attempt) in the order read; returns them and how many
    each batch added. A row read twice with the same values is one; a key with two different values, in
    these files or against the stored study, is refused naming the row."""
    seen: dict[tuple[str, int], tuple[dict[str, Any], str]] = {
        (r["key"], r.get("attempt", 1)): (r, "imported before" + _from(r)) for r in stored
    }
    out, added = list(stored), []
    for table, columns, records in batches:
        added.append(0)
        score_column = columns.roles.get("score", "score")
        for i, record in enumerate(records):
            slot = (record["key"], record["attempt"])
            if slot not in seen:
                record["trial_number"] = len(out)
                out.append(record)
                seen[slot] = (record, f"given by {table.where(i)}")
                added[-1] += 1
                continue
            before, where = seen[slot]
            if (field := _differs(before, record)) is None:
                continue
            if field == "score":
                problem = (
                    f"score {before.get('score')} vs {record.get('score')}: one key with two different scores"
                )
            else:
                problem = f"{field} {_show(before.get(field))} vs {_show(record.get(field))}: a changed row"
            here = table.where(i, score_column if field == "score" else None)
            raise SuiteError(
                f"{here}: key {short_key(record['key'])} {where}, {problem}; refused (fix the row, or "
                "import into another --out)"
            )
    return out, added


def _from(record: dict[str, Any]) -> str:
    found = record.get("imported") or {}
    return f" ({Path(found['file']).name} {found['row']})" if found.get("file") else ""


def _differs(a: dict[str, Any], b: dict[str, Any]) -> str | None:
    """The first field (the score first) two records of one key disagree on, provenance aside."""
    for field in ("score", "outcome", *sorted(set(a) | set(b))):
        if field not in PROVENANCE and a.get(field) != b.get(field):
            return field
    return None


def run_info(
    previous: dict[str, Any], ev: Evaluation, tables: list[Table], added: list[int]
) -> dict[str, Any]:
    """run.json of an imported study: what leaderboard, report, site and compare read (the task,
    the model, the evaluation), its identity, and each import's files (sha256) as provenance."""
    now = datetime.now(UTC).isoformat(timespec="seconds")
    files = list((previous.get("imported") or {}).get("files", []))
    known = {f["sha256"] for f in files}
    files += [
        {"file": t.source, "kind": t.kind, "sha256": t.sha256, "rows": len(t.rows), "added": n, "date": now}
        for t, n in zip(tables, added, strict=True)
        if n or t.sha256 not in known  # a file read again that added nothing changes nothing
    ]
    return {
        "suite_version": __version__,
        "date": previous.get("date", now),
        "task": ev.info_task,
        "task_hash": spec_hash(ev.task),
        "sweep": {"name": SWEEP},
        "profile": None,
        "model": ev.rule.model,
        "model_revision": None,
        "data_origin": {"imported": "scored elsewhere: the runs' data is not hashed here"},
        "data_sha256": {},
        "baseline": {} if ev.rule.baseline is None else {ev.rule.metric: ev.rule.baseline},
        "baseline_from": ev.baseline_from,
        "git_commit": None,
        "versions": {},
        "stack": None,
        "study": ev.rule.study,
        "imported": {"files": files},
        "fingerprint": ev.fingerprint,
    }
