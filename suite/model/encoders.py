"""Encoders loaded by name (suite.model.names resolves it): weights read from disk for every trial."""

from __future__ import annotations

import contextlib
import inspect
import logging
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
from transformers import AutoConfig, AutoModel, AutoTokenizer, PreTrainedModel
from transformers import initialization as hf_init
from transformers.utils import logging as hf_logging

from suite.errors import ModelError
from suite.model.names import ALIASES, resolve
from suite.provenance import folder_sha256

hf_logging.disable_progress_bar()  # a study shows its own trial progress


def _from_pretrained(loader: Any, target: str, name: str, local: bool = False, **kwargs: Any) -> Any:
    """`loader.from_pretrained`, from local files only when offline or `local` (already fetched)."""
    offline = os.environ.get("HF_HUB_OFFLINE", "0") not in ("0", "", "false")
    try:
        return loader.from_pretrained(target, local_files_only=offline or local, **kwargs)
    except (OSError, ValueError) as err:
        known = ", ".join(sorted(ALIASES))
        why = "offline and not in the local cache" if offline else str(err).splitlines()[0]
        raise ModelError(
            f"unknown model {name!r}: not an alias ({known}), a local folder, or a hub id ({why})"
        ) from None


def load_tokenizer(name: str) -> Any:
    target = resolve(name)
    _from_pretrained(AutoConfig, target, name)  # an unknown model fails here, named
    tokenizer = with_prefix_space(_from_pretrained(AutoTokenizer, target, name))
    # Every head reads its batch as right-padded (the [CLS] at position 0, labels and word starts
    # padded after the tokens): a hub tokenizer saved to pad on the left is made to pad on the right.
    tokenizer.padding_side = "right"
    return tokenizer


def _byte_level_parts(component: Any) -> list[Any]:
    """The byte-level parts of a backend pre-tokenizer or post-processor, also inside a Sequence."""
    from tokenizers import pre_tokenizers, processors

    leaves = (pre_tokenizers.ByteLevel, processors.ByteLevel, processors.RobertaProcessing)
    if isinstance(component, leaves):
        return [component]
    parts: list[Any] = []
    if isinstance(component, pre_tokenizers.Sequence | processors.Sequence):
        index = 0
        while True:
            try:
                member = component[index]
            except IndexError:
                return parts
            parts += _byte_level_parts(member)
            index += 1
    return parts


def with_prefix_space(tokenizer: Any) -> Any:
    """A byte-level BPE tokenizer (RoBERTa, ModernBERT, GPT-2 style, whatever its model type)
    marks a word start by a leading space; words passed one by one (tagging) only get it with
    `add_prefix_space`, else every word is tokenized as if it continued the previous one. Decided
    from the tokenizer's own backend pre-tokenizer, never from the model type; its byte-level
    post-processor is told too, so that offsets (QA) are not trimmed by the added space."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None or not _byte_level_parts(backend.pre_tokenizer):
        return tokenizer
    for part in _byte_level_parts(backend.pre_tokenizer) + _byte_level_parts(backend.post_processor):
        part.add_prefix_space = True  # live members of the backend: this changes the tokenizer
    tokenizer.add_prefix_space = True  # transformers checks it for is_split_into_words
    return tokenizer


# Checkpoint -> the weights it lacks, from its first load in this process (which shows its load
# report); its weights themselves are not kept (`load_encoder`).
_PRETRAINED: dict[str, tuple[str, ...]] = {}


class _HeldRecords(logging.Filter):
    def __init__(self) -> None:
        super().__init__()
        self.records: list[logging.LogRecord] = []

    def filter(self, record: logging.LogRecord) -> bool:
        self.records.append(record)
        return False


@contextlib.contextmanager
def _held_load_report() -> Iterator[_HeldRecords]:
    """Holds back what transformers logs while loading (its load report), for the caller to
    re-emit or drop once it has read the loading info."""
    logger = logging.getLogger("transformers.modeling_utils")
    held = _HeldRecords()
    logger.addFilter(held)
    try:
        yield held
    finally:
        logger.removeFilter(held)


def load_encoder(name: str) -> PreTrainedModel:
    """A fresh copy of the pretrained encoder, read from disk at every call: a worker holds no
    copy of the pretrained weights between its trials (a deep copy of a kept one cost MiniLM's
    87 MB for the worker's life; benchmarks/RESULTS.md). A hub checkpoint is fetched once.

    The names of the weights the checkpoint did not hold (transformers' own `missing_keys`: a
    masked-LM checkpoint, as `run_mlm.py` saves after domain-adaptive pretraining, has no pooler)
    are kept with it, `checkpoint_missing`: transformers draws them at load, from a fork of torch's
    RNG (the caller's stream is left as it was); every trial re-draws them under its init seed
    (`draw_missing`)."""
    target = resolve(name)
    first = target not in _PRETRAINED
    with torch.random.fork_rng(devices=[]), _held_load_report() as held:
        model, info = _from_pretrained(
            AutoModel, target, name, local=not first, dtype=torch.float32, output_loading_info=True
        )
    missing = tuple(sorted(info["missing_keys"]))
    if first:  # its load report once per process
        # A checkpoint that lacks only its pooler loads without transformers' load report: its
        # trials draw the pooler and record it. Anything else keeps the report (a wrong
        # checkpoint misses far more).
        quiet = bool(missing) and all(k.startswith("pooler.") for k in missing)
        for record in held.records:
            if not (quiet and "LOAD REPORT" in record.getMessage()):
                logging.getLogger(record.name).handle(record)
        _PRETRAINED[target] = missing
    model.checkpoint_missing = missing
    # from_pretrained returns eval mode; training needs dropout on.
    return model.train()


def missing_weights(encoder: PreTrainedModel) -> list[str]:
    """The encoder's tensors (state-dict names) that its checkpoint did not hold and that it still
    has (a head that does not read the pooler drops it); empty for an encoder not built by
    `load_encoder` or for a checkpoint with all its weights."""
    missing = getattr(encoder, "checkpoint_missing", ())
    if not missing:
        return []
    present = encoder.state_dict().keys()
    return [k for k in missing if k in present]


def draw_missing(encoder: PreTrainedModel) -> list[str]:
    """Re-draws the weights the checkpoint did not hold with the model's own initialiser, from
    torch's RNG as it stands (the trial's init seed), as transformers' loading draws them: every
    loaded tensor is flagged as initialised, and `_init_weights` runs bottom-up over the modules
    that hold a missing tensor and their ancestors. Returns their names; draws nothing (and
    consumes no random numbers) when there are none."""
    names = missing_weights(encoder)
    if not names:
        return []
    drawn = set(names)
    path = {""} | {".".join(k.split(".")[:i]) for k in names for i in range(1, k.count(".") + 1)}
    tensors = dict(encoder.named_parameters()) | dict(encoder.named_buffers())
    flags = {key: tensor.__dict__.get("_is_hf_initialized") for key, tensor in tensors.items()}
    for key, tensor in tensors.items():
        tensor._is_hf_initialized = key not in drawn  # the guarded initialisers skip loaded ones

    def visit(module: torch.nn.Module, prefix: str) -> None:
        for child_name, child in module.named_children():
            if (child_path := prefix + child_name) in path:
                visit(child, child_path + ".")
        encoder._init_weights(module)

    try:
        with torch.no_grad(), hf_init.guard_torch_init_functions():
            visit(encoder, "")
    finally:
        for key, tensor in tensors.items():
            if flags[key] is None:
                del tensor._is_hf_initialized
            else:
                tensor._is_hf_initialized = flags[key]
    return names


def drop_pooler(encoder: PreTrainedModel) -> None:
    """Removes the checkpoint's pooler (dense + tanh over the first token) from an encoder whose
    head does not read it: it is then neither computed nor handed to the optimizer."""
    if getattr(encoder, "pooler", None) is not None:
        encoder.pooler = None


def model_identity(name: str) -> dict[str, str | None]:
    """What decides the weights a study trains from: a hub model's resolved commit, or the
    content hash of a local folder's config, weights and tokenizer files."""
    target = resolve(name)
    if Path(target).is_dir():
        patterns = ("*.json", "*.safetensors", "*.bin", "*.txt", "*.model")
        return {"name": name, "sha256": folder_sha256(target, patterns)}
    return {"name": name, "hub_id": target, "revision": model_revision(name)}


def model_revision(name: str) -> str | None:
    """The commit a hub model was loaded at (provenance); None for local folders."""
    target = resolve(name)
    if Path(target).is_dir():
        return None
    config = _from_pretrained(AutoConfig, target, name)
    return getattr(config, "_commit_hash", None)


def encoder_inputs(encoder: PreTrainedModel, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The batch keys this encoder takes: DistilBERT/ModernBERT have no token types, and a
    model with one token type (RoBERTa) must not see the tokenizer's segment ids."""
    accepted = set(inspect.signature(encoder.forward).parameters)
    if getattr(encoder.config, "type_vocab_size", 0) <= 1:
        accepted.discard("token_type_ids")
    return {k: v for k, v in batch.items() if k in accepted}
