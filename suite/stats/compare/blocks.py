"""The unit of every comparison: one (size, setting) block (docs/design.md, The unit of a
statistic: never pool sizes or settings), and whether two studies' scores are comparable at all.

Settings are matched on the hyperparameters that vary within a group of runs (a study, or a recipe
of one study); those constant within every group but different between them are the thing being
compared (lr 1e-4 vs 3e-5, or a recipe's own epochs), so they are left out of the match.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from typing import Any

from suite.config.task import higher_is_better
from suite.errors import SuiteError
from suite.study.records import TrialRecord, canonical

Block = tuple[str, str]  # (size, setting) as JSON, so that they hash and compare by value
_MISSING = object()

# run.json fields two studies must share (task spec paths), and record fields likewise
STUDY_FIELDS = (
    "task.name",
    "task.metric.main",
    "task.labels",  # the classes F1 and Matthews are computed over
    "task.eval_split",
    "task.eval_limit",
    "task.qa.eval_pool",
    "task.max_length",
)
RECORD_FIELDS = ("task", "metric", "eval_split", "eval_set")


def _get(info: dict[str, Any], path: str) -> Any:
    value: Any = info
    for part in path.split("."):
        if not isinstance(value, dict) or part not in value:
            return _MISSING
        value = value[part]
    return value


def _show(path: str, value: Any) -> str:
    if value is None:
        return "full" if path.endswith("eval_limit") else "none"
    if isinstance(value, dict) and "label" in value:
        return str(value["label"])
    return value if isinstance(value, str) else json.dumps(value, sort_keys=True)


def _refuse(path: str, va: Any, vb: Any) -> SuiteError:
    return SuiteError(
        f"compare: the studies differ in {path} ({_show(path, va)} vs {_show(path, vb)}): "
        "their scores are not comparable"
    )


def check_studies(info_a: dict[str, Any], info_b: dict[str, Any]) -> None:
    """Refuse two run folders whose scores measure different things: task, metric, evaluation split
    or set, max_length, or data (content hashes; where a hash is missing, where the data came from)."""
    for path in STUDY_FIELDS:
        va, vb = _get(info_a, path), _get(info_b, path)
        if va is not _MISSING and vb is not _MISSING and va != vb:
            raise _refuse(path, va, vb)
    sha_a, sha_b = info_a.get("data_sha256") or {}, info_b.get("data_sha256") or {}
    for split in sorted(set(sha_a) | set(sha_b)):
        if sha_a.get(split) and sha_b.get(split) and sha_a[split] != sha_b[split]:
            raise _refuse(f"data_sha256.{split}", sha_a[split][:12], sha_b[split][:12])
    hashed = bool(sha_a) and bool(sha_b) and all(sha_a.values()) and all(sha_b.values())
    origin_a, origin_b = info_a.get("data_origin") or {}, info_b.get("data_origin") or {}
    for key in sorted(set(origin_a) & set(origin_b)):
        if key == "folder" and hashed:  # the same files read from two paths are the same data
            continue
        if origin_a[key] != origin_b[key]:
            raise _refuse(f"data_origin.{key}", origin_a[key], origin_b[key])


def unstated(info_a: dict[str, Any], info_b: dict[str, Any]) -> list[str]:
    """What a comparison with an imported study (`suite import`) cannot check, one line each: the
    imported side is unpaired (the same seed numbers draw other weights and orders in another
    code), and every field `check_studies` compares that one side does not state (an imported
    study states no max_length, eval_limit subsample or QA pool unless told, and no data hashes).
    [] for two studies the suite trained. What both state and differs is refused by `check_studies`."""
    sides = {"A": info_a, "B": info_b}
    if not any(info.get("imported") for info in sides.values()):
        return []
    lines = [
        f"{side} is imported (suite import): its runs pair with no run the suite trained"
        for side, info in sides.items()
        if info.get("imported")
    ]
    for path in STUDY_FIELDS:
        found = {side: _get(info, path) for side, info in sides.items()}
        missing = [side for side, value in found.items() if value is _MISSING]
        if len(missing) == 1:
            other = "B" if missing[0] == "A" else "A"
            shown = _show(path, found[other])
            lines.append(f"{missing[0]} states no {path} ({other}: {shown}): not compared")
    hashed = {side: bool(info.get("data_sha256")) for side, info in sides.items()}
    if len(set(hashed.values())) == 2:
        side = next(s for s, known in hashed.items() if not known)
        lines.append(
            f"{side}'s data content is not hashed (scored elsewhere): the same data is assumed, not checked"
        )
    return lines


def check_records(a: Sequence[TrialRecord], b: Sequence[TrialRecord]) -> None:
    """The same refusal from the runs' own fields (task, metric, evaluation split and set)."""
    for field in RECORD_FIELDS:
        va = {canonical(r.get(field)) for r in a}
        vb = {canonical(r.get(field)) for r in b}
        if va != vb and not (field != "eval_set" and ("null" in va or "null" in vb)):
            raise _refuse(field, json.loads(min(va)), json.loads(min(vb)))


def direction(*sides: Sequence[TrialRecord]) -> bool:
    """Whether a higher score is better, from the runs' metric (never a user's setting); the runs
    compared share one metric (`check_records`)."""
    names = sorted({r["metric"] for side in sides for r in side if r.get("metric")})
    return all(higher_is_better(name) for name in names)


def ahead(b_minus_a: float, higher: bool) -> str | None:
    """The side ("A" | "B") a difference B - A puts ahead by the metric's direction; None at 0."""
    if b_minus_a == 0:
        return None
    return "B" if (b_minus_a > 0) == higher else "A"


def _settings(group: Sequence[TrialRecord]) -> list[dict[str, Any]]:
    """The group's distinct hparams: thousands of runs hold a few settings."""
    distinct = {}
    for r in group:
        hparams = r.get("hparams") or {}
        distinct.setdefault(canonical(hparams), hparams)
    return list(distinct.values())


def _values(settings: list[dict[str, Any]], key: str) -> set[str]:
    return {canonical(h.get(key, "(unset)")) for h in settings}


def _keys(groups: list[list[dict[str, Any]]]) -> list[str]:
    return sorted({k for g in groups for h in g for k in h})


def varying(groups: Sequence[Sequence[TrialRecord]]) -> list[str]:
    """Hyperparameters that vary within at least one group: what a block is matched on."""
    settings = [_settings(g) for g in groups]
    return [k for k in _keys(settings) if any(len(_values(g, k)) > 1 for g in settings)]


def differing(groups: Sequence[Sequence[TrialRecord]]) -> dict[str, list[Any]]:
    """Hyperparameters constant within every group but not the same in all: what is compared."""
    settings = [_settings(g) for g in groups]
    out = {}
    for k in _keys(settings):
        per = [_values(g, k) for g in settings if g]
        if all(len(v) == 1 for v in per) and len(set.union(*per)) > 1:
            out[k] = [json.loads(next(iter(v))) for v in per]
    return out


def block_of(r: TrialRecord, keys: Sequence[str]) -> Block:
    hparams = r.get("hparams") or {}
    setting = {k: hparams.get(k, "(unset)") for k in keys}
    return canonical(r.get("size")), canonical(setting)


def _order(block: Block) -> tuple:
    size = json.loads(block[0])
    return (0, size, "") if isinstance(size, int | float) else (1, 0, str(size)), block[1]


def split(records: Sequence[TrialRecord], keys: Sequence[str]) -> dict[Block, list[TrialRecord]]:
    """Runs by (size, setting on `keys`), sizes ascending (full last)."""
    out: dict[Block, list[TrialRecord]] = {}
    for r in records:
        out.setdefault(block_of(r, keys), []).append(r)
    return {b: out[b] for b in sorted(out, key=_order)}


def fmt_value(value: Any) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


def label(block: Block) -> str:
    size, setting = json.loads(block[0]), json.loads(block[1])
    text = "" if size is None else f"size {size}"
    hp = " ".join(f"{k}={fmt_value(v)}" for k, v in setting.items())
    return ", ".join(t for t in (text, hp) if t) or "all runs"


def parse_setting(text: str | None) -> dict[str, str] | None:
    """`--setting lr=2e-5,batch_size=16` -> {"lr": "2e-5", "batch_size": "16"}."""
    if not text:
        return None
    out = {}
    for part in text.split(","):
        key, sep, value = part.partition("=")
        if not sep or not key.strip() or not value.strip():
            raise SuiteError(f"--setting: expected KEY=VALUE[,KEY=VALUE...], got {text!r}")
        out[key.strip()] = value.strip()
    return out


def _same(value: Any, text: str) -> bool:
    if isinstance(value, int | float) and not isinstance(value, bool):
        try:
            return math.isclose(float(value), float(text), rel_tol=1e-9)
        except ValueError:
            return False
    return str(value).lower() == text.lower()


def select(
    blocks: Sequence[Block],
    size: str | None,
    setting: dict[str, str] | None,
    hparams: dict[Block, dict[str, Any]],
    compared: dict[str, list[Any]],
) -> list[Block]:
    """The blocks `--size` and `--setting` pick (each block's hparams: its runs' own, less the
    compared ones); one line naming the choices when none is left."""
    for key in setting or {}:
        if key in compared:
            values = " vs ".join(fmt_value(v) for v in compared[key])
            raise SuiteError(f"--setting {key}: {key} is what is compared ({values}), not a block")
    chosen = [
        b
        for b in blocks
        if (size is None or _same(json.loads(b[0]), size))
        and all(k in hparams[b] and _same(hparams[b][k], v) for k, v in (setting or {}).items())
    ]
    if not chosen:
        shown = ",".join(f"{k}={v}" for k, v in (setting or {}).items())
        asked = " ".join(f"--{n} {v}" for n, v in (("size", size), ("setting", shown)) if v)
        raise SuiteError(f"{asked}: no such block (blocks: {'; '.join(label(b) for b in blocks)})")
    return chosen
