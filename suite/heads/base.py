"""What every head shares: the encoder, the optimizer and schedule, and the trial record
(loss curve, token counts, per-epoch dev metrics)."""

from __future__ import annotations

import math
from typing import Any

import lightning as L
import torch
from transformers import PreTrainedModel, get_linear_schedule_with_warmup

from suite.config.sweep import HParams
from suite.data.pieces import split_batch
from suite.errors import TrialDiverged
from suite.faults import reach
from suite.model.encoders import encoder_inputs
from suite.model.optim import make_optimizer
from suite.model.stabilisers import lr_multipliers


class EncoderModule(L.LightningModule):
    """Subclasses build their head in `__init__` and implement `loss`, `validation_step`
    and `epoch_metrics`."""

    def __init__(self, encoder: PreTrainedModel, hparams: HParams) -> None:
        super().__init__()
        self.encoder = encoder
        self.train_hparams = hparams
        self.loss_curve: list[float] = []
        self.history: list[dict[str, Any]] = []
        self.tokens = {"real": 0, "padded": 0}
        # The latest evaluation's outcome per dev example (set by `epoch_metrics`): for the
        # dev-set sampling error of a run and the agreement of runs across seeds.
        self.per_example: dict[str, list] | None = None
        # The encoder weights its checkpoint did not hold, drawn under the init seed when the
        # module was built (`PreparedTask.build_module`): recorded with the trial.
        self.drawn_weights: list[str] = []

    @property
    def hidden_size(self) -> int:
        return self.encoder.config.hidden_size

    @property
    def head_dropout(self) -> float:
        config = self.encoder.config
        for name in ("classifier_dropout", "hidden_dropout_prob", "dropout", "embedding_dropout"):
            if isinstance(getattr(config, name, None), float):
                return getattr(config, name)
        return 0.1

    @property
    def feature_size(self) -> int:
        return self.hidden_size * (4 if self.train_hparams.features == "last4" else 1)

    def encode(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """The head's input per token, [batch, seq, feature_size]: the last hidden states, or the
        last four layers' concatenated (`features: last4`)."""
        inputs = encoder_inputs(self.encoder, batch)
        if self.train_hparams.features == "last4":
            return torch.cat(self.encoder(**inputs, output_hidden_states=True).hidden_states[-4:], -1)
        return self.encoder(**inputs).last_hidden_state

    def loss(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        raise NotImplementedError

    def epoch_metrics(self) -> dict[str, float]:
        raise NotImplementedError

    def loss_weight(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """What `loss` averages over (here: examples), so pieces of a batch recombine exactly."""
        return torch.tensor(float(batch["input_ids"].shape[0]))

    def batch_loss(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """The batch's loss; with `split_batches`, the sum of its length-sorted pieces' losses,
        each weighted by its share of the batch's denominator (`loss_weight`): the same loss and
        gradient as the whole padded batch, up to float rounding and the dropout draws."""
        # A batch with nothing to score keeps its own (non-finite) loss: that says what happened.
        if not self.train_hparams.split_batches or (total := self.loss_weight(batch)) == 0:
            self.count_tokens(batch)
            return self.loss(batch)
        loss = 0.0
        for piece in split_batch(batch):
            weight = self.loss_weight(piece)
            if weight > 0:  # a piece with nothing to score (every label ignored) adds nothing
                self.count_tokens(piece)
                loss = loss + self.loss(piece) * (weight / total)
        return loss

    def count_tokens(self, batch: dict[str, torch.Tensor]) -> None:
        """Real and computed (real + padded) training tokens of what ran forward."""
        self.tokens["real"] += int(batch["attention_mask"].sum())
        self.tokens["padded"] += batch["attention_mask"].numel()

    def training_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> torch.Tensor:
        reach("train_step")
        loss = self.batch_loss(batch)
        value = loss.item()
        if not math.isfinite(value):
            raise TrialDiverged(f"non-finite training loss ({value}) at step {self.global_step}")
        self.loss_curve.append(round(value, 5))
        return loss

    def on_validation_epoch_end(self) -> None:
        if self.trainer.sanity_checking:
            return
        metrics = self.epoch_metrics()
        reach("evaluation")
        self.history.append({"epoch": self.current_epoch + 1, **metrics})

    def lr_multipliers(self) -> dict[str, float]:
        """Parameter-name prefix -> learning-rate multiplier, for parts of the head that train at
        their own rate relative to it (a CRF); the stabilisers add the encoder's and the head's."""
        return {}

    @property
    def uses_pooler(self) -> bool:
        """Whether the head reads the encoder's pretrained pooler (re-initialised with the top
        layers): heads that do not read it drop it when they are built (`drop_pooler`)."""
        return getattr(self.encoder, "pooler", None) is not None

    def train(self, mode: bool = True) -> EncoderModule:
        super().train(mode)
        # Feature-based use: a frozen encoder's features carry no dropout noise.
        if getattr(self, "train_hparams", None) and self.train_hparams.freeze == "encoder":
            self.encoder.eval()
        return self

    def make_optimizer(self) -> torch.optim.Optimizer:
        h = self.train_hparams
        return make_optimizer(self, h.lr, h.weight_decay, h.bias_correction, lr_multipliers(self, h))

    def configure_optimizers(self) -> dict[str, Any]:
        h = self.train_hparams
        optimizer = self.make_optimizer()
        total = int(self.trainer.estimated_stepping_batches)
        schedule = get_linear_schedule_with_warmup(optimizer, round(h.warmup_ratio * total), total)
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": schedule, "interval": "step"}}
