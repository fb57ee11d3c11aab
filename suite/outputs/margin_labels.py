"""Reported values on an expected-max figure: a dashed line each, labelled in the right margin,
the labels moved apart so that none overlaps another (`spread`) and each joined to its line."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.text import Text

LABEL_X = 1.1  # labels start here (axes fraction); connectors fill the gap, never crossing a label


def reported_lines(fig: plt.Figure, ax: plt.Axes, reported: Sequence[dict[str, Any]]) -> None:
    """Each comparable reported value as a dashed line across `ax`, labelled in the right margin."""
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
