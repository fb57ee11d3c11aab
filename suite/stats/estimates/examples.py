"""Per-example statistics: how much of a score's movement is the small dev set, not the seed.

Each run keeps its final evaluation's outcome per dev example (`record["per_example"]`):
prediction, label and correctness for classification, entity counts per sentence for NER,
EM/F1 per question for QA. From them:
- the dev-set sampling error of one run: a percentile bootstrap over dev examples of that run's
  score ("across examples", the stderr lm-evaluation-harness prints), beside the spread across
  seeds ("across seeds");
- agreement across seeds: the share of dev examples whose correctness flips between runs, and
  Fleiss' kappa of correctness with runs as raters;
- the dev-set noise share of the between-run variance (Jordan, ICLR 2024): with per-example
  correctness rates p_i across runs, the part a finite dev set adds is about (1/n^2) sum p_i (1 - p_i);
  the rest is real spread between runs.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from suite.study.records import TrialRecord, finite_scores, score, scored

RESAMPLES = 1000


def _score_fn(per_example: dict[str, list], metric: str, num_labels: int) -> Callable[[np.ndarray], float]:
    """The run's metric recomputed on a subset (index array) of its dev examples."""
    if "label" in per_example:  # classification or regression
        labels, predictions = np.asarray(per_example["label"]), np.asarray(per_example["prediction"])
        if metric in FROM_CONFUSION:
            return lambda i: FROM_CONFUSION[metric](confusion(labels[i], predictions[i], num_labels))
        # Here, not at the top: scikit-learn (and pandas) load in ~1.5 s, and every user of the
        # estimates layer (`suite compare`, `suite leaderboard`) would pay it on import.
        from suite.model.metrics import classification_scores

        return lambda i: classification_scores([metric], labels[i], predictions[i], num_labels)[metric]
    if "gold" in per_example:  # NER: micro entity F1 from summed counts
        counts = {k: np.asarray(v, dtype=float) for k, v in per_example.items()}

        def entity_f1(i: np.ndarray) -> float:
            denominator = counts["predicted"][i].sum() + counts["gold"][i].sum()
            return float(2 * counts["correct"][i].sum() / denominator) if denominator else 0.0

        return entity_f1
    values = np.asarray(per_example[metric], dtype=float)  # QA: a mean over questions
    return lambda i: float(values[i].mean())


# A bootstrap scores 1,000 resamples per run. scikit-learn checks its inputs on every call (~1.7 ms:
# 1.7 s per run, most of a small study's output time), so the class metrics a resample needs are
# computed here from its confusion counts, as scikit-learn computes them (tests/test_examples.py
# holds them to scikit-learn's on random resamples).
def confusion(labels: np.ndarray, predictions: np.ndarray, num_labels: int) -> np.ndarray:
    """counts[true, predicted] over the classes 0..num_labels-1."""
    k = num_labels
    return np.bincount(labels.astype(int) * k + predictions.astype(int), minlength=k * k).reshape(k, k)


def _accuracy(counts: np.ndarray) -> float:
    return float(np.trace(counts) / counts.sum())


def _f1(counts: np.ndarray) -> float:
    """Binary F1 of class 1 for two classes, macro F1 otherwise (suite.model.metrics' choice);
    0 where a class is neither true nor predicted (zero_division=0)."""
    true, predicted, hits = counts.sum(axis=1), counts.sum(axis=0), np.diag(counts)
    denominator = (true + predicted).astype(float)
    per_class = np.divide(2.0 * hits, denominator, out=np.zeros(len(hits)), where=denominator > 0)
    return float(per_class[1]) if len(hits) == 2 else float(per_class.mean())


def _matthews(counts: np.ndarray) -> float:
    true, predicted = counts.sum(axis=1, dtype=np.float64), counts.sum(axis=0, dtype=np.float64)
    right, n = np.trace(counts, dtype=np.float64), counts.sum(dtype=np.float64)
    covariance = right * n - np.dot(true, predicted)
    spread = (n * n - np.dot(predicted, predicted)) * (n * n - np.dot(true, true))
    return 0.0 if spread == 0 else float(covariance / np.sqrt(spread))


FROM_CONFUSION: dict[str, Callable[[np.ndarray], float]] = {
    "accuracy": _accuracy,
    "f1": _f1,
    "matthews": _matthews,
}


def dev_sampling_error(
    record: TrialRecord, metric: str, num_labels: int = 2, seed: int = 0
) -> dict[str, Any] | None:
    """The standard error and 95% interval of one run's score over resampled dev examples."""
    per_example = record.get("per_example")
    if not per_example or not np.isfinite(score(record)):
        return None
    recompute = _score_fn(per_example, metric, num_labels)
    n = len(next(iter(per_example.values())))
    rng = np.random.default_rng(seed)
    draws = np.array([recompute(rng.integers(0, n, n)) for _ in range(RESAMPLES)])
    return {
        "se": float(draws.std(ddof=1)),
        "ci95": [float(np.percentile(draws, 2.5)), float(np.percentile(draws, 97.5))],
        "examples": n,
        "unit": "dev examples (one run)",
    }


def correctness(record: TrialRecord) -> np.ndarray | None:
    """0/1 per dev example: a right class, an exact-match answer, a sentence whose entities are
    all found with none extra."""
    per = record.get("per_example")
    if not per:
        return None
    if "gold" in per:  # NER counts: a sentence is right when every entity matches
        c, p, g = (np.asarray(per[k]) for k in ("correct", "predicted", "gold"))
        return ((c == p) & (c == g)).astype(int)
    if "correct" in per:
        return np.asarray(per["correct"], dtype=int)
    if "exact_match" in per:
        return np.asarray(per["exact_match"], dtype=int)
    return None  # regression: no right or wrong


def fleiss_kappa(table: np.ndarray) -> float:
    """Fleiss' kappa of an [examples, categories] table of rater counts (same raters per row).

    Written here because the one library implementation (statsmodels) would be a dependency
    for ten lines; checked against Fleiss (1971)'s worked example in the tests.
    """
    table = np.asarray(table, dtype=float)
    raters = table.sum(1)[0]
    p_category = table.sum(0) / table.sum()
    p_example = ((table**2).sum(1) - raters) / (raters * (raters - 1))
    expected = float((p_category**2).sum())
    return 1.0 if expected == 1 else float((p_example.mean() - expected) / (1 - expected))


def agreement(records: Sequence[TrialRecord]) -> dict[str, Any] | None:
    """Across the runs of one setting (same dev set): flip share and Fleiss' kappa."""
    rows = [c for r in records if (c := correctness(r)) is not None]
    if len(rows) < 2 or len({len(c) for c in rows}) != 1:
        return None
    correct = np.vstack(rows)  # [runs, examples]
    right = correct.sum(0)
    return {
        "flip_share": float(((right > 0) & (right < len(rows))).mean()),
        "fleiss_kappa": fleiss_kappa(np.column_stack([right, len(rows) - right])),
        "always_right": float((right == len(rows)).mean()),
        "never_right": float((right == 0).mean()),
        "runs": len(rows),
        "examples": correct.shape[1],
        "unit": "dev examples x runs",
    }


def eval_noise(records: Sequence[TrialRecord], metric: str) -> dict[str, Any] | None:
    """How much of the runs' variance is the dev set's sampling noise (Jordan 2024): the variance
    independent per-example outcomes with each example's correctness rate would give, over the
    observed variance of the runs' scores. Defined for scores that are means of 0/1 outcomes
    (accuracy, exact match); None for other metrics or fewer than 3 runs on one dev set."""
    if metric not in ("accuracy", "exact_match"):
        return None
    rows = [c for r in scored(records) if (c := correctness(r)) is not None]
    if len(rows) < 3 or len({len(c) for c in rows}) != 1:
        return None
    correct = np.vstack(rows).astype(float)  # [runs, examples]
    runs, n = correct.shape
    rate = correct.mean(0)
    noise = float((rate * (1 - rate)).sum() * runs / (runs - 1) / n**2)  # unbiased p(1 - p) per example
    between = float(correct.mean(1).var(ddof=1))
    share = min(1.0, noise / between) if between > 0 else None  # runs that agree: nothing to split
    return {
        "share": share,
        "noise_var": noise,
        "between_runs_var": between,
        "dominates": None if share is None else "dev-set sampling" if share >= 0.5 else "seeds (training)",
        "runs": runs,
        "examples": n,
        "method": "Jordan 2024: (1/n^2) sum p_i (1 - p_i) over the runs' variance",
    }


def example_summary(records: Sequence[TrialRecord], metric: str, num_labels: int = 2) -> dict[str, Any]:
    """Per setting: the typical dev-set sampling error of one run next to the spread across
    seeds, and the agreement of the runs, so a reader sees which of the two dominates."""
    errors = [e["se"] for r in records if (e := dev_sampling_error(r, metric, num_labels)) is not None]
    scores = finite_scores(records)
    return {
        "dev_se_median": float(np.median(errors)) if errors else None,
        "across_seeds_std": float(np.std(scores, ddof=1)) if len(scores) > 1 else None,
        "agreement": agreement(records),
        "eval_noise": eval_noise(records, metric),
    }
