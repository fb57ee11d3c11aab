"""Figures stay readable: reported-value labels of the expected-max figure never overlap."""

from __future__ import annotations

import itertools

import matplotlib

matplotlib.use("Agg")

import numpy as np  # noqa: E402
import pytest  # noqa: E402
from matplotlib.text import Text  # noqa: E402

from suite.plots import expected_max_curve, spread  # noqa: E402


def _records(n: int = 20) -> list[dict]:
    scores = np.random.default_rng(0).normal(0.70, 0.02, size=n)
    return [
        {"score": float(s), "failed": False, "outcome": "succeeded", "hparams": {"lr": 2e-5}, "size": 500,
         "seeds": {"init": i, "order": i, "subsample": 0}}
        for i, s in enumerate(scores)
    ]  # fmt: skip


def _reported(values: list[float]) -> list[dict]:
    return [
        {"model": f"bert-base-{i}", "value": v, "statistic": "median", "n_runs": 5, "comparable": True}
        for i, v in enumerate(values)
    ]  # fmt: skip


@pytest.mark.parametrize("values", [[70.0 + 0.05 * i for i in range(14)], [69.3, 69.3, 69.3, 88.0, 88.1]])
def test_reported_labels_never_overlap(values: list[float]) -> None:
    reported = _reported(values) + [{**_reported([50.0])[0], "comparable": False}]  # context: not drawn
    fig = expected_max_curve(_records(), "accuracy", reported)
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    ax = fig.axes[0]
    labels = [t for t in ax.texts if t.get_text().startswith("bert-base")]
    assert len(labels) == len(values)
    boxes = [Text.get_window_extent(t, renderer) for t in labels]  # the text, not its connector
    for a, b in itertools.combinations(boxes, 2):
        assert not a.overlaps(b), (a, b)
    legend = ax.get_legend().get_window_extent(renderer)
    figure = fig.bbox
    for box in boxes:
        assert not box.overlaps(legend)
        assert figure.x0 <= box.x0 and box.x1 <= figure.x1 and figure.y0 <= box.y0 and box.y1 <= figure.y1
    # Each label still points at its own value.
    assert sorted(t.xy[1] for t in labels) == pytest.approx(sorted(values))


def test_spread_keeps_order_gap_and_centre() -> None:
    out = spread([1.0, 1.0, 1.1, 5.0], gap=0.5)
    assert all(b - a >= 0.5 - 1e-12 for a, b in itertools.pairwise(out))
    assert np.mean(out) == pytest.approx(np.mean([1.0, 1.0, 1.1, 5.0]))
    assert spread([1.0, 3.0], gap=0.5) == [1.0, 3.0]
