"""Token-tagging head: a linear layer per token, or a linear layer + CRF with Viterbi decoding.

Both score each word by its first sub-token. The linear head's loss runs over every labelled
sub-token (the first only, or all with `label_all_subtokens`); the CRF runs over the sequence
of first sub-tokens, where tag transitions are meaningful.

So that `ner` vs `ner-crf` compares heads and nothing else, the CRF's loss is normalised like
the linear head's (mean negative log-likelihood per word, not per sentence, which would scale
the gradient, the clipping and the effective learning rate by sentence length); its
transitions, which start near zero, train in their own learning-rate group; and IOB2's
impossible transitions (O -> I-X, B-X -> I-Y, start -> I-X) are fixed at -10000, so neither
training nor Viterbi decoding can use them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import nn
from torchcrf import CRF
from transformers import PreTrainedModel

from suite.config.sweep import HParams
from suite.data.tagging import IGNORE
from suite.errors import SpecError
from suite.heads.base import EncoderModule, Fp32Linear
from suite.model.encoders import drop_pooler

# (windows' predictions, positions in the evaluation set scored or None: all) -> (metrics, per sentence)
Scorer = Callable[[list[tuple[int, int, list[int]]], Any], tuple[dict[str, float], dict[str, list]]]

CRF_LR_MULT = 100.0  # transitions start at U(-0.1, 0.1): at the encoder's 2e-5 they would barely move
FORBIDDEN = -10000.0


def iob2_allowed(tags: list[str]) -> tuple[torch.Tensor, torch.Tensor]:
    """(allowed[i, j]: tag i may precede tag j, allowed_start[j]) under IOB2: I-X only after
    B-X or I-X, never first."""
    n = len(tags)
    allowed = torch.ones(n, n, dtype=torch.bool)
    start = torch.ones(n, dtype=torch.bool)
    for j, tag in enumerate(tags):
        if tag.startswith("I-"):
            start[j] = False
            for i, previous in enumerate(tags):
                allowed[i, j] = previous in (f"B-{tag[2:]}", tag)
    return allowed, start


class ConstrainedCRF(CRF):
    """pytorch-crf's CRF whose forbidden transitions are constants, as AllenNLP's constrained
    CRF: the free parameters are kept apart and `transitions`/`start_transitions` read masked."""

    def __init__(self, tags: list[str]) -> None:
        super().__init__(len(tags), batch_first=True)
        allowed, start = iob2_allowed(tags)
        self.free_transitions = self._parameters.pop("transitions")
        self.free_start_transitions = self._parameters.pop("start_transitions")
        self.register_buffer("forbidden", ~allowed, persistent=False)
        self.register_buffer("forbidden_start", ~start, persistent=False)

    @property
    def transitions(self) -> torch.Tensor:  # type: ignore[override]
        return self.free_transitions.masked_fill(self.forbidden, FORBIDDEN)

    @property
    def start_transitions(self) -> torch.Tensor:  # type: ignore[override]
        return self.free_start_transitions.masked_fill(self.forbidden_start, FORBIDDEN)

    def decode(self, emissions: torch.Tensor, mask: torch.Tensor | None = None) -> list[list[int]]:
        """pytorch-crf's Viterbi decoding, run on a CPU copy: its backtrace reads one `.item()`
        per word, a host sync each on a GPU (~50k per CoNLL dev pass); here one copy of the
        emissions, mask and transitions per batch."""
        with torch.no_grad():
            emissions = emissions.detach().float().cpu()
            mask = emissions.new_ones(emissions.shape[:2], dtype=torch.uint8) if mask is None else mask.cpu()
            self._validate(emissions, mask=mask)
            scores = (self.start_transitions, self.transitions, self.end_transitions)
            return viterbi(emissions, mask.bool(), *(t.detach().float().cpu() for t in scores))


def viterbi(
    emissions: torch.Tensor,
    mask: torch.Tensor,
    start: torch.Tensor,
    transitions: torch.Tensor,
    end: torch.Tensor,
) -> list[list[int]]:
    """The best tag path per sequence of `emissions` [batch, words, tags] under `mask` (its first
    word on): pytorch-crf's `_viterbi_decode` step for step (the same scores, the same first
    index among ties), with its backtrace on plain integers."""
    score = start + emissions[:, 0]
    history = []
    for i in range(1, emissions.shape[1]):
        best, indices = (score.unsqueeze(2) + transitions + emissions[:, i].unsqueeze(1)).max(dim=1)
        score = torch.where(mask[:, i].unsqueeze(1), best, score)
        history.append(indices)
    last = (score + end).max(dim=1).indices.tolist()
    back = torch.stack(history, 1).tolist() if history else []
    paths = []
    for row, length in enumerate(mask.long().sum(1).tolist()):
        path = [last[row]]
        for step in reversed(back[row][: length - 1] if back else []):
            path.append(step[path[-1]])
        paths.append(path[::-1])
    return paths


class TaggingModule(EncoderModule):
    def __init__(
        self, encoder: PreTrainedModel, hparams: HParams, tags: list[str], scorer: Scorer, crf: bool = False
    ) -> None:
        super().__init__(encoder, hparams)
        drop_pooler(encoder)  # this head reads the per-token states only
        self.dropout = nn.Dropout(self.head_dropout)
        self.lstm = None
        width = self.hidden_size
        if hparams.features == "last4":  # feature-based NER (Devlin et al. 2019 s5.3)
            self.lstm = nn.LSTM(self.feature_size, width, num_layers=2, bidirectional=True, batch_first=True)
            width = 2 * width
        self.classifier = Fp32Linear(width, len(tags))
        nn.init.normal_(self.classifier.weight, std=0.02)
        nn.init.zeros_(self.classifier.bias)
        self.crf = ConstrainedCRF(tags) if crf else None
        self.scorer = scorer
        self._windows: list[tuple[int, int, list[int]]] = []

    def lr_multipliers(self) -> dict[str, float]:
        return {"crf.": CRF_LR_MULT} if self.crf is not None else {}

    def forward(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """Emission scores per sub-token, [batch, seq, tags]."""
        states = self.encode(batch)
        if self.lstm is not None:
            states = self._bilstm(states, batch["attention_mask"])
        return self.classifier(self.dropout(states))

    def _bilstm(self, states: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """The BiLSTM over each sequence's real tokens only (packed), so padding never enters
        the backward direction and a padded batch scores as its sequences alone would."""
        if bool((mask[:, 0] == 0).any()):
            raise SpecError("field 'features': the BiLSTM head needs right-padded batches")
        lengths = mask.sum(1).cpu()
        packed = nn.utils.rnn.pack_padded_sequence(states, lengths, batch_first=True, enforce_sorted=False)
        out, _ = self.lstm(packed)
        return nn.utils.rnn.pad_packed_sequence(out, batch_first=True, total_length=states.shape[1])[0]

    @staticmethod
    def _word_view(
        emissions: torch.Tensor, batch: dict[str, torch.Tensor]
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Emissions at each word's first sub-token, [batch, words, tags], and the word mask
        (a dropped word, start -1, stays in the mask so it is contiguous, as the CRF needs)."""
        starts = batch["word_starts"]
        mask = starts >= -1
        index = starts.clamp(min=0).unsqueeze(-1).expand(-1, -1, emissions.shape[-1])
        return emissions.gather(1, index), mask

    def loss_weight(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """Scored positions: labelled sub-tokens (linear head) or words (CRF, `token_mean`)."""
        if self.crf is None:
            return (batch["labels"] != IGNORE).sum().float()
        return (batch["word_starts"] >= -1).sum().float()

    def loss(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        emissions = self(batch)
        if self.crf is None:
            return nn.functional.cross_entropy(
                emissions.flatten(0, 1), batch["labels"].flatten(), ignore_index=IGNORE
            )
        words, mask = self._word_view(emissions, batch)
        gold = batch["labels"].gather(1, batch["word_starts"].clamp(min=0)).clamp(min=0)
        return -self.crf(words, gold, mask=mask, reduction="token_mean")  # per word, like the linear head

    def decode(self, batch: dict[str, torch.Tensor]) -> list[list[int]]:
        """Predicted tag index per word of each window (O for a word with no sub-token)."""
        words, mask = self._word_view(self(batch), batch)
        dropped = (batch["word_starts"] == -1).tolist()
        n_words = mask.sum(-1).tolist()
        paths = words.argmax(-1).tolist() if self.crf is None else self.crf.decode(words, mask=mask)
        return [
            [0 if dropped[row][i] else tag for i, tag in enumerate(paths[row][:n])]
            for row, n in enumerate(n_words)
        ]

    def validation_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> None:
        for sentence, first, tags in zip(
            batch["sentence"].tolist(), batch["first_word"].tolist(), self.decode(batch), strict=True
        ):
            self._windows.append((sentence, first, tags))

    def epoch_outputs(self) -> list[tuple[int, int, list[int]]]:
        windows, self._windows = self._windows, []
        return windows

    def score(self, outputs: Any, positions: Any) -> tuple[dict[str, float], dict[str, list]]:
        return self.scorer(outputs, positions)
