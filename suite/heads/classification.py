"""[CLS] head: a linear layer on the first token's state, for classes or a regression score."""

from __future__ import annotations

import numpy as np
import torch
from torch import nn
from transformers import PreTrainedModel

from suite.heads.base import EncoderModule
from suite.metrics import classification_scores
from suite.sweep import HParams


class ClassificationModule(EncoderModule):
    def __init__(
        self,
        encoder: PreTrainedModel,
        hparams: HParams,
        num_labels: int,
        metric_names: list[str],
        regression: bool = False,
    ) -> None:
        super().__init__(encoder, hparams)
        self.regression = regression
        self.num_labels = num_labels
        self.metric_names = metric_names
        self.dropout = nn.Dropout(self.head_dropout)
        self.classifier = nn.Linear(self.hidden_size, 1 if regression else num_labels)
        # BERT's initializer (normal, std 0.02); drawn from the RNG seeded with init_seed.
        nn.init.normal_(self.classifier.weight, std=0.02)
        nn.init.zeros_(self.classifier.bias)
        self._predictions: list[torch.Tensor] = []
        self._labels: list[torch.Tensor] = []
        self._examples: list[torch.Tensor] = []

    def forward(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        first_token = self.encode(batch)[:, 0]
        logits = self.classifier(self.dropout(first_token))
        return logits.squeeze(-1) if self.regression else logits

    def loss(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        logits = self(batch)
        if self.regression:
            return nn.functional.mse_loss(logits, batch["labels"].float())
        return nn.functional.cross_entropy(logits, batch["labels"])

    def validation_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> None:
        logits = self(batch)
        self._predictions.append(logits if self.regression else logits.argmax(-1))
        self._labels.append(batch["labels"])
        self._examples.append(batch["example"])

    def epoch_metrics(self) -> dict[str, float]:
        # Batches come length-sorted: put predictions back in dev order (the `example` index).
        order = torch.cat(self._examples).argsort()
        predictions = torch.cat(self._predictions)[order].float().cpu().numpy()
        labels = torch.cat(self._labels)[order].cpu().numpy()
        self._predictions, self._labels, self._examples = [], [], []
        if self.regression:
            self.per_example = {"prediction": np.round(predictions, 4).tolist(), "label": labels.tolist()}
        else:
            predictions = predictions.astype(np.int64)
            self.per_example = {
                "prediction": predictions.tolist(),
                "label": labels.tolist(),
                "correct": (predictions == labels).astype(int).tolist(),
            }
        return classification_scores(self.metric_names, labels, predictions, self.num_labels)
