"""Rows of results trained elsewhere -> the suite's trial records (suite/study/records.py), judged by
the task's failure rule, each keyed as the suite keys a planned trial (size, every hyperparameter,
the seeds: `TrialPlan.key`). Every bad value is one line naming the file, the row and the column.

Which column is what: suite/study/import_columns.py."""

from __future__ import annotations

import json
import math
import re
from dataclasses import replace
from decimal import Decimal
from functools import cache
from typing import Any, cast

from pydantic import ValidationError

from suite.config.fields import describe
from suite.config.runs_map import scalar
from suite.config.sweep import HParams, child_seed
from suite.config.task import per_class_k
from suite.errors import SuiteError
from suite.study.import_columns import Columns, Rule
from suite.study.import_files import Table, cell
from suite.training.trial_plan import Seeds, TrialPlan

DERIVED = frozenset({"study", "trial_number", "failed", "imported", "model", "task"})  # the import's own
RUN_WORDS = ("succeeded", "failed", "errored", "pruned")
FINE = frozenset(
    {"", "finished", "completed", "complete", "success", "succeeded", "ok", "0", "false", "none"}
)
_PLACEHOLDER = {"lr": 1e-3, "batch_size": 1, "epochs": 1}  # HParams' required fields, when a row has none


def records_of(table: Table, columns: Columns, rule: Rule) -> list[dict[str, Any]]:
    """One record per row, in order, each with `imported` {file, sha256, row}."""
    roles = columns.roles
    if "score" not in roles:
        raise SuiteError(f"{table.source}: no score column (map one: --score COLUMN, or score: in --map)")
    if not {"seed", "seeds", "seeds.init"} & set(roles):
        raise SuiteError(
            f"{table.source}: no seed column (map one: --seed COLUMN for init = order = seed, or "
            "seeds: {init, order, subsample} in --map)"
        )
    return [_record(table, i, row, columns, rule) for i, row in enumerate(table.rows)]


def _record(table: Table, i: int, row: dict[str, Any], columns: Columns, rule: Rule) -> dict[str, Any]:
    roles = columns.roles

    def get(role: str) -> Any:
        column = roles.get(role)
        return None if column is None else _value(cell(row, column))

    def bad(role: str, problem: str) -> SuiteError:
        return SuiteError(f"{table.where(i, roles.get(role, role))}: {problem}")

    record = _kept(row, columns.kept)
    for field, ours in (("task", rule.task), ("metric", rule.metric), ("eval_split", rule.eval_split)):
        if (theirs := cell(row, field) if field in columns.kept else None) not in (None, "", ours):
            raise SuiteError(f"{table.where(i, field)}: a run of {field} {theirs!r}, imported as {ours!r}")
    if isinstance(record.get("baseline"), int | float):  # a suite record: judged by its own baseline
        rule = replace(rule, baseline=float(record["baseline"]))
    size = _size(get("size") if "size" in roles else columns.fixed.get("size", "full"), rule, bad)
    hparams = _hparams(table, i, row, columns, bad)
    seeds = _seeds(row, roles, size, bad)
    said = get("outcome")
    if said is not None and said not in (*RUN_WORDS, "unknown"):
        raise bad("outcome", f"{said!r} is not an outcome (succeeded, failed, errored or pruned)")
    if said is None and "error" in roles and str(get("error") or "").strip().lower() not in FINE:
        said = "errored"
    outcome, failure, reason, score = _judged(get("score"), said, record, rule, bad)
    attempt = get("attempt") if "attempt" in roles else 1
    if isinstance(attempt, float) and attempt.is_integer():
        attempt = int(attempt)
    if not isinstance(attempt, int) or isinstance(attempt, bool) or attempt < 1:
        raise bad("attempt", f"attempt {attempt!r} is not a whole number of at least 1")
    key = TrialPlan(size, cast(HParams, _Stated(hparams)), Seeds(**seeds)).key
    if "key" in record and record["key"] != key:
        raise bad(
            "key", f"key {record['key']!r} does not match its size, hyperparameters and seeds ({key!r})"
        )
    scores = record.get("scores") or {}
    if score is not None and not scores:
        scores = {rule.metric: score} | {
            r.removeprefix("scores."): v if rule.scale == 1 else _scaled(v, rule.scale)
            for r in roles
            if r.startswith("scores.") and isinstance(v := get(r), int | float) and math.isfinite(v)
        }
    for field in ("n_dev", "n_train"):
        if field in roles and isinstance(get(field), int):
            record[field] = get(field)
    record |= {
        "key": key,
        "study": rule.study,
        "task": rule.task,
        "model": rule.model,
        "size": size,
        "hparams": hparams,
        "seeds": seeds,
        "metric": rule.metric,
        "attempt": attempt,
        "outcome": outcome,
        "failure": failure,
        "failed": None if outcome == "unknown" else outcome == "failed",
        "reason": reason,
        "score": score,
        "scores": scores if score is not None else {},
        "imported": {"file": table.source, "sha256": table.sha256, "row": table.places[i]},
    }
    record.setdefault("eval_split", rule.eval_split)
    record.setdefault("head", rule.head)
    if rule.baseline is not None:
        record.setdefault("baseline", rule.baseline)
    return record


class _Stated:
    """A setting as the row states it, keyed as `TrialPlan.key` keys a planned one (`as_record`)."""

    def __init__(self, hparams: dict[str, Any]) -> None:
        self.hparams = hparams

    def as_record(self) -> dict[str, Any]:
        return self.hparams


def _value(found: Any) -> Any:
    """A cell as a value: a CSV's text read as a number, a boolean or JSON where it is one."""
    if not isinstance(found, str):
        return found
    text = found.strip()
    if text == "":
        return None
    if text[0] in "[{":
        try:
            return json.loads(text)
        except ValueError:
            return text
    return scalar(text)


def _kept(row: dict[str, Any], kept: list[str]) -> dict[str, Any]:
    """The suite's record fields a row holds (a CSV's `scores.f1` into `scores`), minus what the
    import states itself. A CSV's list that is not JSON (a curve pandas wrote as Python) is left out."""
    record: dict[str, Any] = {}
    for column in kept:
        value = _value(row.get(column))
        if value is None or column.split(".")[0] in DERIVED:
            continue
        if isinstance(row.get(column), str) and isinstance(value, str) and value[:1] in "[{":
            continue
        *path, last = column.split(".")
        place = record
        for part in path:
            place = place.setdefault(part, {})
        place[last] = value
    return record


def _size(value: Any, rule: Rule, bad: Any) -> int | str:
    """A training size: examples (a whole number, at least 2), `full` or K per class; an empty cell
    (`max_train_samples` None) and a Trainer's `train_samples` equal to the task's training set
    are `full`."""
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if value is None or value == "full" or per_class_k(value):  # an empty cell: all of it (None in HF's args)
        return "full" if value is None else value
    if not isinstance(value, int) or isinstance(value, bool) or value < 2:
        raise bad("size", f"size {value!r} is not a number of examples (at least 2), full or K/class")
    return "full" if value == rule.train_size else value


def _hparams(table: Table, i: int, row: dict[str, Any], columns: Columns, bad: Any) -> dict[str, Any]:
    given: dict[str, Any] = {k: v for k, v in columns.fixed.items() if k != "size"}
    for role, column in columns.roles.items():
        if role == "hparams" and isinstance(row.get(column), dict):
            given |= row[column]
        elif role.startswith("hparams.") and (value := _value(cell(row, column))) is not None:
            given[role.removeprefix("hparams.")] = value
    try:  # the cache's key: a few settings repeat over thousands of rows
        found = _coerced(tuple(sorted(given.items())))
    except TypeError:  # a value that does not hash (a JSON line's object): by its canonical text
        found = _coerced(json.dumps(given, sort_keys=True))
    if isinstance(found, tuple):
        name, problem = found
        raise SuiteError(f"{table.where(i, _column_of(columns, name))}: hyperparameter {name}: {problem}")
    return dict(found)  # each record its own: the cached one is shared


def _column_of(columns: Columns, name: str) -> str:
    return columns.roles.get(f"hparams.{name}") or columns.roles.get("hparams") or name


@cache
def _coerced(stated: tuple | str) -> dict[str, Any] | tuple[str, str]:
    """The hyperparameters as the suite spells them (`HParams.as_record`: 2e-5 and 0.00002 one value,
    an adapter at its default not written), those it does not know as given; or (name, problem).
    `stated`: the row's (name, value) pairs, or their JSON. Callers copy what it returns."""
    given = dict(stated) if isinstance(stated, tuple) else json.loads(stated)
    known = {k: v for k, v in given.items() if k in HParams.model_fields}
    for attempt in range(2):
        try:
            spelled = HParams.model_validate({**_PLACEHOLDER, **known}).as_record()
            break
        except ValidationError as err:
            if attempt:
                said = re.match(r"field '([^']*)': (.*)", describe(err))
                return (said.group(1), said.group(2)) if said else ("?", describe(err))
            known = {k: int(v) if isinstance(v, float) and v.is_integer() else v for k, v in known.items()}
    out = {k: spelled[k] for k in spelled if k in known}
    return out | {k: v for k, v in given.items() if k not in HParams.model_fields}


# Without a subsample seed, the runs of one size trained on one subset (run_glue's
# --max_train_samples takes the first N examples whatever the seed): the draw the suite makes for a
# size (the first subsample seed of master 0), and 0 at `full`, where no draw is made.
SIZE_DRAW = child_seed(0, "subsample", 0)


def _seeds(row: dict[str, Any], roles: dict[str, str], size: int | str, bad: Any) -> dict[str, int]:
    """{init, order, subsample}: each from its own column, or one seed for init and order; the
    subsample, where no column gives it, the size's draw (`SIZE_DRAW`)."""
    draw = 0 if size == "full" else SIZE_DRAW
    if "seeds" in roles and isinstance(row.get(roles["seeds"]), dict):
        found = {k: row[roles["seeds"]].get(k) for k in ("init", "order", "subsample")}
        named = {k: "seeds" for k in found}
    elif "seed" in roles:
        one = _value(cell(row, roles["seed"]))
        found = {"init": one, "order": one, "subsample": draw}
        named = dict.fromkeys(found, "seed")
    else:
        found = {
            k: _value(cell(row, roles[f"seeds.{k}"])) if f"seeds.{k}" in roles else None
            for k in ("init", "order")
        }
        sub = roles.get("seeds.subsample")
        found["subsample"] = _value(cell(row, sub)) if sub else draw
        named = {k: f"seeds.{k}" for k in found}
    for axis, value in found.items():
        if isinstance(value, float) and value.is_integer():
            found[axis] = value = int(value)
        if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value < 2**32:
            what = "missing" if value is None else f"{value!r} is not a whole number in [0, 2^32)"
            raise bad(named[axis], f"seed ({axis}) {what}")
    return {"init": found["init"], "order": found["order"], "subsample": found["subsample"]}


def _judged(
    value: Any, said: str | None, record: dict[str, Any], rule: Rule, bad: Any
) -> tuple[str, str | None, str | None, float | None]:
    """(outcome, failure, reason, score) of one row: an errored or pruned trial as the row says; a
    score judged by the task's failure rule (a stated outcome must agree); no score: diverged."""
    if said in ("errored", "pruned"):
        return said, None, record.get("reason") or f"{said} (imported)", None
    if value is None:
        if said == "failed":  # a diverged run has no score
            return "failed", "diverged", record.get("reason") or "diverged: no score (imported)", None
        raise bad("score", "missing score")
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise bad("score", f"score {value!r} is not a number")
    if not math.isfinite(value):
        return "failed", "diverged", f"diverged: non-finite {rule.metric} ({value})", None
    score = value if rule.scale == 1 else _scaled(value, rule.scale)
    if not rule.low <= score <= rule.high:
        shown = f"{value}" if rule.scale == 1 else f"{value} / {rule.scale:g} = {score:g}"
        hint = (
            "; scores on 0-100? give --scale 100"
            if rule.scale == 1 and rule.high <= 1 < value <= 100 * rule.high
            else ""
        )
        raise bad(
            "score", f"score {shown} is outside {rule.metric}'s range [{rule.low:g}, {rule.high:g}]{hint}"
        )
    failure, reason = judge(rule, score)
    if failure == "unknown":  # the row's own word, where it has one, else unknown
        if said in ("succeeded", "failed"):
            return said, record.get("failure"), record.get("reason"), score
        return "unknown", None, reason, score
    outcome = "failed" if failure else "succeeded"
    if said is not None and said not in (outcome, "unknown"):
        rule_says = reason or f"better than the baseline {rule.baseline}"
        raise bad("outcome", f"says {said}, but the task's failure rule says {outcome} ({rule_says})")
    return outcome, failure, record["reason"] if said == outcome and "reason" in record else reason, score


def _scaled(value: float, scale: float) -> float:
    """value / scale as written in decimals: 66.8 on 0-100 is 0.668, not 0.6679999999999999."""
    return float(Decimal(repr(float(value))) / Decimal(repr(float(scale))))


def judge(rule: Rule, score: float) -> tuple[str | None, str | None]:
    """The task's failure rule (as suite/training/trial.py's `judge`, for a finite score) -> (failure
    kind or None, reason); ("unknown", why) where the rule needs a baseline no one gave."""
    metric, higher = rule.metric, rule.higher
    if rule.failure == "threshold":
        assert rule.threshold is not None  # the task spec requires one for this rule
        if score < rule.threshold if higher else score > rule.threshold:
            side = "below" if higher else "above"
            return "threshold", f"dev {metric} {score:.4f} {side} the threshold {rule.threshold}"
        return None, None
    if rule.baseline is None:
        return (
            "unknown",
            "outcome unknown: no failure baseline (the task's data was not read and no --baseline given)",
        )
    base = rule.baseline
    if score <= base + rule.margin if higher else score >= base - rule.margin:
        return "baseline", f"dev {metric} {score:.4f} no better than the trivial baseline {base:.4f}"
    return None, None
