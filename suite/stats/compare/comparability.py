"""Whether a reported number can be compared with one leaderboard entry (docs/comparisons.md,
Comparing with reported numbers), and which entries may be ranked together.

A published number is *comparable* only when the model checkpoint, the training size (none
stated = the full training set; a K-shot size such as `16/class` matches only the same K), the
split and evaluation set, the metric, the head and the statistic all match; otherwise it is
context, shown apart with the reasons. Only comparable numbers get a gap and a test: a
comparison without equal terms is worse than none. A seeded `eval_limit` subsample of the
official dev set stays comparable with a full-dev number: its score is an unbiased estimate of
the full set's, and the test adds its sampling error.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from typing import Any

from suite.config.task import per_class_k

COMPARABLE_STATISTICS = ("median", "mean", "max", "single")
RANK_FIELDS = ("task", "eval_split", "metric", "size", "eval_set", "eval_limit", "max_length", "data")


def _name(text: str) -> str:
    """A model name without its organisation and punctuation: `google-bert/bert-base-uncased`
    and `bert-base-uncased (BERT-BASE)` both read `bertbaseuncased`."""
    text = re.sub(r"\(.*?\)", "", text).strip().split("/")[-1]
    return re.sub(r"[^a-z0-9]", "", text.lower())


def same_model(reported: dict[str, Any], model: str, hub_id: str | None) -> bool:
    """The reported checkpoint is ours, by name or by an explicit `same_as` alias."""
    ours = {_name(model)} | ({_name(hub_id)} if hub_id else set())
    theirs = {_name(reported["model"])} | {_name(a) for a in reported.get("same_as") or []}
    return bool(ours & theirs)


def reasons_not_comparable(reported: dict[str, Any], entry: dict[str, Any]) -> list[str]:
    """Every term on which the reported number and the entry differ ([] = comparable).

    `entry` needs: model, hub_id, size, metric, eval_split, eval_set (None = the task's own
    split), head (our classifier kind, e.g. `auto`); optional max_length (checked when the
    reported number states one). An `eval_limit` subsample is no reason: see `subsample_note`."""
    reasons = []
    if not same_model(reported, entry["model"], entry.get("hub_id")):
        reasons.append(f"model: reported {reported['model']}, ours {entry['model']}")
    size = reported.get("size") or "full"
    if str(size) != str(entry["size"]):
        ours = _size_words(entry["size"]) if per_class_k(entry["size"]) else entry["size"]
        reasons.append(f"training size: reported {_size_words(size)}, ours {ours}")
    split = reported["split"].lower()
    if "server" in split or not split.startswith("dev" if entry["eval_split"] == "validation" else "test"):
        reasons.append(f"split: reported {reported['split']}, ours {entry['eval_split']}")
    elif entry.get("eval_set"):
        reasons.append(f"evaluation set: ours is {entry['eval_set']}, not the official {reported['split']}")
    if reported["metric"] != entry["metric"]:
        reasons.append(f"metric: reported {reported['metric']}, ours {entry['metric']}")
    head = reported.get("head") or "auto"
    if entry.get("head") and head != entry["head"]:
        reasons.append(f"head: reported {head}, ours {entry['head']}")
    if (
        reported.get("max_length")
        and entry.get("max_length")
        and reported["max_length"] != entry["max_length"]
    ):
        reasons.append(f"max_length: reported {reported['max_length']}, ours {entry['max_length']}")
    if reported["statistic"] not in COMPARABLE_STATISTICS:
        reasons.append(f"statistic: {reported['statistic']} (a hidden test server, not a run statistic)")
    return reasons


def _size_words(size: Any) -> str:
    """A size as a reason reads it: a K-shot size (`16/class`, K examples of every class) is
    never the same training set as a total, so the two are named apart."""
    if size == "full":
        return "the full training set"
    if k := per_class_k(size):
        return f"{k} examples per class (K-shot)"
    return f"{size} examples"


def subsample_sd(dev_se: float | None, examples: int | None, full_size: int | None = None) -> float | None:
    """The sd (x100 points) of a seeded dev subsample's score around the full dev set's score:
    one run's across-examples standard error (`examples.dev_sampling_error`, natural scale)
    times the finite-population correction sqrt(1 - n/N) when the full size N is known; without
    N the correction is left out, which overstates the error (conservative)."""
    if dev_se is None:
        return None
    fpc = math.sqrt(max(0.0, 1.0 - examples / full_size)) if examples and full_size else 1.0
    return 100.0 * dev_se * fpc


def subsample_note(entry: dict[str, Any]) -> str | None:
    """What a comparable number's test allows for when the entry was scored on an `eval_limit`
    subsample of the official evaluation split (None: the full split, or another set, which
    `reasons_not_comparable` refuses). `entry` adds eval_limit, eval_examples, eval_sd (the
    sd the gap test adds)."""
    if not entry.get("eval_limit") or entry.get("eval_set"):
        return None
    n = entry.get("eval_examples") or entry["eval_limit"]
    split = "dev" if entry["eval_split"] == "validation" else entry["eval_split"]
    what = f"evaluated on {n} of the {split} examples"
    if entry.get("eval_sd") is None:
        return f"{what}: no per-example outcomes stored, so its sampling error is not in the test"
    return f"{what}: sampling error (sd {entry['eval_sd']:.2f} points) added to the test"


def data_digest(sha256: dict[str, str | None], origin: dict[str, Any] | None) -> str:
    """A short digest of the data's content: every source's hash; where a hash is unknown (a hub
    split without a fingerprint) the origin (hub path, name, revision) stands in for it."""
    known = all(sha256.values()) and bool(sha256)
    content = {"sha256": sha256, "origin": None if known else origin}
    return hashlib.sha256(json.dumps(content, sort_keys=True).encode()).hexdigest()[:12]


def rank_group_key(group: dict[str, Any]) -> str:
    """Entries are ranked together only when these fields are all equal (RANK_FIELDS)."""
    return json.dumps({k: str(group.get(k)) for k in RANK_FIELDS}, sort_keys=True)
