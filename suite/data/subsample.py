"""Seeded small-data subsamples, stratified by label (never the first n rows), or K examples of
every class (a K-shot size, `16/class`)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from suite.errors import DataError


def subsample_indices(
    n_total: int, size: int | str, seed: int, strata: np.ndarray | None = None
) -> np.ndarray:
    """Indices of a `size`-example subsample drawn with `seed`, sorted.

    With `strata` (class labels, or quantile bins of a regression target) the class
    proportions of the full set are kept; classes too rare to stratify fall back to a
    plain seeded draw.
    """
    if not 0 <= int(seed) < 2**32:
        # scikit-learn rejects such a seed with a ValueError, which the fallback below would
        # mistake for an unstratifiable class and silently draw without stratification.
        raise ValueError(f"subsample seed {seed}: expected 0 <= seed < 2**32 (a numpy seed)")
    if size == "full" or int(size) >= n_total:
        return np.arange(n_total)
    everything = np.arange(n_total)
    if strata is not None:
        # Imported here: a process that draws no stratified subsample never loads scikit-learn.
        from sklearn.model_selection import train_test_split

        try:
            chosen, _ = train_test_split(everything, train_size=int(size), stratify=strata, random_state=seed)
            return np.sort(chosen)
        except ValueError:  # a class with fewer members than needed for a split
            pass
    return np.sort(np.random.default_rng(seed).choice(n_total, int(size), replace=False))


def regression_strata(values: np.ndarray, bins: int = 5) -> np.ndarray:
    """Quantile bins of a continuous target, so a subsample keeps its spread."""
    edges = np.quantile(values, np.linspace(0, 1, bins + 1)[1:-1])
    return np.digitize(values, edges)


class ClassTooSmall(DataError):
    """A K-shot draw asked for more examples of a class than the training data holds."""

    def __init__(self, name: str, count: int, k: int) -> None:
        self.name, self.count, self.k = name, count, k
        super().__init__(f"class {name!r} has {count} training example{'s' * (count != 1)}, fewer than {k}")


def per_class_indices(labels: np.ndarray, k: int, seed: int, names: Sequence[str]) -> np.ndarray:
    """Indices of exactly `k` examples of every class (`labels` are positions in `names`), sorted.

    One seeded permutation of all examples; each class keeps its first `k` members in that order.
    The draw depends on the seed and the rows alone, not on the order the classes are listed in,
    and a smaller K takes a subset of a larger K's examples under the same seed.
    """
    labels = np.asarray(labels)
    counts = np.bincount(labels, minlength=len(names))
    for code, name in enumerate(names):
        if counts[code] < k:
            raise ClassTooSmall(str(name), int(counts[code]), k)
    order = np.random.default_rng(seed).permutation(len(labels))
    return np.sort(np.concatenate([order[labels[order] == code][:k] for code in range(len(names))]))
