"""Training curves of a study for the variance report: the loss per step and the dev score per
epoch of every run (up to `CURVES_SHOWN` a panel, then a sample, said in its title), one panel
per (size, setting), so recipes are never mixed in one panel; red runs failed, blue ones did not.
Re-exported by suite/outputs/plots.py, which the notebook calls."""

from __future__ import annotations

import json
from collections.abc import Collection, Sequence
from typing import Any

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.collections import LineCollection

from suite.config.task import size_order
from suite.study.records import runs, setting_key, setting_labels

Result = plt.Figure | str  # a figure, or why there is none
Records = Sequence[dict[str, Any]]
CURVES_SHOWN = 60  # curves a panel draws; past it a seeded sample, its failed runs in proportion


def shown(own: list[dict[str, Any]], limit: int = CURVES_SHOWN) -> list[dict[str, Any]]:
    """A panel's runs, or past `limit` a seeded sample of them that keeps the failed runs' share
    (at least one failed run when any failed): a reader sees no more than some dozens of lines,
    and drawing 10,000 took most of a large report's time."""
    if len(own) <= limit:
        return own
    failed = [r for r in own if r.get("failed")]
    rest = [r for r in own if not r.get("failed")]
    k = min(len(failed), max(1 if failed else 0, round(limit * len(failed) / len(own))))
    rng = np.random.default_rng(0)
    pick = [failed[i] for i in sorted(rng.choice(len(failed), k, replace=False))] if k else []
    return [rest[i] for i in sorted(rng.choice(len(rest), limit - k, replace=False))] + pick  # red on top


def _per_setting(
    with_curves: Records,
    curve: Any,
    xlabel: str,
    ylabel: str,
    title: str,
    marks: bool = False,
    only: Collection[tuple[str, str]] | None = None,
) -> Result:
    """One panel per (size, setting), sizes in order, four to a row: each panel draws its own
    runs only (`curve(record)`: its (x, y) points, or None), so recipes are never mixed in one
    panel. `only`: the (size, setting key) pairs to draw (the report's drawn entries), named as
    among all the records."""
    labels = setting_labels(with_curves)
    units: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for r in sorted(with_curves, key=lambda r: size_order(r["size"])):
        key = setting_key(r["hparams"])
        if only is None or (str(r["size"]), key) in only:
            units.setdefault((str(r["size"]), labels[key]), []).append(r)
    if not units:
        return "none of the entries drawn recorded these curves"
    columns = min(4, len(units))
    rows = -(-len(units) // columns)
    fig, axes = plt.subplots(rows, columns, figsize=(4.5 * columns, 3.5 * rows + 0.5), squeeze=False)
    _fixed_layout(fig, rows, columns)
    for ax, ((size, label), own) in zip(axes.flat, units.items(), strict=False):
        drawn = shown(own)
        _draw(ax, drawn, curve, marks)
        sample = f"\n{len(drawn)} of {len(own)} runs drawn (a seeded sample)" if len(drawn) < len(own) else ""
        ax.set(xlabel=xlabel, ylabel=ylabel, title=f"size {size}, {label}{sample}")
    for ax in list(axes.flat)[len(units) :]:
        fig.delaxes(ax)
    fig.suptitle(title, y=1 - 0.1 / fig.get_size_inches()[1], va="top")  # 0.1 in from the top
    return fig


# Margins in inches around 4.5 x 3.5 in panels: a title of two lines above each, tick labels and
# an axis label below and to the left.
_LEFT, _RIGHT, _TOP, _BOTTOM, _ROW_GAP, _COLUMN_GAP = 0.75, 0.15, 0.95, 0.55, 1.15, 0.75


def _fixed_layout(fig: plt.Figure, rows: int, columns: int) -> None:
    """Panel spacing set in inches, not measured: `tight_layout` draws every tick label of every
    panel to measure it, 2.7 s of an 80-panel figure, to find what this grid always needs."""
    width, height = fig.get_size_inches()
    panel_w = (width - _LEFT - _RIGHT - (columns - 1) * _COLUMN_GAP) / columns
    panel_h = (height - _TOP - _BOTTOM - (rows - 1) * _ROW_GAP) / rows
    fig.subplots_adjust(
        left=_LEFT / width,
        right=1 - _RIGHT / width,
        top=1 - _TOP / height,
        bottom=_BOTTOM / height,
        wspace=_COLUMN_GAP / panel_w,
        hspace=_ROW_GAP / panel_h,
    )


def _draw(ax: plt.Axes, drawn: Records, curve: Any, marks: bool) -> None:
    """A panel's curves: one line per run (with a dot at each point if `marks`), as one collection
    per colour, failed runs (red) over successful ones (blue): 80 panels of 60 runs drawn as a
    plot each took most of a 10,000-trial report's time."""
    for failed, colour in ((False, "tab:blue"), (True, "tab:red")):
        lines = [p for r in drawn if bool(r.get("failed")) == failed and (p := curve(r)) is not None]
        if not lines:
            continue
        style = {"alpha": 0.6, "zorder": 2 + failed}
        ax.add_collection(LineCollection(lines, colors=colour, linewidths=1, **style))
        if marks:
            ax.scatter(*np.concatenate(lines).T, s=4, color=colour, **style)
    ax.autoscale_view()


def _trailing_mean(values: list[float], window: int) -> np.ndarray:
    """The mean of each value and up to window - 1 before it, of those that are finite (pandas'
    rolling mean with min_periods=1); NaN where none is."""
    x = np.asarray(values, dtype=float)
    finite = np.isfinite(x)
    total = np.cumsum(np.concatenate([[0.0], np.where(finite, x, 0.0)]))
    seen = np.cumsum(np.concatenate([[0], finite]))
    k = np.arange(1, len(x) + 1)
    start = np.maximum(k - window, 0)
    with np.errstate(invalid="ignore", divide="ignore"):
        return (total[k] - total[start]) / (seen[k] - seen[start])


def loss_curves(records: Records, only: Collection[tuple[str, str]] | None = None) -> Result:
    """Training loss per run, one panel per (size, setting) (of `only`, where given): failed (red)
    vs successful (blue)."""
    with_curves = [r for r in runs(records) if r.get("loss_curve")]
    if not with_curves:
        return "no loss curves recorded"

    def curve(r: dict[str, Any]) -> np.ndarray:
        smooth = _trailing_mean(r["loss_curve"], max(1, len(r["loss_curve"]) // 20))
        return np.column_stack([np.arange(len(smooth)), smooth])

    title = "Loss curves per setting: failed (red) vs successful (blue)"
    return _per_setting(with_curves, curve, "step", "training loss (smoothed)", title, only=only)


def curve_set(records: Records) -> str:
    """What the runs' dev curves were evaluated on (`evaluated_on.epochs`; older records: the
    whole set), in words."""
    seen = {
        json.dumps(r.get("evaluated_on", {}).get("epochs", {"set": "whole"}), sort_keys=True) for r in records
    }
    sets = [json.loads(s) for s in sorted(seen)]
    if len(sets) == 1 and sets[0]["set"] == "sample":
        return f"each epoch on a fixed sample of {sets[0]['examples']} dev examples"
    if len(sets) == 1:
        return "each epoch on the whole dev set"
    return "each epoch on the curve sample or the whole dev set (records differ)"


def dev_curves(records: Records, metric: str, only: Collection[tuple[str, str]] | None = None) -> Result:
    """Dev score per epoch per run, one panel per (size, setting) (of `only`, where given): failed
    (red) vs successful (blue), on what the records say each epoch evaluated (the curve sample);
    the scores every statistic uses are the whole set's, after the last epoch."""
    with_curves = [r for r in runs(records) if r.get("epochs")]
    if not with_curves:
        return "no dev curves recorded"

    def curve(r: dict[str, Any]) -> np.ndarray | None:
        points = [(e["epoch"], 100 * e[metric]) for e in r["epochs"] if e.get(metric) is not None]
        return np.array(points, dtype=float) if points else None

    title = f"Dev curves per setting, {curve_set(with_curves)}: failed (red) vs successful (blue)"
    return _per_setting(with_curves, curve, "epoch", f"dev {metric} (x100)", title, marks=True, only=only)
