"""Leaderboard JSON: studies merged into ranked entries, validated against a versioned schema.

Ranking rule (within one rank group: task, eval split, metric, size, evaluation set and its
subsample, max_length and data content): higher median first (lower when the metric is
lower-is-better), then lower failure rate, then lower IQR. Entries that differ in any of those
are not ranked against each other; each entry stores its group (`rank_group`).
"""

from __future__ import annotations

import json
import re
import uuid
from collections import defaultdict
from collections.abc import Callable, Iterable
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

import fastjsonschema
import jsonschema

from suite import __version__
from suite.config.task import higher_is_better, size_order
from suite.errors import SuiteError
from suite.identity import version
from suite.outputs.board_inputs import current, inputs  # noqa: F401 (leaderboard.current)
from suite.provenance import git_commit
from suite.stats.compare import (
    RANK_FIELDS,
    data_digest,
    rank_group_key,
    reasons_not_comparable,
    subsample_note,
    subsample_sd,
)
from suite.stats.estimates import example_summary, gap_to_reported, hyperparameter_importance, summarize
from suite.study.records import load_run, runs, setting_key

SCHEMA_VERSION = 5
RANKING_RULE = (
    "one entry per (task, model, size, setting); ranked only within a rank group (task, eval_split, "
    "metric, size, evaluation set, eval_limit subsample, max_length, data content digest): "
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


@cache
def _compiled() -> Callable[[Any], Any]:
    """The schema compiled to Python by fastjsonschema: a 10,000-run leaderboard in 0.1 s, where
    jsonschema's interpreter takes seconds. It reads the schema as draft 7, which means the same
    for every keyword the schema uses (no `$ref` beside other keywords); a test holds the two
    validators to one verdict."""
    return fastjsonschema.compile(schema(), use_default=False, use_formats=False)  # as jsonschema: reads only


def validate(document: dict[str, Any], source: str) -> None:
    """Raise a one-line SuiteError naming the first field that breaks the schema: the compiled
    check first, then jsonschema only for a document it refuses (its message names the field)."""
    try:
        _compiled()(document)
        return
    except fastjsonschema.JsonSchemaException as fast:
        refused = fast.message
    validator = jsonschema.Draft202012Validator(schema())
    error = next(iter(sorted(validator.iter_errors(document), key=lambda e: list(e.absolute_path))), None)
    if error is None:
        raise SuiteError(f"{source}: {refused}")
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


def _evaluation(info: dict[str, Any], records: list[dict[str, Any]]) -> dict[str, Any]:
    """What the entry was scored on: the QA pool label (None: the task's own split), the
    `eval_limit` subsample (None when the limit covers the whole set) and the examples scored."""
    task = info["task"]
    scored = [len(next(iter(r["per_example"].values()))) for r in records if r.get("per_example")]
    examples = scored[0] if scored else next((r["n_dev"] for r in records if r.get("n_dev")), None)
    limit = task.get("eval_limit")
    if limit and examples is not None and examples < limit:  # fewer examples than the limit: all of them
        limit = None
    return {
        "eval_set": next((r["eval_set"]["label"] for r in records if r.get("eval_set")), None),
        "eval_limit": limit,
        "eval_examples": examples,
    }


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
    examples = example_summary(scored, metric, len(task.get("labels") or []) or 2)
    terms = {
        "model": info["model"],
        "hub_id": (info.get("fingerprint") or {}).get("model.hub_id"),
        "size": size,
        "metric": metric,
        "eval_split": task.get("eval_split", "validation"),
        "head": _head_kind(records, task),
        "max_length": task.get("max_length"),
        **_evaluation(info, records),
    }
    # The subsample's own sampling error: a shared offset of all our runs from the full set's score.
    subsampled = terms["eval_limit"] and not terms["eval_set"]
    terms["eval_sd"] = subsample_sd(examples["dev_se_median"], terms["eval_examples"]) if subsampled else None
    data = data_digest(info.get("data_sha256") or {}, info.get("data_origin"))
    return {
        "rank": 1,
        "rank_group": {
            "task": task["name"],
            "data": data,
            **{k: terms[k] for k in RANK_FIELDS if k in terms},
        },
        "task": task["name"],
        "task_hash": info["task_hash"],
        "model": info["model"],
        "model_revision": info.get("model_revision"),
        "size": size,
        "setting": records[0]["hparams"],
        "head": terms["head"],
        **{k: terms[k] for k in ("eval_set", "eval_limit", "eval_examples", "eval_sd", "max_length")},
        "sweep": info["sweep"]["name"],
        "profile": info.get("profile"),
        "pruner": info["sweep"].get("pruner", {}).get("type", "none"),
        "metric": metric,
        "higher_is_better": higher_is_better(metric),  # the metric's own, never a spec's choice
        "eval_split": terms["eval_split"],
        "baseline": {
            "value": records[0].get("baseline"),
            "rule": "best constant prediction on the evaluation set",
        },
        "date": info["date"],
        "git_commit": info.get("git_commit"),
        "versions": info.get("versions", {}),
        "stack": _stack(info),
        "data_origin": info.get("data_origin"),
        "data_sha256": info.get("data_sha256", {}),
        "summary": summarize(records),
        "examples": examples,
        "importance": importance,
        "reported": [_reported(rep, terms, scored) for rep in task.get("reported", [])],
        "runs": [{k: r[k] for k in RUN_FIELDS if k in r} for r in records],
        **({"imported": True} if info.get("imported") else {}),  # trained elsewhere (`suite import`)
    }


def _stack(info: dict[str, Any]) -> dict[str, Any]:
    """The software stacks the study's trials ran on: `mixed` when it was resumed on another one
    (`--allow-stack-change`); each trial's own stack is in its record."""
    stacks = info.get("stacks") or ([info["stack"]] if info.get("stack") else [])
    return {"mixed": bool(info.get("stack_mixed")), "stacks": stacks}


def _reported(rep: dict[str, Any], terms: dict[str, Any], scored: list[dict[str, Any]]) -> dict[str, Any]:
    """A reported number with `comparable` and its `reasons`; a comparable one gets its `gap`
    (with the subsample's sampling error when ours is an eval_limit subsample) and `notes`."""
    reasons = reasons_not_comparable(rep, terms)
    item = {**rep, "comparable": not reasons, "reasons": reasons}
    if not reasons:
        eval_sd = terms["eval_sd"] or 0.0  # 0: scored on the whole split, as the reported number
        item["gap"] = gap_to_reported(
            scored, rep["value"], rep["statistic"], n_runs=rep.get("n_runs"), eval_sd=eval_sd
        )
        note = subsample_note(terms)
        item["notes"] = [note] if note else []
    return item


def _head_kind(records: list[dict[str, Any]], task: dict[str, Any]) -> str:
    """The head as reported numbers name it: the classifier kind (`auto`, `pooler`, `cls`), a
    tagging head's `crf` or `auto` (linear, as BERT's NER), QA's `auto`."""
    if task["head"] == "classification":
        return str(records[0].get("head", "auto")).split(":")[0]
    return "crf" if task["head"] == "tagging" and task.get("tagging", {}).get("crf") else "auto"


def build(
    studies: Iterable[tuple[dict[str, Any], list[dict[str, Any]]]], reference: str | None = None
) -> dict[str, Any]:
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
    rank(entries)
    return {
        "schema_version": SCHEMA_VERSION,
        "ranking_rule": RANKING_RULE,
        "provenance": {
            "suite_version": __version__,
            "git_commit": git_commit(),
            # From the installed metadata (the same strings as the modules' __version__): writing a
            # leaderboard never imports torch (2 s of a `run` process's exit, benchmarks/RESULTS.md).
            "versions": {name: version(name) for name in ("torch", "transformers")},
        },
        "entries": entries,
        **({"aggregates": found} if (found := cross_task(entries, reference)) is not None else {}),
    }


def cross_task(
    entries: list[dict[str, Any]], reference: str | None = None, by: Any = "model"
) -> dict[str, Any] | None:
    """Per model (or `by`, as suite.stats.aggregate groups) across tasks (suite.stats.aggregate:
    normalised IQM, performance profile, average probability of improvement): one aggregate per
    size that several tasks share, else one over each task's single size; None for one task. A
    leaderboard that cannot be aggregated (a task at several sizes and none shared) says why
    instead of failing."""
    from suite.stats.aggregate import aggregate, aggregate_by_size

    tasks = {e["task"] for e in entries}
    if len(tasks) < 2:
        return None
    options: dict[str, Any] = {
        "by": by,
        "settings": "best",
        "fallback": "perfect",
        "reference": reference,
    }
    try:
        found = aggregate_by_size(entries, **options)
        one_size = all(len({str(e["size"]) for e in entries if e["task"] == t}) == 1 for t in tasks)
        if not found and one_size:
            found = {"each task's own size": aggregate(entries, **options)}
    except SuiteError as err:
        if reference is not None and "reference" in str(err):  # a wrong --reference is the user's to fix
            raise SuiteError(f"--reference: {err}") from None
        return {"note": str(err)}
    if not found:
        return {"note": "no size is shared by two tasks"}
    return json.loads(json.dumps(found, default=_plain))


def format_aggregates(aggregates: dict[str, Any] | None) -> list[str]:
    """Printed lines of `cross_task`: per size and model, the normalised IQM with its interval and
    the share of runs above the constant prediction (tau 0 of the profile)."""
    if not aggregates:
        return []
    if "note" in aggregates and "groups" not in aggregates:
        return [f"across tasks: {aggregates['note']}"]
    lines = []
    for size, found in aggregates.items():
        scales = ", ".join(f"{t} {n['kind']}" for t, n in sorted(found["normalisation"].items()))
        lines.append(f"across tasks at {size} (normalised: 0 = constant prediction, 1 = {scales}):")
        for name, group in found["groups"].items():
            profile = group["profile"]
            above = profile["share"][profile["taus"].index(0.0)] if 0.0 in profile["taus"] else None
            runs = f"; {above:.0%} of runs above the constant prediction" if above is not None else ""
            iqm = group["iqm"]
            lines.append(f"  {name}: IQM {iqm['estimate']:.2f} {_bracket(iqm['interval'])}{runs}")
        for name, better in (found.get("improvement") or {}).items():
            if better["estimate"] is not None:  # no task in common: nothing to say
                lines.append(
                    f"  P({name} > {better['vs']}) averaged over tasks: {better['estimate']:.2f} "
                    + _bracket(better["interval"])
                )
    return lines


def _bracket(interval: list[float] | None) -> str:
    """An aggregate's interval as printed; None: its runs tie, and tied runs bound nothing."""
    return "(no interval: the runs tie)" if interval is None else f"[{interval[0]:.2f}, {interval[1]:.2f}]"


def _plain(value: Any) -> Any:
    return value.tolist() if hasattr(value, "tolist") else str(value)


def _rank_key(e: dict[str, Any]) -> tuple:
    s, higher = e["summary"], higher_is_better(e["metric"])  # from the metric, also in files read back
    median = s["all"].get("median", float("-inf") if higher else float("inf"))
    rate = s["failure_rate"] if s["failure_rate"] is not None else float("inf")  # unknown: after known
    return (-median if higher else median, rate, s["all"].get("iqr", 0.0))


def rank(entries: list[dict[str, Any]]) -> None:
    """Rank entries within their rank groups (in place: one rank 1 per group), then order them
    by task, size, group and rank."""
    groups: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for e in entries:
        groups[rank_group_key(e["rank_group"])].append(e)
    for group in groups.values():
        for position, e in enumerate(sorted(group, key=_rank_key), start=1):
            e["rank"] = position
    entries.sort(key=lambda e: (e["task"], size_order(e["size"]), rank_group_key(e["rank_group"]), e["rank"]))


def write_leaderboard(sources: list[str | Path], out: Path, reference: str | None = None) -> dict[str, Any]:
    """Merge the studies of the given run folders (each folder's own study, read from its
    run.json and trials.jsonl), validate, write atomically."""
    from suite.study.storage import write_atomic

    made_from = inputs(sources, reference)  # before reading: a file that changes after is stale
    document = build([load_run(source) for source in sources], reference)
    document["provenance"]["inputs"] = made_from
    validate(document, str(out))
    write_atomic(Path(out), dumps(document))
    return document


def dumps(document: dict[str, Any]) -> str:
    """The leaderboard as text: indented, but each entry's runs one per line. Why: json's indented
    form is its pure-Python encoder, 1.5 s for 10,000 runs; a run per line is the C encoder's and
    as readable (a run is one record, as in trials.jsonl)."""
    entries = document.get("entries", [])
    mark = f"@@runs {uuid.uuid4().hex} "  # no string of the document can hold it
    shown = {**document, "entries": [{**e, "runs": f"{mark}{i}@@"} for i, e in enumerate(entries)]}

    def runs(found: re.Match) -> str:  # an entry's keys sit 3 deep: its runs 4, their bracket 3
        rows = entries[int(found.group(1))]["runs"]
        lines = ",\n    ".join(json.dumps(run, sort_keys=True) for run in rows)
        return f"[\n    {lines}\n   ]" if rows else "[]"

    text = re.sub(f'"{mark}(\\d+)@@"', runs, json.dumps(shown, indent=1, sort_keys=True))
    return text + "\n"
