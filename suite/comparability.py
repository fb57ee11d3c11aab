"""Whether a reported number can be compared with one leaderboard entry (DESIGN.md section 5).

A published number is *comparable* only when the model checkpoint, the training size (none
stated = the full training set), the split and evaluation set, the metric, the head and the
statistic all match; otherwise it is context, shown apart with the reasons. Only comparable
numbers get a gap and a test: a comparison without equal terms is worse than none.
"""

from __future__ import annotations

import re
from typing import Any

COMPARABLE_STATISTICS = ("median", "mean", "max", "single")


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
    split), head (our classifier kind, e.g. `auto`)."""
    reasons = []
    if not same_model(reported, entry["model"], entry.get("hub_id")):
        reasons.append(f"model: reported {reported['model']}, ours {entry['model']}")
    size = reported.get("size") or "full"
    if str(size) != str(entry["size"]):
        theirs = "the full training set" if size == "full" else f"{size} examples"
        reasons.append(f"training size: reported {theirs}, ours {entry['size']}")
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
    if reported["statistic"] not in COMPARABLE_STATISTICS:
        reasons.append(f"statistic: {reported['statistic']} (a hidden test server, not a run statistic)")
    return reasons
