"""On-disk cache of tokenized features, keyed by tokenizer, task data, subsample and code.

Tokenizing is done once per (tokenizer, task, size, subsample seed); later trials, workers and
restarts load the same file. What a key holds is the study identity's to say
(`suite.identity.feature_key`): the reader's fields, the pinned code's digest and the tokenizer
libraries' versions.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import torch

from suite.errors import SuiteError
from suite.faults import reach
from suite.identity import CACHE_ENV, cache_dir, feature_key


def cached(key: dict[str, Any], build: Callable[[], Any]) -> Any:
    """Load `key`'s features from disk, or build, save (atomically) and return them.

    Keys name the content hash of the data files, so an edited file never reuses features; nor does
    other code or another tokenizer library. A torn file (a crash of another tool, a full disk) fails
    to load and is rebuilt.
    """
    path = cache_dir() / "features" / f"{feature_key(key)}.pt"
    if path.is_file():
        try:
            return torch.load(path, weights_only=False)
        except Exception:  # noqa: BLE001 - any unreadable cache file is rebuilt, never trusted
            path.unlink(missing_ok=True)
    value = build()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        torch.save(value, tmp)
        reach("cache_write")
        os.replace(tmp, path)
    except OSError as err:
        raise SuiteError(
            f"{cache_dir()}: cannot write the feature cache ({err.strerror or err}); "
            f"free space or set {CACHE_ENV}"
        ) from None
    return value
