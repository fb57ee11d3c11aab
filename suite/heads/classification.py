"""Sequence head for classes or a regression score, over the first token ([CLS] / <s>).

`classifier` (task YAML) chooses the head, recorded with every trial:
- `auto` (default): the family's reference fine-tuning head, the one
  `AutoModelForSequenceClassification` builds (BERT and ALBERT: pretrained pooler, dense + tanh,
  then dropout + linear; RoBERTa and ELECTRA: dropout, dense, activation, dropout, linear;
  DistilBERT: dense + ReLU; DeBERTa: context pooler; ModernBERT: its prediction head). Every
  number in the `reported:` blocks was made with these heads;
- `pooler`: the checkpoint's pretrained pooler (dense + tanh), then dropout + linear, as BERT
  and the variance papers; refused for a checkpoint without a pretrained pooler, or without its
  weights (a masked-LM checkpoint: `auto` then draws that pooler under the init seed);
- `cls`: dropout + linear on the raw last-layer [CLS] state (a different model: kept for
  comparison);
- `mean`: dropout + linear on the mean of the last-layer states over the attention mask: the
  pooling a sentence-embedding checkpoint (the bundled all-MiniLM-L6-v2) was trained with, whose
  pooler was never trained.
"""

from __future__ import annotations

import copy
from typing import Any, Literal

import numpy as np
import torch
from torch import nn
from transformers import AutoModelForSequenceClassification, PreTrainedModel
from transformers import initialization as hf_init

from suite.config.sweep import HParams
from suite.errors import ModelError, SpecError
from suite.heads.base import EncoderModule, Fp32Linear, fp32_output
from suite.model.encoders import drop_pooler, encoder_inputs
from suite.model.metrics import classification_scores
from suite.model.stabilisers import pooler_refusal

Classifier = Literal["auto", "pooler", "cls", "mean"]


def reference_model(encoder: PreTrainedModel, num_outputs: int) -> PreTrainedModel:
    """The family's AutoModelForSequenceClassification around this (pretrained) encoder. Only its
    head is built: the model is laid out on the meta device (no memory, no random draws), the
    pretrained encoder put in its place, and the head's modules materialised and initialised by
    the family's own `_init_weights`, bottom-up as transformers initialises a model, from torch's
    RNG as it stands (the init seed): the head's weights are drawn and nothing else."""
    config = copy.deepcopy(encoder.config)
    config.num_labels = num_outputs
    with torch.device("meta"):
        model = AutoModelForSequenceClassification.from_config(config)
    prefix = model.base_model_prefix
    if getattr(getattr(model, prefix), "pooler", None) is None:
        drop_pooler(encoder)  # the family's head reads the last hidden states (RoBERTa, ELECTRA)
    setattr(model, prefix, encoder)  # the pretrained encoder (and pooler)
    device = next(encoder.parameters()).device
    head = [child for name, child in model.named_children() if name != prefix]
    for child in head:
        child.to_empty(device=device)
    if any(t.is_meta for t in (*model.parameters(), *model.buffers())):  # not a head of child modules
        raise ModelError(f"{type(model).__name__}: its head is not a set of modules beside the encoder")
    with torch.no_grad(), hf_init.guard_torch_init_functions():
        for child in head:
            child.apply(model._init_weights)  # bottom-up, as `initialize_weights` walks a model
        model._init_weights(model)  # the model's own step (ModernBERT re-draws its classifier)
    return model


def output_layer(model: PreTrainedModel) -> nn.Linear:
    """The reference head's last linear layer, the one that gives the logits (`classifier`, or
    its `out_proj`): every family registers it after the head's other layers."""
    prefix = model.base_model_prefix
    return [
        m for name, m in model.named_modules() if isinstance(m, nn.Linear) and not name.startswith(prefix)
    ][-1]


def mean_pool(hidden: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """The mean of the states where the mask is 1 (padding never counts)."""
    weights = mask.unsqueeze(-1).to(hidden.dtype)
    return (hidden * weights).sum(1) / weights.sum(1).clamp(min=1.0)


class ClassificationModule(EncoderModule):
    def __init__(
        self,
        encoder: PreTrainedModel,
        hparams: HParams,
        num_labels: int,
        metric_names: list[str],
        regression: bool = False,
        classifier: Classifier = "auto",
    ) -> None:
        super().__init__(encoder, hparams)
        self.regression = regression
        self.num_labels = num_labels
        self.metric_names = metric_names
        self.classifier_kind = classifier
        outputs = 1 if regression else num_labels
        if classifier == "auto":
            self.reference = reference_model(encoder, outputs)
            fp32_output(output_layer(self.reference))
            self.head_name = f"auto: {type(self.reference).__name__}"
        else:
            if why := pooler_refusal(encoder, classifier):
                raise SpecError(f"field 'classifier': {why}")
            if classifier in ("cls", "mean"):
                drop_pooler(encoder)
            self.dropout = nn.Dropout(self.head_dropout)
            self.classifier = self._new_head(classifier, outputs)
            self.head_name = classifier + (
                " on the last 4 layers, MLP" if hparams.features == "last4" else ""
            )
        self._predictions: list[torch.Tensor] = []
        self._labels: list[torch.Tensor] = []
        self._examples: list[torch.Tensor] = []

    def _new_head(self, classifier: str, outputs: int) -> nn.Module:
        """A linear layer, or (`features: last4`, feature-based) a small MLP over the four
        concatenated layers. BERT's initializer (normal, std 0.02), drawn under the init seed."""
        if self.train_hparams.features != "last4":
            linear = Fp32Linear(self.hidden_size, outputs)
            nn.init.normal_(linear.weight, std=0.02)
            nn.init.zeros_(linear.bias)
            return linear
        if classifier not in ("cls", "mean"):
            raise SpecError(f"field 'features': last4 needs classifier cls or mean, not {classifier}")
        head = nn.Sequential(
            nn.Linear(self.feature_size, self.hidden_size),
            nn.Tanh(),
            nn.Dropout(self.head_dropout),
            Fp32Linear(self.hidden_size, outputs),
        )
        for layer in (head[0], head[3]):
            nn.init.normal_(layer.weight, std=0.02)
            nn.init.zeros_(layer.bias)
        return head

    def forward(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        if self.classifier_kind == "auto":
            logits = self.reference(**encoder_inputs(self.encoder, batch)).logits
        elif self.classifier_kind == "pooler":
            outputs = self.encoder(**encoder_inputs(self.encoder, batch))
            logits = self.classifier(self.dropout(outputs.pooler_output))
        elif self.classifier_kind == "mean":
            logits = self.classifier(self.dropout(mean_pool(self.encode(batch), batch["attention_mask"])))
        else:
            logits = self.classifier(self.dropout(self.encode(batch)[:, 0]))
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

    def epoch_outputs(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(positions, predictions, labels) of the examples evaluated, in dev order."""
        # Batches come length-sorted: put predictions back in dev order (the `example` index).
        examples = torch.cat(self._examples)
        order = examples.argsort()
        predictions = torch.cat(self._predictions)[order].float().cpu().numpy()
        labels = torch.cat(self._labels)[order].cpu().numpy()
        self._predictions, self._labels, self._examples = [], [], []
        return examples[order].cpu().numpy(), predictions, labels

    def score(self, outputs: Any, positions: np.ndarray | None) -> tuple[dict[str, float], dict[str, list]]:
        examples, predictions, labels = outputs
        if positions is not None:
            keep = np.isin(examples, positions)
            predictions, labels = predictions[keep], labels[keep]
        if self.regression:
            per_example = {"prediction": np.round(predictions, 4).tolist(), "label": labels.tolist()}
        else:
            predictions = predictions.astype(np.int64)
            per_example = {
                "prediction": predictions.tolist(),
                "label": labels.tolist(),
                "correct": (predictions == labels).astype(int).tolist(),
            }
        return classification_scores(self.metric_names, labels, predictions, self.num_labels), per_example
