"""Token-tagging head: a linear layer per token, or a linear layer + CRF with Viterbi decoding.

Both score each word by its first sub-token. The linear head's loss runs over every labelled
sub-token (the first only, or all with `label_all_subtokens`); the CRF runs over the sequence
of first sub-tokens, where tag transitions are meaningful.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn
from torchcrf import CRF
from transformers import PreTrainedModel

from suite.data.tagging import IGNORE
from suite.heads.base import EncoderModule
from suite.sweep import HParams

Scorer = Callable[[list[tuple[int, int, list[int]]]], dict[str, float]]


class TaggingModule(EncoderModule):
    def __init__(
        self, encoder: PreTrainedModel, hparams: HParams, num_tags: int, scorer: Scorer, crf: bool = False
    ) -> None:
        super().__init__(encoder, hparams)
        self.dropout = nn.Dropout(self.head_dropout)
        self.classifier = nn.Linear(self.hidden_size, num_tags)
        nn.init.normal_(self.classifier.weight, std=0.02)
        nn.init.zeros_(self.classifier.bias)
        self.crf = CRF(num_tags, batch_first=True) if crf else None
        self.scorer = scorer
        self._windows: list[tuple[int, int, list[int]]] = []

    def forward(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """Emission scores per sub-token, [batch, seq, tags]."""
        return self.classifier(self.dropout(self.encode(batch)))

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

    def loss(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        emissions = self(batch)
        if self.crf is None:
            return nn.functional.cross_entropy(
                emissions.flatten(0, 1), batch["labels"].flatten(), ignore_index=IGNORE
            )
        words, mask = self._word_view(emissions, batch)
        gold = batch["labels"].gather(1, batch["word_starts"].clamp(min=0)).clamp(min=0)
        return -self.crf(words, gold, mask=mask, reduction="mean")

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

    def epoch_metrics(self) -> dict[str, float]:
        windows, self._windows = self._windows, []
        return self.scorer(windows)
