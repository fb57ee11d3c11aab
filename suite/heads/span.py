"""Span-extraction head: start and end logits per token, and SQuAD-style post-processing.

Post-processing follows Hugging Face's run_qa: for every window of an example, the n-best
start and end positions; spans inside the context, end >= start, at most max_answer_length
tokens; the best start+end score over all windows; the answer text cut from the original
context by character offsets.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from torch import nn
from transformers import PreTrainedModel

from suite.config.sweep import HParams
from suite.heads.base import EncoderModule, Fp32Linear
from suite.model.encoders import drop_pooler

# (start and end logits by window number, positions in the evaluation set scored or None: all)
Logits = dict[int, np.ndarray]
Scorer = Callable[[Logits, Logits, Any], tuple[dict[str, float], dict[str, list]]]


class SpanModule(EncoderModule):
    def __init__(self, encoder: PreTrainedModel, hparams: HParams, scorer: Scorer) -> None:
        super().__init__(encoder, hparams)
        drop_pooler(encoder)  # this head reads the per-token states only
        self.qa_outputs = Fp32Linear(self.hidden_size, 2)
        nn.init.normal_(self.qa_outputs.weight, std=0.02)
        nn.init.zeros_(self.qa_outputs.bias)
        self.scorer = scorer
        self._start: dict[int, np.ndarray] = {}
        self._end: dict[int, np.ndarray] = {}

    def forward(self, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        logits = self.qa_outputs(self.encode(batch))
        mask = batch["attention_mask"] == 0
        start, end = (x.squeeze(-1).masked_fill(mask, -1e4) for x in logits.split(1, dim=-1))
        return start, end

    def loss(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        start, end = self(batch)
        ce = nn.functional.cross_entropy
        return (ce(start, batch["start_positions"]) + ce(end, batch["end_positions"])) / 2

    def validation_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> None:
        start, end = self(batch)
        lengths = batch["attention_mask"].sum(-1).tolist()
        for row, window in enumerate(batch["window"].tolist()):
            self._start[window] = start[row, : lengths[row]].float().cpu().numpy()
            self._end[window] = end[row, : lengths[row]].float().cpu().numpy()

    def epoch_outputs(self) -> tuple[Logits, Logits]:
        start, end, self._start, self._end = self._start, self._end, {}, {}
        return start, end

    def score(self, outputs: Any, positions: Any) -> tuple[dict[str, float], dict[str, list]]:
        return self.scorer(*outputs, positions)


def best_answers(
    windows: list[dict[str, Any]],
    contexts: list[str],
    start_logits: dict[int, np.ndarray],
    end_logits: dict[int, np.ndarray],
    n_best: int = 20,
    max_answer_length: int = 30,
) -> list[str]:
    """The best-scoring answer text per example over all of its windows ('' if none is valid)."""
    best: list[tuple[float, str]] = [(-np.inf, "")] * len(contexts)
    for w, window in enumerate(windows):
        offsets, example = window["offsets"], window["example"]
        starts, ends = start_logits[w], end_logits[w]
        for s in np.argsort(starts)[::-1][:n_best]:
            for e in np.argsort(ends)[::-1][:n_best]:
                if s >= len(offsets) or e >= len(offsets) or offsets[s] is None or offsets[e] is None:
                    continue
                if e < s or e - s + 1 > max_answer_length:
                    continue
                score = float(starts[s] + ends[e])
                if score > best[example][0]:
                    best[example] = (score, contexts[example][offsets[s][0] : offsets[e][1]])
    return [text for _, text in best]


def collate_span(tokenizer: Any) -> Callable[[list[dict[str, Any]]], dict[str, torch.Tensor]]:
    """Dynamic padding, on the right whatever side the tokenizer pads (answer positions count from
    the left); keeps the answer positions (train) or the window index (eval)."""

    def collate(batch: list[dict[str, Any]]) -> dict[str, torch.Tensor]:
        keep = ("input_ids", "attention_mask", "token_type_ids")
        rows = [{k: f[k] for k in keep if k in f} for f in batch]
        padded = tokenizer.pad(rows, padding_side="right", return_tensors="pt")
        for name in ("start_positions", "end_positions", "window"):
            if name in batch[0]:
                padded[name] = torch.tensor([f[name] for f in batch])
        return padded

    return collate
