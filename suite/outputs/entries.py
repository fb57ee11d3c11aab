"""The report's units: leaderboard entries (one (size, setting) each) with their runs, and which of
them the per-entry figures draw. Re-exported by suite/outputs/plots.py, which the notebook calls.

Every entry is a row of the report's tables. A figure per entry is drawn for at most
`ENTRY_FIGURES` of them, each size's best-ranked first, and the report says so in one line: 80
entries' figures are 80 screens no reader compares, and they took most of a grid study's report.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Sequence
from typing import Any

from suite.study.records import runs, setting_key, setting_labels

ENTRY_FIGURES = 8  # per-entry figures a report draws by default; `suite report --entry-figures`
Entry = tuple[str, dict[str, Any], list[dict[str, Any]]]  # (label, leaderboard entry, its runs)


def entry_label(entry: dict[str, Any], labels: dict[str, str]) -> str:
    """`size 500, lr=2e-05`: a leaderboard entry as the report names it (labels from
    `records.setting_labels`)."""
    return f"size {entry['size']}, {labels.get(setting_key(entry['setting']), '')}".rstrip(", ")


def by_entry(entries: Sequence[dict[str, Any]], records: Sequence[dict[str, Any]]) -> list[Entry]:
    """(label, entry, the entry's runs) per leaderboard entry: each figure's unit."""
    grouped: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    for r in runs(records):
        grouped[(str(r["size"]), setting_key(r["hparams"]))].append(r)
    labels = setting_labels([{"hparams": e["setting"]} for e in entries])  # an entry without runs too
    return [
        (entry_label(e, labels), e, grouped[(str(e["size"]), setting_key(e["setting"]))]) for e in entries
    ]


def figure_entries(entries: Sequence[Entry], limit: int = ENTRY_FIGURES) -> tuple[list[Entry], str | None]:
    """The entries the per-entry figures draw, and the line that says which when not all: up to
    `limit` (0: no limit) every entry; past it the best-ranked of each rank group (one size,
    evaluation set and metric), as many per group as the limit allows and at least one."""
    if limit <= 0 or len(entries) <= limit:
        return list(entries), None
    # the groups as the leaderboard ranked them (its rank_group field), without importing the
    # statistics that rank them: `report` imports this before it knows whether it needs them
    groups = {json.dumps(e["rank_group"], sort_keys=True, default=str) for _, e, _ in entries}
    per_group = max(1, limit // len(groups))
    drawn = [item for item in entries if item[1]["rank"] <= per_group]
    best = "best-ranked setting" if per_group == 1 else f"{per_group} best-ranked settings"
    return drawn, (
        f"figures for the {best} of each size ({len(drawn)} of {len(entries)} entries; "
        "every entry is in the tables; `suite report --entry-figures 0` draws all)"
    )


def entry_keys(entries: Sequence[Entry]) -> set[tuple[str, str]]:
    """The (size, setting key) of each entry: what a figure of several entries' panels draws."""
    return {(str(e["size"]), setting_key(e["setting"])) for _, e, _ in entries}
