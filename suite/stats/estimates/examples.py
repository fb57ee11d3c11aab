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


def _sklearn_score_fn(
    per_example: dict[str, list], metric: str, num_labels: int
) -> Callable[[np.ndarray], float]:
    """A class metric without a confusion-count formula (e.g. a regression's correlation),
    recomputed by scikit-learn on a subset (index array) of the run's dev examples."""
    # Here, not at the top: scikit-learn (and pandas) load in ~1.5 s, and every user of the
    # estimates layer (`suite compare`, `suite leaderboard`) would pay it on import.
    from suite.model.metrics import classification_scores

    labels, predictions = np.asarray(per_example["label"]), np.asarray(per_example["prediction"])
    return lambda i: classification_scores([metric], labels[i], predictions[i], num_labels)[metric]


# A bootstrap scores 1,000 resamples per run. scikit-learn checks its inputs on every call (~1.7 ms:
# 1.7 s per run, most of a small study's output time), so the class metrics a resample needs are
# computed here from its confusion counts, as scikit-learn computes them (tests/test_examples.py
# holds them to scikit-learn's on random resamples). Each takes counts [true, predicted, ...]: one
# table or every resample of every run at once, the classes leading so that sums over them are
# whole-array additions.
def confusion(labels: np.ndarray, predictions: np.ndarray, num_labels: int) -> np.ndarray:
    """counts[true, predicted] over the classes 0..num_labels-1."""
    k = num_labels
    return np.bincount(labels.astype(int) * k + predictions.astype(int), minlength=k * k).reshape(k, k)


def _accuracy(counts: np.ndarray) -> np.ndarray:
    return sum(counts[i, i] for i in range(len(counts))) / counts.sum((0, 1))


def _f1(counts: np.ndarray) -> np.ndarray:
    """Binary F1 of class 1 for two classes, macro F1 otherwise (suite.model.metrics' choice);
    0 where a class is neither true nor predicted (zero_division=0)."""
    true, predicted = counts.sum(1), counts.sum(0)
    hits = np.stack([counts[i, i] for i in range(len(counts))])
    denominator = (true + predicted).astype(float)
    per_class = np.divide(2.0 * hits, denominator, out=np.zeros(denominator.shape), where=denominator > 0)
    return per_class[1] if len(counts) == 2 else per_class.mean(0)


def _matthews(counts: np.ndarray) -> np.ndarray:
    counts = counts.astype(np.float64)
    true, predicted = counts.sum(1), counts.sum(0)
    right, n = sum(counts[i, i] for i in range(len(counts))), counts.sum((0, 1))
    covariance = right * n - (true * predicted).sum(0)
    spread = (n * n - (predicted * predicted).sum(0)) * (n * n - (true * true).sum(0))
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(spread == 0, 0.0, covariance / np.sqrt(spread))


FROM_CONFUSION: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "accuracy": _accuracy,
    "f1": _f1,
    "matthews": _matthews,
}
CHUNK = 512  # runs scored at once: their resampled counts stay ~20 MB


def dev_sampling_error(
    record: TrialRecord, metric: str, num_labels: int = 2, seed: int = 0
) -> dict[str, Any] | None:
    """The standard error and 95% interval of one run's score over resampled dev examples."""
    return dev_sampling_errors([record], metric, num_labels, seed)[0]


def dev_sampling_errors(
    records: Sequence[TrialRecord], metric: str, num_labels: int = 2, seed: int = 0
) -> list[dict[str, Any] | None]:
    """`dev_sampling_error` of each record (None where it has no per-example outcomes or no
    score). Every run of n examples is resampled with the same RESAMPLES draws (one generator
    seeded `seed`), so the runs are scored together: each resample's counts are its draws'
    multiplicities times the runs' per-example outcomes, one matrix product for all runs."""
    out: list[dict[str, Any] | None] = [None] * len(records)
    by_size: dict[int, list[int]] = {}
    for j, r in enumerate(records):
        if (per := r.get("per_example")) and np.isfinite(score(r)):
            by_size.setdefault(len(next(iter(per.values()))), []).append(j)
    for n, members in by_size.items():
        draws = _draws([records[j]["per_example"] for j in members], metric, num_labels, n, seed)
        se = draws.std(ddof=1, axis=1)
        low, high = np.percentile(draws, [2.5, 97.5], axis=1)
        for j, *found in zip(members, se, low, high, strict=True):
            e, lo, hi = map(float, found)
            out[j] = {"se": e, "ci95": [lo, hi], "examples": n, "unit": "dev examples (one run)"}
    return out


def _draws(
    per_examples: list[dict[str, list]], metric: str, num_labels: int, n: int, seed: int
) -> np.ndarray:
    """(runs, RESAMPLES): each run's score on each resample of its n dev examples."""
    picks = np.random.default_rng(seed).integers(0, n, (RESAMPLES, n))  # one resample a row
    if "label" in per_examples[0] and metric not in FROM_CONFUSION:
        fns = [_sklearn_score_fn(p, metric, num_labels) for p in per_examples]
        return np.array([[fn(i) for i in picks] for fn in fns])
    rows = np.arange(RESAMPLES)[:, None] * n
    weights = np.bincount((picks + rows).ravel(), minlength=RESAMPLES * n).reshape(RESAMPLES, n).astype(float)
    parts = [
        _scored(per_examples[i : i + CHUNK], metric, num_labels, weights)
        for i in range(0, len(per_examples), CHUNK)
    ]
    return np.concatenate(parts)


def _scored(
    per_examples: list[dict[str, list]], metric: str, num_labels: int, weights: np.ndarray
) -> np.ndarray:
    """(runs, RESAMPLES) scores from the resamples' multiplicities `weights` (RESAMPLES, n)."""

    def stacked(key: str) -> np.ndarray:  # (n, runs)
        return np.array([p[key] for p in per_examples], dtype=float).T

    if "label" in per_examples[0]:  # confusion counts of every resample of every run: one product
        k = num_labels
        codes = (stacked("label") * k + stacked("prediction")).astype(int)
        cells = (codes[:, None, :] == np.arange(k * k)[:, None]).reshape(len(codes), -1)  # (n, cell x run)
        # float32 holds counts up to 2^24 exactly, at half float64's time and memory
        counts = (weights.astype(np.float32) @ cells.astype(np.float32)).astype(float)
        return FROM_CONFUSION[metric](np.moveaxis(counts.reshape(len(weights), k, k, -1), 0, 2)).T
    if "gold" in per_examples[0]:  # NER: micro entity F1 from summed counts
        correct, predicted, gold = (weights @ stacked(key) for key in ("correct", "predicted", "gold"))
        denominator = predicted + gold
        return np.divide(2 * correct, denominator, out=np.zeros(denominator.shape), where=denominator > 0).T
    return (weights @ stacked(metric) / weights.shape[1]).T  # QA: a mean over questions


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
    """Fleiss' kappa of an [examples, categories] table of rater counts (same raters per row):
    statsmodels' `fleiss_kappa` (a dependency already, for REML), and 1 where every rater chose
    one category on every example: the chance agreement is then 1 and statsmodels' 0 / 0 gives NaN,
    but the runs agree perfectly. The tests hold it to Fleiss (1971)'s formula on 300 random tables
    (the same floats) and to his worked example."""
    # Here, not at the top: statsmodels loads pandas (~0.3 s), which a leaderboard without
    # per-example outcomes never needs.
    from statsmodels.stats.inter_rater import fleiss_kappa as statsmodels_fleiss_kappa

    table = np.asarray(table, dtype=float)
    p_category = table.sum(0) / table.sum()
    if float((p_category**2).sum()) == 1:  # every rater in one category throughout
        return 1.0
    return float(statsmodels_fleiss_kappa(table))


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
    errors = [e["se"] for e in dev_sampling_errors(records, metric, num_labels) if e is not None]
    scores = finite_scores(records)
    return {
        "dev_se_median": float(np.median(errors)) if errors else None,
        "across_seeds_std": float(np.std(scores, ddof=1)) if len(scores) > 1 else None,
        "agreement": agreement(records),
        "eval_noise": eval_noise(records, metric),
    }
