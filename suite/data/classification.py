"""Sentence and sentence-pair examples for the [CLS] head: read, label-check, subsample, tokenize."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from suite.data.cache import cached, tokenizer_fingerprint
from suite.data.paths import local_file
from suite.data.subsample import regression_strata, subsample_indices
from suite.data.tables import read_hub_split, read_rows, require_columns
from suite.errors import DataError
from suite.provenance import file_sha256
from suite.spec import TaskSpec

Features = list[dict[str, Any]]

EVAL_SUBSAMPLE_SEED = 0  # the dev subsample (eval_limit) is fixed across trials


class ClassificationData:
    """One task's labelled splits, and their tokenized features for one tokenizer."""

    def __init__(self, spec: TaskSpec, root: Path | None, tokenizer: Any) -> None:
        self.spec = spec
        self.tokenizer = tokenizer
        self.sources: dict[str, str] = {}
        self.texts: dict[str, list[tuple[str, ...]]] = {}
        self.labels: dict[str, np.ndarray] = {}
        # "dev" is whichever split is evaluated: validation by default, test on request.
        for key, split in (("train", "train"), ("dev", spec.eval_split)):
            self._load(key, split, root)

    def _load(self, key: str, split: str, root: Path | None) -> None:
        spec, data = self.spec, self.spec.data
        if data.local is not None and (root is not None or data.hub is None):
            path = local_file(root, data.local, getattr(data, split), split, spec.name)
            rows, source = read_rows(path, data.format, data.header, data.columns), str(path)
        else:
            hub = data.hub
            name = getattr(hub, f"{split}_split")
            rows, source = read_hub_split(hub.path, hub.name, hub.revision, name), f"hub:{hub.path}/{name}"
        require_columns(rows, [*data.text, data.label], source, spec.name)
        self.sources[key] = source
        self.texts[key] = [tuple(row[c] for c in data.text) for row in rows]
        self.labels[key] = self._encode_labels([row[data.label] for row in rows], source)

    def _encode_labels(self, raw: list[Any], source: str) -> np.ndarray:
        if self.spec.regression:
            try:
                return np.array([float(v) for v in raw], dtype=np.float32)
            except ValueError as err:
                raise DataError(f"task {self.spec.name}: {source}: {err}") from None
        index = {str(label): i for i, label in enumerate(self.spec.labels)}
        for row_no, value in enumerate(raw, start=1):
            if str(value) not in index:
                raise DataError(
                    f"task {self.spec.name}: {source}: row {row_no}: label {value!r} is not in "
                    f"the spec's labels {self.spec.labels}"
                )
        return np.array([index[str(v)] for v in raw], dtype=np.int64)

    @property
    def num_labels(self) -> int:
        return 1 if self.spec.regression else len(self.spec.labels)

    def _strata(self, labels: np.ndarray) -> np.ndarray:
        return regression_strata(labels) if self.spec.regression else labels

    def train_indices(self, size: int | str, subsample_seed: int) -> np.ndarray:
        labels = self.labels["train"]
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
            "sha256": file_sha256(self.sources[split]),
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
