"""Seaborn figures of a study, for the variance report notebook and `suite compare`.

Each function takes records (trials.jsonl rows) and returns a matplotlib Figure; when the
study lacks what a figure needs (one setting only, no crossed grid) the figure says so
instead of silently disappearing.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import seaborn as sns
from matplotlib.text import Text

from suite.records import runs, setting_key, setting_labels
from suite.statistics import expected_max

sns.set_theme(style="whitegrid", context="notebook")


def show(fig: plt.Figure) -> None:
    """Display a figure once in a notebook (and free it)."""
    from IPython.display import display

    display(fig)
    plt.close(fig)


def frame(records: Sequence[dict[str, Any]]) -> pd.DataFrame:
    """One row per run (errored and pruned trials are not runs): score x100, failed flag, seeds,
    hyperparameters, and a label of the full setting (every hyperparameter that varies)."""
    records = runs(records)
    labels = setting_labels(records)
    rows = []
    for r in records:
        h = r["hparams"]
        rows.append(
            {
                "score": None if r.get("score") is None else 100 * r["score"],
                "failed": bool(r.get("failed")),
                "size": str(r["size"]),
                "setting": labels[setting_key(h)],
                "lr": h["lr"],
                "batch_size": h["batch_size"],
                "epochs": h["epochs"],
                **{f"{k}_seed": v for k, v in r["seeds"].items()},
            }
        )
    return pd.DataFrame(rows)


def _note(ax: plt.Axes, text: str) -> None:
    ax.text(0.5, 0.5, text, ha="center", va="center", transform=ax.transAxes, fontsize=11, wrap=True)
    ax.set_axis_off()


def distribution(records: Sequence[dict[str, Any]], metric: str) -> plt.Figure:
    df = frame(records).dropna(subset=["score"])
    fig, ax = plt.subplots(figsize=(8, 4))
    if df.empty:
        _note(ax, "no scored runs")
        return fig
    x = "setting" if df["setting"].nunique() > 1 else "size"
    sns.boxplot(df, x=x, y="score", color="0.9", showfliers=False, ax=ax)
    sns.stripplot(
        df,
        x=x,
        y="score",
        hue="failed",
        palette={False: "tab:blue", True: "tab:red"},
        dodge=False,
        jitter=0.2,
        size=6,
        ax=ax,
    )
    baselines = {r.get("baseline") for r in records if r.get("baseline") is not None}
    if len(baselines) == 1 and next(iter(baselines)) > 0:
        ax.axhline(100 * next(iter(baselines)), ls=":", color="tab:red", label="trivial baseline")
        ax.legend(title="failed / baseline", loc="best")
    ax.set(ylabel=f"dev {metric} (x100)", title="Score per run (red: failed)")
    ax.tick_params(axis="x", rotation=30)
    fig.tight_layout()
    return fig


def expected_max_curve(
    records: Sequence[dict[str, Any]], metric: str, reported: Sequence[dict[str, Any]] = ()
) -> plt.Figure:
    """Expected max of n runs with its band; each comparable reported value is a dashed line
    labelled at the right margin, labels spread apart so that none overlaps another."""
    curve = expected_max([r.get("score") for r in runs(records)])
    shown = [r for r in reported if r.get("comparable")]  # context numbers: not drawn
    fig, ax = plt.subplots(figsize=(9, max(4.0, 1.5 + 0.28 * len(shown))))
    if not curve:
        _note(ax, "no scored runs")
        return fig
    n = np.array([p["n"] for p in curve])
    mean = 100 * np.array([p["mean"] for p in curve])
    std = 100 * np.array([p["std"] for p in curve])
    ax.plot(n, mean, marker="o", label="expected max of n runs")
    ax.fill_between(n, mean - std, mean + std, alpha=0.25, label="+- 1 std")
    ax.xaxis.set_major_locator(plt.MaxNLocator(integer=True))
    ax.set(xlabel="n (runs / trials)", ylabel=f"dev {metric} (x100)", title="Expected maximum performance")
    ax.legend(loc="lower right")
    fig.subplots_adjust(left=0.09, right=0.6, bottom=0.13, top=0.9)  # the right margin holds the labels
    _reported_lines(fig, ax, shown)
    return fig


LABEL_X = 1.1  # labels start here (axes fraction); connectors fill the gap, never crossing a label


def _reported_lines(fig: plt.Figure, ax: plt.Axes, reported: Sequence[dict[str, Any]]) -> None:
    if not reported:
        return
    colours = plt.cm.tab10(np.linspace(0, 1, 10))
    low, high = ax.get_ylim()
    values = [float(r["value"]) for r in reported]
    ax.set_ylim(min(low, *values) - 0.5, max(high, *values) + 0.5)
    texts = []
    for i, rep in enumerate(sorted(reported, key=lambda r: r["value"])):
        colour = colours[(i + 3) % 10]
        ax.axhline(rep["value"], ls="--", lw=1, color=colour)
        k = rep.get("n_runs") or "?"
        label = f"{rep['model']}: {rep['value']:.1f} ({rep['statistic']}, k={k})"
        texts.append(
            ax.annotate(
                label,
                xy=(1.0, rep["value"]),
                xycoords=("axes fraction", "data"),
                xytext=(LABEL_X, rep["value"]),
                textcoords=("axes fraction", "data"),
                va="center",
                fontsize=8,
                color=colour,
                annotation_clip=False,
                arrowprops={"arrowstyle": "-", "color": colour, "lw": 0.8, "relpos": (0, 0.5)},
            )  # fmt: skip
        )
    # Spread the labels in data units: one text height (plus a little) apart, in value order.
    renderer = fig.canvas.get_renderer()
    # The text's own box (an Annotation's extent also holds its connector line).
    height = max(Text.get_window_extent(t, renderer).height for t in texts) * 1.25
    to_data = ax.transData.inverted()
    gap = to_data.transform((0, height))[1] - to_data.transform((0, 0))[1]
    for text, y in zip(texts, spread([t.xyann[1] for t in texts], gap), strict=True):
        text.xyann = (LABEL_X, y)


def spread(positions: Sequence[float], gap: float) -> list[float]:
    """Sorted positions moved apart to at least `gap` each, keeping their order and their mean."""
    moved = list(positions)
    for i in range(1, len(moved)):
        moved[i] = max(moved[i], moved[i - 1] + gap)
    shift = float(np.mean(positions) - np.mean(moved))  # centre the stack on the values
    return [y + shift for y in moved]


def lr_batch_heatmaps(records: Sequence[dict[str, Any]]) -> plt.Figure:
    df = frame(records).dropna(subset=["score"])
    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    if df.empty or df["lr"].nunique() < 2 and df["batch_size"].nunique() < 2:
        for ax in axes:
            _note(ax, "one learning rate and batch size:\nno lr x batch grid in this study")
        return fig
    for ax, (name, fn) in zip(axes, (("median", np.median), ("IQR", _iqr)), strict=True):
        table = df.pivot_table(index="lr", columns="batch_size", values="score", aggfunc=fn)
        sns.heatmap(table, annot=True, fmt=".1f", cmap="viridis", ax=ax)
        ax.set(title=f"{name} score by lr x batch size")
    fig.tight_layout()
    return fig


def _iqr(x: pd.Series) -> float:
    q1, q3 = np.percentile(x, [25, 75])
    return float(q3 - q1)


def init_order_heatmap(records: Sequence[dict[str, Any]]) -> plt.Figure:
    df = frame(records).dropna(subset=["score"])
    fig, ax = plt.subplots(figsize=(6, 5))
    inits, orders = df["init_seed"].nunique(), df["order_seed"].nunique()
    cells = len(df.drop_duplicates(["init_seed", "order_seed"]))
    if df.empty or inits < 2 or orders < 2 or cells != inits * orders:
        _note(ax, "seeds drawn independently:\nno init x order grid (use a crossed seed design)")
        return fig
    table = df.pivot_table(index="init_seed", columns="order_seed", values="score", aggfunc="mean")
    sns.heatmap(table, annot=table.shape[0] <= 8, fmt=".1f", cmap="viridis", ax=ax)
    ax.set(title="Score by init seed x order seed")
    fig.tight_layout()
    return fig


def variance_components_bar(result: dict[str, Any] | None) -> plt.Figure:
    """Shares of the score variance per seed component, with their 95% intervals (across seeds);
    a component the design cannot identify is named as such."""
    fig, ax = plt.subplots(figsize=(7, 3))
    components = (result or {}).get("components") or {}
    parts = {k: c for k, c in components.items() if c.get("identifiable") and c.get("share") is not None}
    if not parts:
        _note(ax, "no variance components: several seeds with different scores are needed")
        return fig
    names = list(parts)
    shares = np.array([parts[k]["share"] for k in names])
    bounds = [parts[k].get("share_ci95") or [None, None] for k in names]
    low = np.array([v if b[0] is None else b[0] for b, v in zip(bounds, shares, strict=True)])
    high = np.array([v if b[1] is None else b[1] for b, v in zip(bounds, shares, strict=True)])
    ax.bar(names, shares, color="tab:blue", yerr=[shares - low, high - shares], capsize=4)
    missing = [k for k, c in components.items() if not c.get("identifiable")]
    title = "Where the variance comes from (95% intervals across seeds)"
    ax.set(ylim=(0, 1), ylabel="share of variance", title=title)
    if missing:
        ax.set_xlabel(f"not identifiable in this design: {', '.join(missing)}")
    fig.tight_layout()
    return fig


def importance_bar(importance: dict[str, Any]) -> plt.Figure:
    """fANOVA importances scaled to the share of variance the settings explain; the rest is
    the seeds' and noise's."""
    fig, ax = plt.subplots(figsize=(6, 3))
    parts = dict((importance or {}).get("importances") or {})
    if not parts:
        _note(ax, "one hyperparameter setting: no importance to estimate")
        return fig
    parts["seeds and noise"] = importance.get("unexplained (seeds, noise)", 0.0)
    sns.barplot(x=list(parts.values()), y=list(parts), ax=ax, color="tab:green", orient="h")
    ax.set(xlabel="share of score variance", title="Hyperparameter importance (fANOVA, scaled)")
    fig.tight_layout()
    return fig


def loss_curves(records: Sequence[dict[str, Any]]) -> plt.Figure:
    fig, ax = plt.subplots(figsize=(8, 4))
    drawn = False
    for r in runs(records):
        curve = r.get("loss_curve") or []
        if curve:
            smooth = pd.Series(curve).rolling(max(1, len(curve) // 20), min_periods=1).mean()
            ax.plot(smooth, color="tab:red" if r.get("failed") else "tab:blue", alpha=0.6, lw=1)
            drawn = True
    if not drawn:
        _note(ax, "no loss curves recorded")
        return fig
    ax.set(
        xlabel="step",
        ylabel="training loss (smoothed)",
        title="Loss curves: failed (red) vs successful (blue)",
    )
    fig.tight_layout()
    return fig


def compare_runs(
    a: Sequence[dict[str, Any]], b: Sequence[dict[str, Any]], labels: tuple[str, str], metric: str
) -> plt.Figure:
    df = pd.concat([frame(a).assign(study=labels[0]), frame(b).assign(study=labels[1])]).dropna(
        subset=["score"]
    )
    fig, ax = plt.subplots(figsize=(6, 4))
    sns.boxplot(df, x="study", y="score", color="0.9", showfliers=False, ax=ax)
    sns.stripplot(df, x="study", y="score", hue="failed", palette={False: "tab:blue", True: "tab:red"}, ax=ax)
    ax.set(ylabel=f"dev {metric} (x100)", title="Comparison (red: failed)")
    fig.tight_layout()
    return fig
