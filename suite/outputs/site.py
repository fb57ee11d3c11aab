"""`suite site LEADERBOARD.json... -o site/`: one static page over leaderboards.

Everything is inlined (data, CSS, JS, SVG), so the page opens from disk with no server and no
network: a sortable, filterable table of entries (median with its interval, IQR, failure rate
with its interval over seed units, comparable reported numbers with citation links) and each entry's
score distribution as an inline SVG strip and box plot (red: failed runs), and each entry's
dev-set noise share (Jordan 2024: the share of the between-run variance that a finite dev set
adds). Entries of all the inputs (leaderboard files or run folders, suite/outputs/site_inputs.py)
are ranked together within the leaderboard's rank groups (one rank 1 per group), and each row names
its group and the input it came from. Below the table, per training size, the cross-task aggregate
over every input (suite.stats.aggregate): per model and recipe a performance profile, drawn by the
page's JS as an inline SVG, and its normalised IQM, naming the entry that stood for a task where
the group has several.
"""

from __future__ import annotations

import html
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from suite.errors import SuiteError
from suite.outputs.leaderboard import cross_task, rank
from suite.outputs.site_inputs import Documents, compact_settings, read_inputs

WIDTH, HEIGHT, PAD = 220, 34, 6  # the distribution plot, in px


def _setting(hparams: dict[str, Any]) -> str:
    keys = ("lr", "batch_size", "epochs")
    main = [
        f"{k}={hparams[k]:g}" if isinstance(hparams.get(k), float) else f"{k}={hparams.get(k)}" for k in keys
    ]
    rest = [f"{k}={v}" for k, v in sorted(hparams.items()) if k not in keys]
    return " ".join(main + rest)


def _interval(block: dict[str, Any] | None, scale: float = 100.0) -> list[float] | None:
    ci = (block or {}).get("ci95")
    return [scale * ci[0], scale * ci[1]] if ci else None


def _citation(rep: dict[str, Any]) -> dict[str, Any]:
    url = f"https://arxiv.org/abs/{rep['arxiv']}" if rep.get("arxiv") else None
    gap = rep.get("gap") or {}
    return {
        "model": rep["model"],
        "value": rep["value"],
        "statistic": rep["statistic"],
        "n_runs": rep.get("n_runs"),
        "source": rep.get("source", ""),
        "url": url,
        "percentile": gap.get("percentile"),
        # A median or mean tested without the failure rule's baseline says what its test cannot hold.
        "notes": [*(rep.get("notes") or []), *([gap["fallback"]] if gap.get("fallback") else [])],
    }


def _mixed(entry: dict[str, Any]) -> bool:
    return bool((entry.get("stack") or {}).get("mixed"))


def _noise(entry: dict[str, Any]) -> dict[str, Any] | None:
    """The entry's dev-set noise share (suite.stats.estimates.eval_noise), or None."""
    found = (entry.get("examples") or {}).get("eval_noise")
    if not found:
        return None
    keys = ("share", "noise_var", "between_runs_var", "dominates", "runs", "examples")
    return {k: found.get(k) for k in keys}


def _row(entry: dict[str, Any], setting: str, scale: tuple[float, float]) -> dict[str, Any]:
    summary = entry["summary"]
    stats, intervals = summary["all"], summary["intervals"]
    scores = [(100 * r["score"], bool(r.get("failed"))) for r in entry["runs"] if r.get("score") is not None]
    median = stats.get("median")
    return {
        "board": entry["board"],
        "rank": entry["rank"],
        "group": group_label(entry["rank_group"]),
        "task": entry["task"],
        "model": entry["model"] + (" (imported)" if entry.get("imported") else ""),
        "size": entry["size"],
        "setting": setting + (" [mixed software stack]" if _mixed(entry) else ""),
        "hparams": _setting(entry["setting"]),  # the whole setting, the short one's tooltip
        "metric": entry["metric"],
        "split": entry["eval_split"],
        "runs": summary["runs"],
        "median": None if median is None else 100 * median,
        "median_ci": _interval(intervals.get("median")),
        "iqr": None if stats.get("iqr") is None else 100 * stats["iqr"],
        "noise": _noise(entry),
        "failure_rate": summary["failure_rate"] if summary["runs"] else None,  # no run: no rate, not 0%
        "failure_unknown": bool(summary.get("unknown")),  # imported without the failure rule's baseline
        "failure_ci": _interval(intervals.get("failure_rate"), 1.0),
        "unit": (intervals.get("median") or {}).get("unit", ""),
        "reported": [_citation(r) for r in entry["reported"] if r["comparable"]],
        "context": sum(1 for r in entry["reported"] if not r["comparable"]),
        "svg": distribution_svg(scores, scale),
    }


def distribution_svg(scores: list[tuple[float, bool]], scale: tuple[float, float]) -> str:
    """One entry's runs on a shared axis: a box (quartiles, median, whiskers to min/max) and a
    dot per run (red: failed), with the axis ends labelled."""
    low, high = scale
    span = (high - low) or 1.0

    def x(value: float) -> float:
        return PAD + (WIDTH - 2 * PAD) * (value - low) / span

    parts = [
        f'<svg class="dist" width="{WIDTH}" height="{HEIGHT + 10}" viewBox="0 0 {WIDTH} {HEIGHT + 10}" '
        f'role="img" aria-label="{len(scores)} run scores">',
        f'<line x1="{PAD}" x2="{WIDTH - PAD}" y1="{HEIGHT}" y2="{HEIGHT}" stroke="#bbb"/>',
        f'<text x="{PAD}" y="{HEIGHT + 9}" font-size="8">{low:.1f}</text>',
        f'<text x="{WIDTH - PAD}" y="{HEIGHT + 9}" font-size="8" text-anchor="end">{high:.1f}</text>',
    ]
    values = np.array([s for s, _ in scores])
    if len(values):
        q1, med, q3 = np.percentile(values, [25, 50, 75])
        parts += [
            f'<line x1="{x(values.min()):.1f}" x2="{x(values.max()):.1f}" y1="14" y2="14" stroke="#666"/>',
            f'<rect x="{x(q1):.1f}" y="7" width="{max(x(q3) - x(q1), 1):.1f}" height="14" '
            'fill="#dde6f3" stroke="#666"/>',
            f'<line x1="{x(med):.1f}" x2="{x(med):.1f}" y1="7" y2="21" stroke="#222" stroke-width="2"/>',
        ]
    rng = np.random.default_rng(0)  # a fixed jitter: the page is the same on every build
    for value, failed in scores:
        colour = "#d62728" if failed else "#1f77b4"
        parts.append(
            f'<circle cx="{x(value):.1f}" cy="{26 + rng.uniform(-3, 3):.1f}" r="2.5" fill="{colour}" '
            f'fill-opacity="0.75"><title>{value:.2f}{" (failed)" if failed else ""}</title></circle>'
        )
    parts.append("</svg>")
    return "".join(parts)


def _scales(entries: list[dict[str, Any]]) -> dict[tuple[str, str], tuple[float, float]]:
    """One axis per (task, metric), so that rows of one task compare by eye."""
    values: dict[tuple[str, str], list[float]] = {}
    for e in entries:
        scored = [100 * r["score"] for r in e["runs"] if r.get("score") is not None]
        values.setdefault((e["task"], e["metric"]), []).extend(scored)
    return {k: (min(v), max(v)) if v else (0.0, 100.0) for k, v in values.items()}


def group_label(group: dict[str, Any]) -> str:
    """The rank group's fields that the task, metric and size columns do not show."""
    split = "dev" if group["eval_split"] == "validation" else group["eval_split"]
    evaluated = group["eval_set"] or split
    if group["eval_limit"]:
        evaluated += f" ({group['eval_limit']} examples)"
    return f"{evaluated}, max_length {group['max_length']}, data {group['data']}"


def ranked(documents: Documents) -> list[dict[str, Any]]:
    """Every entry of every input, with its input's name, re-ranked across the inputs within the
    leaderboard's rank groups (each file's own ranks are not comparable)."""
    entries = [{**e, "board": name} for name, doc in documents for e in doc["entries"]]
    rank(entries)
    return entries


def build_rows(paths: list[Path], documents: Documents | None = None) -> list[dict[str, Any]]:
    """Every entry of every input as the page's rows, ranked across the inputs."""
    entries = ranked(documents or read_inputs(paths))
    scales = _scales(entries)
    settings = compact_settings(entries)
    rows = [_row(e, s, scales[(e["task"], e["metric"])]) for e, s in zip(entries, settings, strict=True)]
    for position, row in enumerate(rows):  # sorting by rank keeps each group's rows together
        row["position"] = position
    return rows


def model_and_recipe(entry: dict[str, Any]) -> str:
    """An aggregate's group: the same model (and recipe, where the sweep names one) on every task."""
    recipe = entry["setting"].get("recipe")
    return f"{entry['model']} {recipe}" if recipe else entry["model"]


def _stood_for(entries: list[dict[str, Any]], groups: set[str]) -> dict[str, dict[str, str]]:
    """Group -> task -> the entry that stood for the task where the group has several there (its
    rank-1 setting, `settings="best"`), named by its setting and input."""
    members: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for e in entries:
        members.setdefault((model_and_recipe(e), e["task"]), []).append(e)
    labels = dict(zip(map(id, entries), compact_settings(entries), strict=True))
    out: dict[str, dict[str, str]] = {}
    for (name, task), own in members.items():
        if name in groups and len(own) > 1:
            best = min(own, key=lambda e: e["rank"])
            out.setdefault(name, {})[task] = (
                f"{labels[id(best)]} from {best['board']} (best of {len(own)} settings)"
            )
    return out


def _aggregate(board: str, size: str, found: dict[str, Any], entries: list[dict[str, Any]]) -> dict[str, Any]:
    """What the page draws of one cross-task aggregate: per group the IQM and the profile."""
    at_size = [e for e in entries if str(e["size"]) == size] or entries  # else: each task's own size
    stood_for = _stood_for(at_size, set(found["groups"]))
    groups = {
        name: {
            "iqm": group["iqm"],
            "profile": {k: group["profile"].get(k) for k in ("taus", "share", "lower", "upper")},
            "tasks": group.get("tasks", []),
            "complete": group.get("complete", True),
            "failure_rate": group.get("failure_rate"),
            "stood_for": stood_for.get(name, {}),
        }
        for name, group in found["groups"].items()
    }
    improvement = {n: i for n, i in (found.get("improvement") or {}).items() if i.get("estimate") is not None}
    return {
        "board": board,
        "size": size,
        "groups": groups,
        "normalisation": {t: n["kind"] for t, n in sorted(found.get("normalisation", {}).items())},
        "improvement": improvement,
        "note": found.get("note") or "",
    }


def build_aggregates(paths: list[Path], documents: Documents | None = None) -> list[dict[str, Any]]:
    """Per training size, the cross-task aggregate over the entries of every input (`cross_task`
    in suite/outputs/leaderboard.py, grouped by model and recipe) as the page draws it; one block
    with a note where there is none (one task, or why they could not be aggregated)."""
    documents = documents or read_inputs(paths)
    entries = ranked(documents)
    board = "all inputs" if len(documents) > 1 else documents[0][0]
    found = cross_task(entries, by=model_and_recipe)
    if found is None:
        return [{"board": board, "note": "one task: nothing to aggregate"}]
    if "groups" not in found and "note" in found:
        return [{"board": board, "note": found["note"]}]
    return [_aggregate(board, size, one, entries) for size, one in found.items()]


def _json(value: Any) -> str:
    return json.dumps(value, sort_keys=True).replace("</", "<\\/")


def render(rows: list[dict[str, Any]], sources: list[str], aggregates: Sequence[dict[str, Any]] = ()) -> str:
    """The page: data as JSON in the page (`</` escaped), the hand-written CSS and JS inlined."""
    from suite.outputs.site_assets import CONTROLS, CSS, JS
    from suite.outputs.site_profile import PROFILE_CSS, PROFILE_JS, SECTION

    title = "suite leaderboard"
    return (
        "<!doctype html>\n"
        f'<html lang="en"><head><meta charset="utf-8"><title>{title}</title>\n'
        f"<style>{CSS}{PROFILE_CSS}</style></head>\n<body>\n"
        f'<h1>{title}</h1>\n<p class="sources">{len(rows)} entries from '
        f"{html.escape(', '.join(sources))}. Scores x100; intervals are 95%; click a column to sort.</p>\n"
        f"{CONTROLS}{SECTION}"
        f'<script id="data" type="application/json">{_json(rows)}</script>\n'
        f'<script id="aggregates" type="application/json">{_json(list(aggregates))}</script>\n'
        f"<script>{JS}</script>\n<script>{PROFILE_JS}</script>\n</body></html>\n"
    )


def _check_folder(out: Path) -> None:
    """`-o` names a folder for index.html: a file there (or on its way) is refused in one line,
    before anything is read or written."""
    for where in (out, *out.parents):
        if where.exists():
            if not where.is_dir():
                raise SuiteError(f"-o {out}: {where} is a file, not a folder")
            break
    if (out / "index.html").is_dir():
        raise SuiteError(f"-o {out}: {out / 'index.html'} is a folder, not the page")


def write_site(paths: list[Path], out: Path) -> tuple[Path, list[str]]:
    """Write `out/index.html` for the given leaderboards; returns its path and a line per entry
    no trial of which produced a score (its row shows no median)."""
    from suite.outputs.unscored import entry_lines
    from suite.study.storage import write_atomic

    _check_folder(out)
    documents = read_inputs(paths)
    rows = build_rows(paths, documents)
    aggregates = build_aggregates(paths, documents)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as err:  # an unwritable parent
        raise SuiteError(f"-o {out}: cannot make the folder ({err.strerror or err})") from None
    page = out / "index.html"
    write_atomic(page, render(rows, [name for name, _ in documents], aggregates))
    return page, entry_lines([e for _, doc in documents for e in doc["entries"]])
