"""Sentence and sentence-pair examples for the [CLS] head: read, label-check, subsample, tokenize."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from suite.config.task import TaskSpec, per_class_k
from suite.data.cache import cached
from suite.data.hub import HUB_PREFIX, data_origin, load_split, source_sha256, use_hub
from suite.data.paths import local_file
from suite.data.subsample import per_class_indices, regression_strata, subsample_indices
from suite.data.tables import Rows, read_rows, require_columns
from suite.errors import DataError
from suite.identity import tokenizer_fingerprint

Features = list[dict[str, Any]]

EVAL_SUBSAMPLE_SEED = 0  # the dev subsample (eval_limit) is fixed across trials


class ClassificationData:
    """One task's labelled splits, and their tokenized features for one tokenizer."""

    def __init__(self, spec: TaskSpec, root: Path | None, tokenizer: Any) -> None:
        self.spec = spec
        self.tokenizer = tokenizer
        self.sources: dict[str, str] = {}
        self.origin = data_origin(spec.data, root)
        self.texts: dict[str, list[tuple[str, ...]]] = {}
        self.labels: dict[str, np.ndarray] = {}
        # "dev" is whichever split is evaluated: validation by default, test on request.
        for key, split in (("train", "train"), ("dev", spec.eval_split)):
            self._load(key, split, root)

    def _load(self, key: str, split: str, root: Path | None) -> None:
        spec, data = self.spec, self.spec.data
        if use_hub(data, root):
            found, source = load_split(data.hub, split, [*data.text, data.label], data.label, spec.name)
            rows = Rows(found)
        else:
            path = local_file(root, data.local, getattr(data, split), split, spec.name)
            rows, source = read_rows(path, data.format, data.header, data.columns), str(path)
        require_columns(rows, [*data.text, data.label], source, spec.name)
        self.sources[key] = source
        self.texts[key] = [tuple(row[c] for c in data.text) for row in rows]
        self.labels[key] = self._encode_labels(rows, source)

    def _encode_labels(self, rows: Rows, source: str) -> np.ndarray:
        column = self.spec.data.label
        if self.spec.regression:
            values = []
            for i, row in enumerate(rows):
                try:
                    values.append(float(row[column]))
                except ValueError:
                    values.append(float("nan"))
                if not np.isfinite(values[-1]):
                    raise DataError(
                        f"task {self.spec.name}: {source}: {rows.where(i)}: target {row[column]!r} "
                        "is not a finite number"
                    )
            return np.array(values, dtype=np.float32)
        index = {str(label): i for i, label in enumerate(self.spec.labels)}
        for i, row in enumerate(rows):
            if str(row[column]) not in index:
                raise DataError(
                    f"task {self.spec.name}: {source}: {rows.where(i)}: label {row[column]!r} is not in "
                    f"the spec's labels {self.spec.labels}"
                    + (" (map it in data.hub.labels)" * source.startswith(HUB_PREFIX))
                )
        return np.array([index[str(row[column])] for row in rows], dtype=np.int64)

    @property
    def num_labels(self) -> int:
        return 1 if self.spec.regression else len(self.spec.labels)

    def _strata(self, labels: np.ndarray) -> np.ndarray:
        return regression_strata(labels) if self.spec.regression else labels

    def train_indices(self, size: int | str, subsample_seed: int) -> np.ndarray:
        labels = self.labels["train"]
        if k := per_class_k(size):  # the spec admits a K-shot size only for a task with labels
            return per_class_indices(labels, k, subsample_seed, self.spec.labels)
        return subsample_indices(len(labels), size, subsample_seed, self._strata(labels))

    def dev_indices(self) -> np.ndarray:
        labels = self.labels["dev"]
        size = self.spec.eval_limit or "full"
        return subsample_indices(len(labels), size, EVAL_SUBSAMPLE_SEED, self._strata(labels))

    def features(self, split: str, indices: np.ndarray) -> Features:
        """Tokenized examples (no padding: batches are padded to their own longest)."""
        key = {
            "kind": "classification",
            "version": 2,  # features carry their position (`example`) in the requested order
            "tokenizer": tokenizer_fingerprint(self.tokenizer),
            "source": self.sources[split],
            "sha256": source_sha256(self.sources[split]),
            "text": self.spec.data.text,
            "labels": self.spec.labels,
            "max_length": self.spec.max_length,
            "indices": np.asarray(indices).tolist(),
        }
        return cached(key, lambda: self._tokenize(split, indices))

    def _tokenize(self, split: str, indices: np.ndarray) -> Features:
        texts = [self.texts[split][i] for i in indices]
        columns = list(zip(*texts, strict=True))
        encoded = self.tokenizer(
            *[list(c) for c in columns], truncation=True, max_length=self.spec.max_length
        )
        labels = self.labels[split][indices]
        keys = list(encoded.keys())
        return [
            {**{k: encoded[k][i] for k in keys}, "labels": labels[i].item(), "example": i}
            for i in range(len(indices))
        ]
