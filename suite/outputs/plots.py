"""Seaborn figures of a study, for the variance report notebook and `suite compare`.

The unit of every figure is one (size, setting) or a figure faceted by size (docs/design.md, "The
unit of a statistic"): no figure pools sizes, and settings are pooled only where the figure shows
them side by side.
A figure function returns a Figure, or a one-line reason (a str) when the study's design has
nothing for it to show (one setting, no crossed grid); `display` shows figures and prints each
reason once, so a section that does not apply is one line of text, not an empty figure.
"""

from __future__ import annotations

import io
import json
from collections import defaultdict
from collections.abc import Sequence
from typing import Any

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import seaborn as sns
from seaborn.utils import relative_luminance

from suite.config.task import size_order
from suite.outputs.curves import curve_set, dev_curves, loss_curves  # noqa: F401 (the report calls plots.*)
from suite.outputs.entries import ENTRY_FIGURES, by_entry, entry_keys, entry_label, figure_entries  # noqa: F401
from suite.outputs.margin_labels import reported_lines, spread  # noqa: F401 (tests: plots.spread)
from suite.stats.estimates import expected_max
from suite.study.records import runs, setting_key, setting_labels

sns.set_theme(style="whitegrid", context="notebook")

Result = plt.Figure | str  # a figure, or why there is none
Records = Sequence[dict[str, Any]]
FRAME_COLUMNS = ["score", "failed", "size", "setting", "lr", "batch_size", "epochs"]


def show(fig: plt.Figure) -> None:
    """Display a figure once in a notebook (and free it) as it is laid out: every figure here sets
    its own margins (`tight_layout` or fixed ones), so the inline backend's
    `bbox_inches="tight"`, a measuring draw before the drawing (a third of a large report's
    drawing time), is not needed."""
    from IPython.display import Image
    from IPython.display import display as ipython_display

    png = io.BytesIO()
    fig.savefig(png, format="png")
    plt.close(fig)
    ipython_display(Image(data=png.getvalue(), format="png"))


def display(results: Result | Sequence[tuple[str, Result]], note: str | None = None) -> None:
    """Show each figure; print each reason once, naming the entries it applies to unless it
    applies to all of them. `note`, a line printed first where a figure is shown (which entries
    the figures are of)."""
    items = [("", results)] if isinstance(results, plt.Figure | str) else list(results)
    if note and any(not isinstance(result, str) for _, result in items):
        print(note)
    reasons: dict[str, list[str]] = defaultdict(list)
    for label, result in items:
        if isinstance(result, str):
            reasons[result].append(label)
        else:
            show(result)
    for reason, labels in reasons.items():
        print(reason if len(labels) == len(items) else f"{', '.join(labels)}: {reason}")


def frame(records: Records) -> pd.DataFrame:
    """One row per run (errored and pruned trials are not runs): score x100, failed flag, seeds,
    hyperparameters, and a label of the full setting (every hyperparameter that varies). Built
    column by column: a row of dicts a run took pandas most of a 10,000-run frame's time."""
    records = runs(records)
    keys = [setting_key(r["hparams"]) for r in records]
    labels = setting_labels(
        [{"hparams": h} for h in {k: r["hparams"] for k, r in zip(keys, records, strict=True)}.values()]
    )
    hparams = [r["hparams"] for r in records]
    columns: dict[str, list[Any]] = {
        "score": [None if r.get("score") is None else 100 * r["score"] for r in records],
        "failed": [bool(r.get("failed")) for r in records],
        "size": [str(r["size"]) for r in records],
        "setting": [labels[k] for k in keys],
        **{name: [h[name] for h in hparams] for name in ("lr", "batch_size", "epochs")},
    }
    for name in dict.fromkeys(k for r in records for k in r["seeds"]):  # first seen first, as rows would
        columns[f"{name}_seed"] = [r["seeds"].get(name, np.nan) for r in records]
    return pd.DataFrame(columns) if records else pd.DataFrame([], columns=FRAME_COLUMNS)  # still the columns


def sizes(records: Records) -> list[Any]:
    """The sizes of the records, in numeric order (`full` last)."""
    return sorted({r["size"] for r in records}, key=size_order)


def _one_entry(records: Records) -> None:
    """Figures of one (size, setting) refuse records that pool several."""
    units = {(str(r["size"]), setting_key(r["hparams"])) for r in records}
    if len(units) > 1:
        raise ValueError(f"records span {len(units)} (size, setting) pairs: pass one entry's records")


def _facets(
    n: int, width: float = 5.0, height: float = 4.0, stacked: bool = False
) -> tuple[plt.Figure, list[plt.Axes]]:
    """n facets side by side, or one above the other (`stacked`)."""
    shape, size = ((n, 1), (width, height * n)) if stacked else ((1, n), (width * n, height))
    fig, axes = plt.subplots(*shape, figsize=size, squeeze=False)
    return fig, list(axes.flat)


def distribution(records: Records, metric: str) -> Result:
    """Score per run, one facet per size, the settings side by side within it (red: failed)."""
    df = frame(records).dropna(subset=["score"])
    if df.empty:
        return "no scored runs: no score distribution"
    order = [str(s) for s in sizes(runs(records)) if str(s) in set(df["size"])]
    settings = df["setting"].nunique()
    many = settings > 6  # each size a row of its own, narrower boxes: 4 sizes of 20 were 100 in wide
    width = max(5.0, (0.55 if many else 1.2) * settings + 2)
    fig, axes = _facets(len(order), width=width, height=5.0 if many else 4.0, stacked=many)
    for ax, size in zip(axes, order, strict=True):
        at = df[df["size"] == size]
        sns.boxplot(at, x="setting", y="score", color="0.9", showfliers=False, ax=ax)
        palette = {False: "tab:blue", True: "tab:red"}
        sns.stripplot(at, x="setting", y="score", hue="failed", palette=palette, jitter=0.2, size=6, ax=ax)
        baselines = {r.get("baseline") for r in records if str(r["size"]) == size and r.get("baseline")}
        if len(baselines) == 1 and next(iter(baselines)) > 0:
            ax.axhline(100 * next(iter(baselines)), ls=":", color="tab:red", label="trivial baseline")
        ax.set(ylabel=f"dev {metric} (x100)", title=f"size {size}", xlabel="")
        ax.tick_params(axis="x", rotation=90 if many else 30)
        if ax is axes[-1]:  # one legend, outside the data
            ax.legend(title="failed / baseline", loc="upper left", bbox_to_anchor=(1.01, 1), fontsize=8)
        else:
            ax.get_legend().remove()
    fig.suptitle("Score per run (red: failed)")
    fig.tight_layout()
    return fig


def expected_max_curve(records: Records, metric: str, reported: Records = (), title: str = "") -> Result:
    """Expected max of n runs of ONE entry with its band; each comparable reported value is a
    dashed line labelled at the right margin, labels spread apart so that none overlaps another."""
    _one_entry(records)
    # records: the interval follows the seed design; the points a reader can tell apart
    curve = expected_max(runs(records), at=curve_points(len(runs(records))))
    if not curve:
        return "no scored runs: no expected maximum"
    shown = [r for r in reported if r.get("comparable")]  # context numbers: not drawn
    fig, ax = plt.subplots(figsize=(9, max(4.0, 1.5 + 0.28 * len(shown))))
    n = np.array([p["n"] for p in curve])
    mean = 100 * np.array([p["mean"] for p in curve])
    ax.plot(n, mean, marker="o", label="expected max of n runs")
    # The band is the estimate's 95% interval (across seeds), not the spread of a max over subsets
    # of our runs, which is 0 at n = N however few runs there are.
    bounds = [p.get("ci95") or [np.nan, np.nan] for p in curve]
    low, high = (100 * np.array([b[i] if b[i] is not None else np.nan for b in bounds]) for i in (0, 1))
    ax.fill_between(n, low, high, alpha=0.25, label="95% interval of the estimate")
    ax.xaxis.set_major_locator(plt.MaxNLocator(integer=True))
    heading = "Expected maximum performance" + (f": {title}" if title else "")
    ax.set(xlabel="n (runs / trials)", ylabel=f"dev {metric} (x100)", title=heading)
    ax.legend(loc="lower right")
    fig.subplots_adjust(left=0.09, right=0.6, bottom=0.13, top=0.9)  # the right margin holds the labels
    reported_lines(fig, ax, shown)
    return fig


def curve_points(n: int, every: int = 100, beyond: int = 60) -> list[int]:
    """The n an expected-max curve of N runs is drawn at: every n up to `every`, then `beyond`
    log-spaced points up to N. Why: every n to 10,000 costs O(N^2) and draws points no one can
    tell apart."""
    if n <= every:
        return list(range(1, n + 1))
    return sorted({*range(1, every + 1), *np.geomspace(every, n, beyond).round().astype(int).tolist(), n})


def grid_groups(records: Records) -> dict[str, list[dict[str, Any]]]:
    """Runs by (size, every varying hyperparameter but lr and batch size): the cells of one
    group differ in lr and batch size only, so one heatmap never pools sizes or epochs."""
    scored = runs(records)
    keys = sorted({k for r in scored for k in r["hparams"]} - {"lr", "batch_size"})
    varying = [k for k in keys if _varies([r["hparams"].get(k) for r in scored])]
    groups: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in sorted(scored, key=lambda r: size_order(r["size"])):
        rest = " ".join(f"{k}={r['hparams'].get(k)}" for k in varying)
        groups[f"size {r['size']}" + (f", {rest}" if rest else "")].append(r)
    return dict(groups)


def _varies(values: list[Any]) -> bool:
    """Whether the values are not all one value, as their JSON tells (1 and 1.0, or 1 and true,
    are two; NaN is one): plain strings, integers, booleans and None compared as they are, 10,000
    JSON encodings a hyperparameter being a tenth of a large report's heatmaps."""
    plain = (str, int, bool, type(None))
    return len({(type(v), v) if type(v) in plain else json.dumps(v) for v in values}) > 1


def lr_batch_heatmaps(records: Records) -> list[tuple[str, Result]] | str:
    """Median and IQR of the score per lr x batch size cell (across seeds), one figure per
    `grid_groups` group that has a grid; a reason when no group has one."""
    out: list[tuple[str, Result]] = []
    for label, group in grid_groups(records).items():
        df = frame(group).dropna(subset=["score"])
        if df["lr"].nunique() < 2 and df["batch_size"].nunique() < 2:
            continue
        cells = df.groupby(["lr", "batch_size"])["score"]
        tables = {"median": cells.median(), "IQR": cells.agg(_iqr)}
        fig, axes = plt.subplots(1, 2, figsize=(10, 4))
        for ax, (name, table) in zip(axes, tables.items(), strict=True):
            _heatmap(ax, table.unstack("batch_size"), annotate=True)
            ax.set(title=f"{name} score by lr x batch size")
        fig.suptitle(label)
        # set, not measured: tight_layout draws every label of the figure to find this spacing
        fig.subplots_adjust(left=0.1, right=0.98, bottom=0.13, top=0.84, wspace=0.35)
        out.append((label, fig))
    return out or "one learning rate and batch size per size (and epochs): no lr x batch grid in this study"


def _heatmap(ax: plt.Axes, table: pd.DataFrame, annotate: bool) -> None:
    """A table as coloured cells (viridis, with a colour bar), each annotated to one decimal:
    seaborn's heatmap, drawn by hand because seaborn draws the whole figure inside each call (to
    turn overlapping tick labels), most of this section's time at 4 sizes."""
    values = table.to_numpy(dtype=float)
    image = ax.imshow(values, cmap="viridis", aspect="auto", interpolation="nearest")
    ax.figure.colorbar(image, ax=ax)
    ax.set(xticks=range(values.shape[1]), yticks=range(values.shape[0]))
    ax.set_xticklabels([str(c) for c in table.columns])
    ax.set_yticklabels([str(i) for i in table.index])
    ax.set(xlabel=table.columns.name, ylabel=table.index.name)
    ax.grid(False)
    if not annotate:
        return
    for (row, column), value in np.ndenumerate(values):
        if np.isfinite(value):  # dark text on light cells, as seaborn chooses it
            light = relative_luminance(image.to_rgba(value)) > 0.408
            ax.text(column, row, f"{value:.1f}", ha="center", va="center", color="0.15" if light else "w")


def _iqr(x: pd.Series) -> float:
    q1, q3 = np.percentile(x, [25, 75])
    return float(q3 - q1)


def init_order_heatmap(records: Records, title: str = "") -> Result:
    """Mean score per init seed x order seed cell of ONE entry (a crossed seed design only)."""
    _one_entry(records)
    df = frame(records).dropna(subset=["score"])
    if df.empty:
        return "no scored runs: no init x order grid"
    inits, orders = df["init_seed"].nunique(), df["order_seed"].nunique()
    cells = len(df.drop_duplicates(["init_seed", "order_seed"]))
    if inits < 2 or orders < 2 or cells != inits * orders:
        return "seeds drawn independently: no init x order grid (a crossed seed design draws one)"
    table = df.pivot_table(index="init_seed", columns="order_seed", values="score", aggfunc="mean")
    fig, ax = plt.subplots(figsize=(6, 5))
    _heatmap(ax, table, annotate=table.shape[0] <= 8)
    ax.set(title="Score by init seed x order seed" + (f"\n{title}" if title else ""))
    fig.tight_layout()
    return fig


def variance_components_bar(result: dict[str, Any] | None, title: str = "") -> Result:
    """Shares of ONE entry's score variance per seed component, with their 95% intervals (across
    seeds); a component the design cannot identify is named as such. With one identifiable
    component there is nothing to split: a reason, not a chart."""
    components = (result or {}).get("components") or {}
    parts = {k: c for k, c in components.items() if c.get("identifiable") and c.get("share") is not None}
    if not parts:
        return "no variance components: several seeds with different scores are needed"
    if len(parts) == 1:
        return f"one identifiable variance component ('{next(iter(parts))}' = 100%): nothing to split"
    names = list(parts)
    shares = np.array([parts[k]["share"] for k in names])
    # A share interval the design cannot narrow (e.g. [0, 1] on a 3 x 3 grid) is not drawn as if
    # it were information: its bar is hatched, without an error bar, and the caption says why.
    loose = [k for k in names if parts[k].get("share_informative") is False]
    bounds = [None if k in loose else parts[k].get("share_ci95") for k in names]
    low = np.array([v if b is None else b[0] for b, v in zip(bounds, shares, strict=True)])
    high = np.array([v if b is None else b[1] for b, v in zip(bounds, shares, strict=True)])
    fig, ax = plt.subplots(figsize=(7, 3.3))
    bars = ax.bar(names, shares, color="tab:blue", yerr=[shares - low, high - shares], capsize=4)
    for bar, name in zip(bars, names, strict=True):
        if name in loose:
            bar.set(hatch="//", alpha=0.45)
    heading = "Where the variance comes from (95% intervals across seeds)" + (f"\n{title}" if title else "")
    ax.set(ylim=(0, 1), ylabel="share of variance", title=heading)
    ax.set_xlabel(_share_caption(components, loose), fontsize=9)
    fig.tight_layout()
    return fig


def _share_caption(components: dict[str, Any], loose: list[str]) -> str:
    lines = []
    missing = [k for k, c in components.items() if not c.get("identifiable")]
    if missing:
        lines.append(f"not identifiable in this design: {', '.join(missing)}")
    if loose:
        need = [components[k].get("seeds_per_axis_needed") for k in loose]
        need = [n for n in need if n is not None]
        more = f" (about {max(need)} seeds per axis would bound them)" if need else ""
        lines.append(f"hatched: share not bounded by these seeds{more}")
    return "\n".join(lines)


def importance_bar(importance: dict[str, Any] | None, title: str = "") -> Result:
    """fANOVA importances across ONE size's settings, scaled to the share of variance the
    settings explain; the rest is the seeds' and noise's."""
    parts = dict((importance or {}).get("importances") or {})
    if not parts:
        return "one hyperparameter setting (or no score variance): no importance to estimate"
    together = (importance or {}).get("factors") or {}  # parameters that move together: one bar
    parts = {
        (f"{k} (with {', '.join(together[k][1:])})" if k in together else k): v for k, v in parts.items()
    }
    parts["seeds and noise"] = importance.get("unexplained (seeds, noise)") or 0.0
    fig, ax = plt.subplots(figsize=(6, 3))
    sns.barplot(x=list(parts.values()), y=list(parts), ax=ax, color="tab:green", orient="h")
    heading = "Hyperparameter importance (fANOVA, scaled)" + (f": {title}" if title else "")
    ax.set(xlabel="share of score variance", title=heading)
    fig.tight_layout()
    return fig


def performance_profile(aggregate: dict[str, Any] | None, title: str = "") -> Result:
    """The share of each model's runs above each normalised score, with its bootstrap band
    (rliable's performance profile, suite.stats.aggregate): tau 0 is the best constant prediction
    (the share there is 1 - the failure rate), tau 1 the reported median (or a perfect score)."""
    if not aggregate or not aggregate.get("groups"):
        return (aggregate or {}).get("note") or "one task: nothing to aggregate across tasks"
    fig, ax = plt.subplots(figsize=(6, 4))
    for name, group in aggregate["groups"].items():
        p = group["profile"]
        ax.step(p["taus"], p["share"], where="post", label=name)
        ax.fill_between(p["taus"], p["lower"], p["upper"], step="post", alpha=0.2)
    for tau in (0, 1):
        ax.axvline(tau, ls=":", c="grey")
    ax.set(xlabel="normalised score (0: constant prediction, 1: reference)", ylabel="share of runs above")
    ax.set_title(title or "performance profile")
    ax.legend()
    fig.tight_layout()
    return fig


def compare_runs(a: Records, b: Records, labels: tuple[str, str], metric: str) -> plt.Figure:
    """Two studies side by side, one facet per size (each study's settings apart)."""
    df = pd.concat([frame(a).assign(study=labels[0]), frame(b).assign(study=labels[1])])
    df = df.dropna(subset=["score"])
    order = [str(s) for s in sizes([*runs(a), *runs(b)]) if str(s) in set(df["size"])] or ["(none)"]
    if df["setting"].nunique() > 1:
        df["study"] = df["study"] + "\n" + df["setting"]
    fig, axes = _facets(len(order), width=6.0)
    for ax, size in zip(axes, order, strict=True):
        at = df[df["size"] == size]
        if at.empty:
            continue
        sns.boxplot(at, x="study", y="score", color="0.9", showfliers=False, ax=ax)
        palette = {False: "tab:blue", True: "tab:red"}
        sns.stripplot(at, x="study", y="score", hue="failed", palette=palette, ax=ax)
        ax.set(ylabel=f"dev {metric} (x100)", title=f"size {size}", xlabel="")
    fig.suptitle("Comparison (red: failed)")
    fig.tight_layout()
    return fig
