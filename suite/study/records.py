"""Trial records: the outcome taxonomy, one final record per planned trial, setting labels, and
a run folder's own files (run.json + trials.jsonl).

Outcomes (docs/design.md, Outcomes):
- `succeeded`: a run that beat the trivial baseline (or threshold);
- `failed`: a run that did not (`failure: baseline | threshold`) or diverged (`failure:
  diverged`, a non-finite loss or score; it has no score);
- `errored`: not a run at all (a crash, OOM, a killed worker): retried, reported apart, never in
  the failure rate or any statistic;
- `pruned`: stopped early by a search-phase pruner: counted apart, never in a statistic;
- `unknown`: a run trained elsewhere (`suite import`) whose failure rule needs a baseline no one
  gave: a run with its score in every statistic, but counted neither failed nor succeeded, so the
  failure rate (and what reads it) says "unknown" instead of guessing.

A record's score: every statistic reads it through `score`, `scored` and `finite_scores`, one
rule: a finite `score` is a score (a failed run's included: it is a run and scored), anything
else (None for a diverged, errored or pruned trial; NaN in records older code wrote) is none.
"""

from __future__ import annotations

import gc
import json
import math
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypedDict

import numpy as np
import orjson

from suite.errors import SuiteError

RUN_OUTCOMES = ("succeeded", "failed", "unknown")
OUTCOMES = (*RUN_OUTCOMES, "errored", "pruned")


class TrialRecord(TypedDict, total=False):
    """One ended trial, as stored (a line of trials.jsonl, a trial's `record` in the study): a plain
    dict, read and written as JSON unchanged. The keys the statistics read are typed here; every
    field is listed in docs/outputs.md (Trial records). Open: a record keeps keys it does not
    list (costs, timings, what newer code adds), and any key may be missing from older records."""

    key: str  # the planned trial: size, every hyperparameter and the seeds
    task: str
    model: str
    size: int | str  # training examples, "full", or K examples per class ("16/class")
    hparams: dict[str, Any]  # every hyperparameter (a recipe's name in `recipe`)
    seeds: dict[str, int]  # {init, order, subsample}
    metric: str  # the main metric, the one `score` holds
    baseline: float
    outcome: str  # one of OUTCOMES; records before the taxonomy have none (`outcome` reads their flags)
    failure: str | None  # baseline | threshold | diverged
    failed: bool
    reason: str | None
    pruned: bool  # records before the taxonomy
    score: float | None  # the final dev main metric; None for a diverged, errored or pruned trial
    scores: dict[str, float]  # every final metric of a scored run
    last_score: float  # the last finite score of a diverged or pruned run (never a statistic's)
    epochs: list[dict[str, Any]]  # the curve: dev metrics per evaluation, on `evaluated_on["epochs"]`
    per_example: dict[str, list[Any]]  # the score's outcomes per example: the whole evaluation set
    evaluated_on: dict[str, dict[str, Any]]  # {epochs, score}: {set: sample | whole, examples, seed}
    time_s: dict[str, float]  # {training, curve_evaluation, final_evaluation}


def outcome(record: TrialRecord) -> str:
    """A record's outcome (records from before the taxonomy are read by their flags)."""
    if "outcome" in record:
        return record["outcome"]
    if record.get("pruned"):
        return "pruned"
    if (record.get("reason") or "").startswith("error"):
        return "errored"
    return "failed" if record.get("failed") else "succeeded"


def is_run(record: TrialRecord) -> bool:
    """A run ended as a training outcome: it enters the statistics and the failure rate."""
    return outcome(record) in RUN_OUTCOMES


def runs(records: Iterable[TrialRecord]) -> list[TrialRecord]:
    return [r for r in records if is_run(r)]


def score(record: TrialRecord) -> float:
    """The record's score, NaN where it has none (a diverged run, an errored or pruned trial)."""
    value = record.get("score")
    return float(value) if value is not None and math.isfinite(value) else math.nan


def scored(records: Iterable[TrialRecord]) -> list[TrialRecord]:
    """The records that have a score, in order (whatever their outcome: pass `runs` for runs)."""
    return [r for r in records if math.isfinite(score(r))]


def finite_scores(records: Iterable[TrialRecord] | Iterable[float | None] | np.ndarray) -> np.ndarray:
    """The scores of the records that have one, in order, as floats; plain scores (numbers or None,
    a list or an array) are read as given, their finite ones kept."""
    items = records if isinstance(records, np.ndarray) else list(records)
    if len(items) and isinstance(items[0], dict):
        return np.array([score(r) for r in scored(items)], dtype=float)
    x = np.asarray(items, dtype=float)
    return x[np.isfinite(x)]


WHOLE_SET = "full"  # the size that trains on every training example, whatever the subsample seed
_WHOLE_PREFIX = f"size={WHOLE_SET}|"
_SUBSAMPLE = ",subsample="


def short_key(key: str) -> str:
    """A planned key for a log line: its size and seeds, the setting (often 200 characters of
    hyperparameters) left out; the trial's number beside it names the trial."""
    parts = key.split("|")
    return f"{parts[0]}|...|{parts[-1]}" if len(parts) > 2 else key


def run_key(key: str | None) -> str | None:
    """The run a planned key names: the key itself, except at size `full`, where every subsample
    seed trains on the same examples, so the run is its key with subsample 0 (as `full` is
    planned). Studies planned before that hold one run under several subsample seeds."""
    if key is None or not key.startswith(_WHOLE_PREFIX):
        return key
    head, sep, _ = key.rpartition(_SUBSAMPLE)
    return f"{head}{sep}0" if sep else key


def as_run(record: TrialRecord) -> TrialRecord:
    """A record under its run's key (subsample 0 at `full`: the seed drew nothing there)."""
    key = run_key(record["key"])
    if key == record["key"]:
        return record
    return {**record, "key": key, "seeds": {**record.get("seeds", {}), "subsample": 0}}


def final_records(records: Iterable[TrialRecord]) -> list[TrialRecord]:
    """One record per planned run (key; at `full`, one per run whatever its subsample seed): its
    run if any attempt ran to an end, else its last errored attempt. Order: first appearance."""
    chosen: dict[str, TrialRecord] = {}
    for r in map(as_run, records):
        previous = chosen.get(r["key"])
        if previous is None or not is_run(previous):  # a later attempt replaces an errored one
            chosen[r["key"]] = r
    return list(chosen.values())


def repeated_runs(records: Iterable[TrialRecord]) -> int:
    """Runs trained again under another subsample seed at `full` (planned so before `full` was
    planned once): each is read once, and this many of them are left out."""
    keys: dict[str, set[str]] = {}
    for r in records:
        if is_run(r):
            keys.setdefault(run_key(r["key"]), set()).add(r["key"])
    return sum(len(k) - 1 for k in keys.values())


def counts(records: Sequence[TrialRecord]) -> dict[str, int]:
    """How many final records end in each outcome."""
    out = dict.fromkeys(OUTCOMES, 0)
    for r in records:
        out[outcome(r)] += 1
    return out


# json.dumps(value, sort_keys=True), from one encoder: dumps builds an encoder a call, a third of
# the cost of the keys made for every run of a 10,000-run study
canonical = json.JSONEncoder(sort_keys=True).encode


def setting_key(hparams: dict[str, Any]) -> str:
    """The full setting (every hyperparameter): what groups runs. Two settings that differ in
    any value, warmup or bias correction included, are never merged."""
    return canonical(hparams)


def setting_labels(records: Iterable[TrialRecord]) -> dict[str, str]:
    """setting_key -> a short label naming the hyperparameters that differ across settings
    (all of lr, batch size and epochs when only one setting ran)."""
    settings = {setting_key(r["hparams"]): r["hparams"] for r in records}
    if settings and all(h.get("recipe") for h in settings.values()):  # a recipe is one whole setting
        return {key: f"recipe={h['recipe']}" for key, h in settings.items()}
    names = sorted({k for h in settings.values() for k in h})
    varying = [k for k in names if len({json.dumps(h.get(k)) for h in settings.values()}) > 1]
    shown = varying or [k for k in ("lr", "batch_size", "epochs") if k in names]
    short = {"batch_size": "bs", "epochs": "ep"}
    return {
        key: " ".join(f"{short.get(k, k)}={_fmt(h.get(k))}" for k in shown) for key, h in settings.items()
    }


def _fmt(value: Any) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


def load_run(folder: str | Path) -> tuple[dict[str, Any], list[TrialRecord]]:
    """A run folder's study: its run info and the final record of each planned trial, read from
    the folder's own files (no storage access, so a password-protected URL never matters)."""
    folder = Path(folder)
    info_path, trials_path = folder / "run.json", folder / "trials.jsonl"
    for path in (info_path, trials_path):
        if not path.is_file():
            raise SuiteError(
                f"{folder}: no {path.name} here (expected a runs/<task>/<model> folder; "
                "rerun `suite run` to write its outputs)"
            )
    try:
        info = json.loads(info_path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as err:
        raise SuiteError(f"{folder}: {err.msg} in run.json (line {err.lineno})") from None
    return info, final_records(read_jsonl(trials_path))


@contextmanager
def collector_paused() -> Iterator[None]:
    """The cycle collector off while JSON is parsed: parsed JSON holds no reference cycle, so the
    collector's passes over its new objects are waste (25% of parsing 10,000 records)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


# orjson builds a whole document before its objects: a file in one call peaked at 5x its size,
# 100 lines a call at a few MB more than what they parse to
_LINES_A_CALL = 100


def read_jsonl(path: Path) -> list[Any]:
    """Every non-empty line of a JSON-lines file. orjson parses them, _LINES_A_CALL lines a call,
    in a third of the standard library's time; what it refuses (NaN, which older code wrote; a bad
    line) is parsed as before, in one call of the standard library: each distinct key string then
    shared across all records. Each line is wrapped as its own one-value array, the wrappers split
    by a newline no JSON string can hold: a line cut in two, or two values on one line, cannot
    pass as records. A bad line is named by its line number."""
    data, records = path.read_bytes().split(b"\n"), []
    with collector_paused():
        for at in range(0, len(data), _LINES_A_CALL):
            if (
                part := _wrapped(data[at : at + _LINES_A_CALL], b"[[", b"],\n[", b"]]", orjson.loads)
            ) is None:
                break
            records += part
        else:
            return records
        del data, records
        lines = path.read_text(encoding="utf-8").splitlines()
        whole = _wrapped(lines, "[[", "],\n[", "]]", json.loads)
    if whole is not None:
        return whole
    for number, line in enumerate(lines, 1):  # the first bad line, as parsing it alone finds it
        try:
            if line:
                json.loads(line)
        except json.JSONDecodeError as err:
            raise SuiteError(f"{path.parent}: {err.msg} in {path.name} (line {number})") from None
    raise SuiteError(f"{path.parent}: a line of {path.name} holds more than one JSON value")


def _wrapped(
    lines: list, start: Any, between: Any, end: Any, parse: Callable[[Any], Any]
) -> list[Any] | None:
    """The non-empty lines' values, each line wrapped as its own one-value array; None where
    `parse` refuses them or a line did not hold exactly one value."""
    kept = [line for line in lines if line]
    if not kept:
        return []
    try:
        wrapped = parse(start + between.join(kept) + end)
    except ValueError:  # json's and orjson's decode errors both are
        return None
    if len(wrapped) == len(kept) and all(len(one) == 1 for one in wrapped):
        return [one[0] for one in wrapped]
    return None
