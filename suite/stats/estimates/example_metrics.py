"""Dev-set metrics as functions of example weights: what the Multi-Bootstrap recomputes on every
replicate's draw of dev examples (an example drawn k times weighs k), vectorised over replicates.

Accuracy, F1 (binary, or macro over more labels) and Matthews from a weighted confusion matrix;
Pearson from weighted moments and Spearman from weighted average-tie ranks; QA exact match and F1
as weighted means over questions; NER entity F1, precision and recall from summed entity counts.
Written here because scikit-learn's metrics take one sample at a time, and a replicate loop over
them is 100x slower than these matrix forms (checked equal to them in tests/test_multibootstrap.py).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from suite.study.records import TrialRecord

Scores = Callable[[np.ndarray], np.ndarray]  # example weights (B, n) -> per-run metric (B, R)


def _ratio(num: np.ndarray, den: np.ndarray) -> np.ndarray:
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(den > 0, num / np.where(den > 0, den, 1), 0.0)


def weighted_sums(values: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """values (..., R, n, k), weights (..., B, n) -> (..., B, R, k): sum over examples of weight x value.
    (einsum, not a batched matmul: numpy's batched matmul is ~20x slower at these shapes.)"""
    return np.einsum("...bn,...rnk->...brk", weights, values)


def mean_scores(values: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """A metric that is a mean over examples (accuracy, exact match, QA F1): values (..., R, n),
    weights (..., B, n) -> (..., B, R)."""
    return weighted_sums(values[..., None], weights)[..., 0] / weights.sum(-1, keepdims=True)


def _confusion_metric(metric: str, num_labels: int) -> Callable[[np.ndarray], np.ndarray]:
    """(..., L, L) confusion (rows true, columns predicted) -> the metric, as suite.model.metrics."""

    def score(c: np.ndarray) -> np.ndarray:
        diag = np.diagonal(c, axis1=-2, axis2=-1)
        true, pred, total = c.sum(-1), c.sum(-2), c.sum((-2, -1))
        if metric == "accuracy":
            return diag.sum(-1) / total
        if metric == "f1":
            per_class = _ratio(2 * diag, true + pred)
            return per_class[..., 1] if num_labels == 2 else per_class.mean(-1)
        # Matthews (Gorodkin's multi-class form, sklearn's): 0 when a side is constant
        cov = diag.sum(-1) * total - (true * pred).sum(-1)
        den = np.sqrt(
            np.maximum(total**2 - (pred**2).sum(-1), 0) * np.maximum(total**2 - (true**2).sum(-1), 0)
        )
        return _ratio(cov, den)

    return score


def _pearson_from_moments(
    mx: np.ndarray,
    my: np.ndarray,
    mxx: np.ndarray,
    myy: np.ndarray,
    mxy: np.ndarray,
    scale: tuple[np.ndarray, np.ndarray] | None = None,
) -> np.ndarray:
    """Pearson r from weighted means of x, y, x^2, y^2, xy; 0 when either side is constant (its
    variance under 1e-12 of `scale`, the mean squares of the uncentred values; default mxx, myy)."""
    vx, vy, cov = mxx - mx * mx, myy - my * my, mxy - mx * my
    sx, sy = scale or (mxx, myy)
    flat = (vx <= 1e-12 * np.abs(sx)) | (vy <= 1e-12 * np.abs(sy))
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(flat, 0.0, cov / np.sqrt(np.where(flat, 1.0, vx * vy)))


def _weighted_pearson(x: np.ndarray, y: np.ndarray, w: np.ndarray) -> np.ndarray:
    """Pearson r of (x, y) pairs with weights w along the last axis; 0 when either is constant."""
    total = w.sum(-1)
    mean = lambda v: (w * v).sum(-1) / total  # noqa: E731
    scale = mean(x * x), mean(y * y)
    x, y = x - mean(x)[..., None], y - mean(y)[..., None]
    return _pearson_from_moments(mean(x), mean(y), mean(x * x), mean(y * y), mean(x * y), scale)


def _rank_plan(x: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The sort of x (n,) that `weighted_ranks` needs: order, first position of each distinct value
    in that order, and each example's distinct-value index."""
    values, inverse = np.unique(x, return_inverse=True)
    order = np.argsort(inverse, kind="stable")
    return order, np.searchsorted(inverse[order], np.arange(len(values))), inverse


def weighted_ranks(x: np.ndarray, weights: np.ndarray, plan: tuple | None = None) -> np.ndarray:
    """Average-tie ranks (scipy's) of x (n,) within the sample that repeats example i weights[b, i]
    times: (#drawn values below) + (#drawn ties + 1) / 2; weights (B, n) -> (B, n)."""
    order, starts, inverse = plan or _rank_plan(x)
    group = np.add.reduceat(weights[:, order], starts, axis=1)  # drawn copies of each distinct value
    below = np.cumsum(group, axis=1) - group
    return (below + (group + 1) / 2)[:, inverse]


@dataclass(frozen=True)
class PerExample:
    """One dev set's per-example outcomes for R runs, as a function from example weights to each
    run's metric; `n`: dev examples."""

    n: int
    scores: Scores
    metric: str


def _stack(records: Sequence[TrialRecord], field: str, dtype: Any = float) -> np.ndarray:
    return np.array([r["per_example"][field] for r in records], dtype=dtype)


def per_example_scores(
    records: Sequence[TrialRecord], metric: str, num_labels: int | None = None
) -> PerExample | str:
    """The runs' metric recomputable on any reweighting of their (common) dev examples, or why not."""
    pers = [r.get("per_example") for r in records]
    if not records or any(not p for p in pers):
        return "not every run kept its per-example outcomes"
    if len({tuple(sorted(p)) for p in pers}) != 1 or len({len(next(iter(p.values()))) for p in pers}) != 1:
        return "the runs' per-example outcomes differ in kind or length"
    kind = pers[0]
    n = len(next(iter(kind.values())))
    if n == 0:
        return "no dev examples"
    if "label" in kind:  # classification or regression: the same dev labels for every run
        labels = _stack(records, "label")
        if not (labels == labels[0]).all():
            return "the runs were not scored on the same dev labels"
        y, pred = labels[0], _stack(records, "prediction")
        if metric in ("pearson", "spearman"):
            return PerExample(n, _correlation_scores(metric, y, pred), metric)
        if metric not in ("accuracy", "f1", "matthews"):
            return f"{metric} cannot be recomputed from predictions and labels"
        if metric == "accuracy":
            correct = (pred == y).astype(float)
            return PerExample(n, lambda w: mean_scores(correct, w), metric)
        y_int, p_int = y.astype(int), pred.astype(int)
        size = num_labels or max(2, int(max(y_int.max(), p_int.max())) + 1)
        cell = y_int[None, :] * size + p_int  # (R, n): the confusion cell each example falls in
        onehot = (cell[..., None] == np.arange(size * size)).astype(float)  # (R, n, L*L)
        confusion_metric = _confusion_metric(metric, size)

        def confusion_scores(w: np.ndarray) -> np.ndarray:
            sums = weighted_sums(onehot, w)
            return confusion_metric(sums.reshape(*sums.shape[:-1], size, size))

        return PerExample(n, confusion_scores, metric)
    if "gold" in kind:  # NER: micro scores from summed per-sentence entity counts
        gold = _stack(records, "gold")
        if not (gold == gold[0]).all():
            return "the runs were not scored on the same dev sentences"
        if metric not in ("entity_f1", "precision", "recall"):
            return f"{metric} cannot be recomputed from the per-sentence entity counts (default-mode totals)"
        counts = np.stack([_stack(records, k) for k in ("correct", "predicted", "gold")], -1)

        def entity_scores(w: np.ndarray) -> np.ndarray:
            c, p, g = np.moveaxis(weighted_sums(counts, w), -1, 0)
            return {"entity_f1": _ratio(2 * c, p + g), "precision": _ratio(c, p), "recall": _ratio(c, g)}[
                metric
            ]

        return PerExample(n, entity_scores, metric)
    if metric == "accuracy" and "correct" in kind:  # 0/1 correctness alone
        correct = _stack(records, "correct")
        return PerExample(n, lambda w: mean_scores(correct, w), metric)
    if metric in kind and metric in ("exact_match", "f1"):  # QA: a mean over questions
        values = _stack(records, metric)
        return PerExample(n, lambda w: mean_scores(values, w), metric)
    return f"{metric} cannot be recomputed from the stored per-example outcomes"


def _correlation_scores(metric: str, y: np.ndarray, pred: np.ndarray) -> Scores:
    if metric == "pearson":  # weighted moments of values centred on the full-data means
        xc, yc = pred - pred.mean(-1, keepdims=True), y - y.mean()
        per_run = np.stack([xc, xc * xc, xc * yc], -1)  # (R, n, 3)
        shared = np.stack([yc, yc * yc], -1)[None]  # (1, n, 2)

        def pearson(w: np.ndarray) -> np.ndarray:  # (B, n) -> (B, R)
            total = w.sum(-1)[:, None]
            mx, mxx, mxy = np.moveaxis(weighted_sums(per_run, w), -1, 0) / total
            my, myy = np.moveaxis(weighted_sums(shared, w), -1, 0) / total
            return _pearson_from_moments(mx, my, mxx, myy, mxy)

        return pearson
    plan_y, plans = _rank_plan(y), [_rank_plan(p) for p in pred]

    def spearman(w: np.ndarray) -> np.ndarray:  # Pearson of the drawn sample's ranks
        ry = weighted_ranks(y, w, plan_y)
        ranks = [weighted_ranks(p, w, q) for p, q in zip(pred, plans, strict=True)]
        return np.stack([_weighted_pearson(rx, ry, w) for rx in ranks], -1)

    return spearman
