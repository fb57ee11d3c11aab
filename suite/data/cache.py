"""On-disk cache of tokenized features, keyed by tokenizer, task data and subsample.

Tokenizing is done once per (tokenizer, task, size, subsample seed); later trials,
workers and restarts load the same file.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

ENV_VAR = "SUITE_CACHE_DIR"


def cache_dir() -> Path:
    return Path(os.environ.get(ENV_VAR, Path.home() / ".cache" / "suite")).expanduser()


def tokenizer_fingerprint(tokenizer: Any) -> str:
    """Changes whenever the tokenizer's vocabulary, normalisation or special tokens change."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    body = backend.to_str() if backend is not None else json.dumps(tokenizer.get_vocab(), sort_keys=True)
    extra = f"{type(tokenizer).__name__}|{tokenizer.padding_side}|{tokenizer.model_max_length}"
    return hashlib.sha256((body + extra).encode()).hexdigest()[:16]


def cached(key: dict[str, Any], build: Callable[[], Any]) -> Any:
    """Load `key`'s features from disk, or build, save (atomically) and return them."""
    digest = hashlib.sha256(json.dumps(key, sort_keys=True, default=str).encode()).hexdigest()[:24]
    path = cache_dir() / "features" / f"{digest}.pt"
    if path.is_file():
        return torch.load(path, weights_only=False)
    value = build()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    torch.save(value, tmp)
    os.replace(tmp, path)
    return value
