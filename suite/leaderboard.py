"""Leaderboard JSON: studies merged into ranked entries, validated against a versioned schema.

Ranking rule (within one task, eval split, metric and size): higher median first (lower when
the metric is lower-is-better), then lower failure rate, then lower IQR.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterable
from importlib import resources
from pathlib import Path
from typing import Any

import jsonschema

from suite import __version__
from suite.comparability import reasons_not_comparable
from suite.errors import SuiteError
from suite.examples import example_summary
from suite.provenance import git_commit
from suite.records import load_run, runs, setting_key
from suite.statistics import gap_to_reported, hyperparameter_importance, summarize

SCHEMA_VERSION = 3
RANKING_RULE = (
    "one entry per (task, model, size, setting); within (task, eval_split, metric, size): "
    "median score (direction-aware), then failure rate "
    "(lower first), then IQR (lower first); failed runs count with the score they reached "
    "(a diverged run has none); errored and pruned trials are not runs and are counted apart"
)
RUN_FIELDS = (
    "head",
    "key",
    "seeds",
    "hparams",
    "outcome",
    "failure",
    "attempt",
    "score",
    "scores",
    "failed",
    "reason",
    "wall_time_s",
)


def schema() -> dict[str, Any]:
    text = resources.files("suite").joinpath(f"schemas/leaderboard-v{SCHEMA_VERSION}.schema.json").read_text()
    return json.loads(text)


def validate(document: dict[str, Any], source: str) -> None:
    """Raise a one-line SuiteError naming the first field that breaks the schema."""
    validator = jsonschema.Draft202012Validator(schema())
    error = next(iter(sorted(validator.iter_errors(document), key=lambda e: list(e.absolute_path))), None)
    if error is not None:
        field = "/".join(str(p) for p in error.absolute_path) or "(top level)"
        raise SuiteError(f"{source}: field '{field}': {error.message}")


def read_leaderboard(path: str | Path) -> dict[str, Any]:
    path = Path(path)
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise SuiteError(f"{path}: leaderboard file not found") from None
    except json.JSONDecodeError as err:
        raise SuiteError(f"{path}: not valid JSON ({err.msg} at line {err.lineno})") from None
    validate(document, str(path))
    return document


def _entry(
    info: dict[str, Any], size: Any, records: list[dict[str, Any]], importance: dict[str, Any]
) -> dict[str, Any]:
    """One (study, size, setting): `records` are the final records of the setting's planned
    trials. Statistics use its runs only (never pooled across settings); errored and pruned
    trials are counted apart in the summary. Reported numbers are split into comparable ones
    (same-n test) and context (with the reasons)."""
    task = info["task"]
    scored = runs(records)
    metric = task["metric"]["main"]
    terms = {
        "model": info["model"],
        "hub_id": (info.get("fingerprint") or {}).get("model.hub_id"),
        "size": size,
        "metric": metric,
        "eval_split": task.get("eval_split", "validation"),
        "eval_set": next((r["eval_set"]["label"] for r in records if r.get("eval_set")), None),
        "head": _head_kind(records, task),
    }
    reported = []
    for rep in task.get("reported", []):
        reasons = reasons_not_comparable(rep, terms)
        item = {**rep, "comparable": not reasons, "reasons": reasons}
        if not reasons:
            item["gap"] = gap_to_reported(scored, rep["value"], rep["statistic"], n_runs=rep.get("n_runs"))
        reported.append(item)
    num_labels = len(task.get("labels") or []) or 2
    return {
        "rank": 1,
        "task": task["name"],
        "task_hash": info["task_hash"],
        "model": info["model"],
        "model_revision": info.get("model_revision"),
        "size": size,
        "setting": records[0]["hparams"],
        "head": terms["head"],
        "eval_set": terms["eval_set"],
        "sweep": info["sweep"]["name"],
        "profile": info.get("profile"),
        "pruner": info["sweep"].get("pruner", {}).get("type", "none"),
        "metric": metric,
        "higher_is_better": task["metric"]["higher_is_better"],
        "eval_split": task.get("eval_split", "validation"),
        "baseline": {
            "value": records[0].get("baseline"),
            "rule": "best constant prediction on the evaluation set",
        },
        "date": info["date"],
        "git_commit": info.get("git_commit"),
        "versions": info.get("versions", {}),
        "data_sha256": info.get("data_sha256", {}),
        "summary": summarize(records),
        "examples": example_summary(scored, metric, num_labels),
        "importance": importance,
        "reported": reported,
        "runs": [{k: r[k] for k in RUN_FIELDS if k in r} for r in records],
    }


def _head_kind(records: list[dict[str, Any]], task: dict[str, Any]) -> str:
    """The head as reported numbers name it: the classifier kind (`auto`, `pooler`, `cls`), a
    tagging head's `crf` or `auto` (linear, as BERT's NER), QA's `auto`."""
    if task["head"] == "classification":
        return str(records[0].get("head", "auto")).split(":")[0]
    return "crf" if task["head"] == "tagging" and task.get("tagging", {}).get("crf") else "auto"


def build(studies: Iterable[tuple[dict[str, Any], list[dict[str, Any]]]]) -> dict[str, Any]:
    entries = []
    for info, records in studies:
        if not info or not records:
            continue
        by_size: dict[Any, list[dict[str, Any]]] = defaultdict(list)
        for r in records:
            by_size[r["size"]].append(r)
        for size, at_size in by_size.items():
            importance = hyperparameter_importance(runs(at_size))  # across this size's settings
            by_setting: dict[str, list[dict[str, Any]]] = defaultdict(list)
            for r in at_size:
                by_setting[setting_key(r["hparams"])].append(r)
            entries.extend(_entry(info, size, rs, importance) for rs in by_setting.values())
    _rank(entries)
    import torch
    import transformers

    return {
        "schema_version": SCHEMA_VERSION,
        "ranking_rule": RANKING_RULE,
        "provenance": {
            "suite_version": __version__,
            "git_commit": git_commit(),
            "versions": {"torch": torch.__version__, "transformers": transformers.__version__},
        },
        "entries": entries,
    }


def _rank(entries: list[dict[str, Any]]) -> None:
    groups: dict[tuple, list[dict[str, Any]]] = defaultdict(list)
    for e in entries:
        groups[(e["task"], e["eval_split"], e["metric"], str(e["size"]))].append(e)
    for group in groups.values():

        def key(e: dict[str, Any]) -> tuple:
            s = e["summary"]
            median = s["all"].get("median", float("-inf") if e["higher_is_better"] else float("inf"))
            return (-median if e["higher_is_better"] else median, s["failure_rate"], s["all"].get("iqr", 0.0))

        for rank, e in enumerate(sorted(group, key=key), start=1):
            e["rank"] = rank
    entries.sort(key=lambda e: (e["task"], _size_order(e["size"]), e["rank"]))


def _size_order(size: Any) -> tuple[int, int]:
    """Sizes in numeric order, `full` last."""
    return (1, 0) if size == "full" else (0, int(size))


def write_leaderboard(sources: list[str | Path], out: Path) -> dict[str, Any]:
    """Merge the studies of the given run folders (each folder's own study, read from its
    run.json and trials.jsonl), validate, write atomically."""
    from suite.study import write_atomic

    document = build([load_run(source) for source in sources])
    validate(document, str(out))
    write_atomic(Path(out), json.dumps(document, indent=1, sort_keys=True) + "\n")
    return document
