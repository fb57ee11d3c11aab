"""What every head shares: the encoder, the optimizer and schedule, and the trial record
(loss curve, token counts, per-epoch dev metrics)."""

from __future__ import annotations

import math
from typing import Any

import lightning as L
import numpy as np
import torch
from torch import nn
from transformers import PreTrainedModel, get_linear_schedule_with_warmup

from suite.config.sweep import HParams
from suite.data.pieces import PIECE_COST_TOKENS, split_batch
from suite.errors import TrialDiverged
from suite.faults import reach
from suite.model.embedding_grad import keep_embedding_grad
from suite.model.encoders import encoder_inputs
from suite.model.optim import make_optimizer, optimizer_over, parameter_groups
from suite.model.stabilisers import lr_multipliers

PIECES = "pieces"  # marks a training batch prepared on the CPU (`step_work`)
# On a GPU, the loss is read back every this many steps (and before each evaluation, at each
# epoch's end): each read waits for the device's queue to drain. On the CPU, every step.
LOSS_SYNC_STEPS = 32


class Fp32Linear(nn.Linear):
    """A head's output layer, computed in fp32 even under bf16 autocast: bf16 logits keep 8 bits
    of mantissa, so span logits tie in the n-best and STS-B predictions round to ~0.02 (ties in
    Spearman). Input and weights are cast to at least fp32 (no-ops in fp32 training: the same
    numbers there; `bf16-true` weights compute in fp32, `64-true` ones stay fp64)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        dtype = torch.promote_types(self.weight.dtype, torch.float32)
        bias = None if self.bias is None else self.bias.to(dtype)
        with torch.autocast(x.device.type, enabled=False):
            return nn.functional.linear(x.to(dtype), self.weight.to(dtype), bias)


def fp32_output(layer: nn.Linear) -> Fp32Linear:
    """`layer` (a head's last linear layer, as a library built it) computing in fp32: the same
    module, parameters and names; only its forward changes."""
    if type(layer) is not nn.Linear:
        raise TypeError(f"expected a torch.nn.Linear output layer, got {type(layer).__name__}")
    layer.__class__ = Fp32Linear
    return layer


class EncoderModule(L.LightningModule):
    """Subclasses build their head in `__init__` and implement `loss`, `validation_step`
    and `epoch_metrics`."""

    loss_sync_steps: int | None = None  # read the losses back every N steps; None: by device

    def __init__(self, encoder: PreTrainedModel, hparams: HParams) -> None:
        super().__init__()
        keep_embedding_grad(encoder)  # its gradient without a fresh vocabulary-sized block per call
        self.encoder = encoder
        self.train_hparams = hparams
        self.loss_curve: list[float] = []
        self.history: list[dict[str, Any]] = []
        self.tokens = {"real": 0, "padded": 0}
        # `split_batches`' piece cost on the device it trains on (`pieces.piece_cost`; set by the trial).
        self.piece_cost: int | None = PIECE_COST_TOKENS
        # Training steps whose loss is not read back yet: (step, loss on the device, tokens).
        self._unread: list[tuple[int, torch.Tensor, tuple[int, int]]] = []
        # The latest evaluation's outcome per dev example (set by `epoch_metrics`): for the
        # dev-set sampling error of a run and the agreement of runs across seeds.
        self.per_example: dict[str, list] | None = None
        # The evaluation set's positions each epoch evaluates (the curve sample, set by the trial;
        # None: the whole set). With a sample, the last epoch is evaluated once, after training, on
        # the whole set (`after_training` set meanwhile): its score into `final`, the sample's share
        # of its predictions (`curve_point`) into the curve. With a whole-set curve the last
        # epoch's evaluation is the score.
        self.curve_positions: np.ndarray | None = None
        self.after_training = False
        self.final: dict[str, float] | None = None
        self.curve_point: dict[str, float] | None = None
        # The encoder weights its checkpoint did not hold, drawn under the init seed when the
        # module was built (`PreparedTask.build_module`): recorded with the trial.
        self.drawn_weights: list[str] = []
        # A fine-tuning method from the user's code and the hooks it has (`suite.model.methods.attach`).
        self.fine_tuning_method: Any = None
        self.method_hooks: frozenset[str] = frozenset()

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

    def epoch_outputs(self) -> Any:
        """The running evaluation's outputs (the head's gathered predictions), taken."""
        raise NotImplementedError

    def score(self, outputs: Any, positions: np.ndarray | None) -> tuple[dict[str, float], dict[str, list]]:
        """Metrics and outcomes per example of `outputs` over the evaluation set's `positions`
        (None: every position evaluated)."""
        raise NotImplementedError

    def epoch_metrics(self) -> dict[str, float]:
        """The running evaluation's metrics over the positions it covers (its outcomes per example
        into `per_example`); after training, also the curve's last point (`curve_point`): the
        curve sample's share of the same predictions."""
        outputs = self.epoch_outputs()
        if self.after_training and self.curve_positions is not None:
            self.curve_point = self.score(outputs, self.curve_positions)[0]
        metrics, self.per_example = self.score(outputs, self.eval_positions)
        return metrics

    def loss_weight(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """What `loss` averages over (here: examples), so pieces of a batch recombine exactly."""
        return torch.tensor(float(batch["input_ids"].shape[0]))

    def step_work(self, batch: dict[str, torch.Tensor]) -> dict[str, Any]:
        """What a training step computes, decided from the collated batch on the CPU (before it
        moves to the device, `on_before_batch_transfer`: on a GPU, reading lengths and weights
        back would stall its queue): the batch whole, or its length-sorted pieces (`split_batches`,
        at this device's `piece_cost`) with each piece's share of the batch's denominator
        (`loss_weight`); and the (real, computed) tokens that run forward."""
        pieces, shares = self._pieces(batch)
        real = sum(int(p["attention_mask"].sum()) for p in pieces)
        computed = sum(p["attention_mask"].numel() for p in pieces)
        return {PIECES: pieces, "shares": shares, "tokens": (real, computed)}

    def _pieces(self, batch: dict[str, torch.Tensor]) -> tuple[list[dict], list[float | None]]:
        # A batch with nothing to score keeps its own (non-finite) loss: that says what happened.
        if not self.train_hparams.split_batches or self.piece_cost is None:
            return [batch], [None]
        if (total := self.loss_weight(batch)) == 0:
            return [batch], [None]
        pieces, shares = [], []
        for piece in split_batch(batch, self.piece_cost):
            weight = self.loss_weight(piece)
            if weight > 0:  # a piece with nothing to score (every label ignored) adds nothing
                pieces.append(piece)
                shares.append(float(weight / total))  # a float: moves with no transfer
        return pieces, shares

    def work_loss(self, work: dict[str, Any]) -> torch.Tensor:
        """The step's loss: the whole batch's, or the sum of its pieces' losses, each weighted by
        its share: the same loss and gradient as the whole padded batch, up to float rounding and
        the dropout draws."""
        if work["shares"] == [None]:
            return self.step_loss(work[PIECES][0])
        loss = 0.0
        for piece, share in zip(work[PIECES], work["shares"], strict=True):
            loss = loss + self.step_loss(piece) * share
        return loss

    def step_loss(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """A training step's loss of `batch`: the head's, or what the fine-tuning method's `loss`
        hook makes of it (given the head's outputs of this forward pass and its loss in fp32)."""
        if "loss" not in self.method_hooks:
            return self.loss(batch)
        base, outputs = self.loss_with_outputs(batch)
        return self.fine_tuning_method.loss(batch, outputs, base.float(), self)

    def loss_with_outputs(self, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, Any]:
        """The head's loss of `batch` and the outputs of the forward pass it ran (logits; for the
        span head, start and end logits): one pass, for a method that needs both."""
        outputs: list[Any] = []
        kept = self.register_forward_hook(lambda module, args, output: outputs.append(output))
        try:
            loss = self.loss(batch)
        finally:
            kept.remove()
        return loss, outputs[0] if outputs else None

    def batch_loss(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """The batch's loss as a training step computes it, its tokens counted: for callers
        outside the trainer (`suite plan`'s calibration, tests)."""
        work = self.step_work(batch)
        self.add_tokens(*work["tokens"])
        return self.work_loss(work)

    def count_tokens(self, batch: dict[str, torch.Tensor]) -> None:
        """Real and computed (real + padded) training tokens of what ran forward."""
        self.add_tokens(int(batch["attention_mask"].sum()), batch["attention_mask"].numel())

    def add_tokens(self, real: int, padded: int) -> None:
        self.tokens["real"] += real
        self.tokens["padded"] += padded

    def on_before_batch_transfer(self, batch: Any, dataloader_idx: int) -> Any:
        # Lightning's hook on the collated batch, still on the CPU: training batches are cut here.
        return self.step_work(batch) if self.trainer.training else batch

    def training_step(self, batch: dict[str, Any], batch_idx: int) -> torch.Tensor:
        reach("train_step")
        work = batch if PIECES in batch else self.step_work(batch)
        loss = self.work_loss(work)
        # Read back later, many steps in one transfer: reading a CUDA loss waits for its queue.
        self._unread.append((self.global_step, loss.detach(), work["tokens"]))
        every = self.loss_sync_steps or (1 if loss.device.type == "cpu" else LOSS_SYNC_STEPS)
        if len(self._unread) >= every:
            self.record_steps()
        return loss

    def record_steps(self) -> None:
        """The unread steps' losses into the loss curve (one host transfer) and their tokens into
        the counts, in step order; a non-finite loss stops the run as diverged at its own step,
        with the curve and counts as they stood then (later steps are dropped)."""
        unread, self._unread = self._unread, []
        if not unread:
            return
        values = torch.stack([loss.float() for _, loss, _ in unread]).tolist()
        for (step, _, tokens), value in zip(unread, values, strict=True):
            self.add_tokens(*tokens)
            if not math.isfinite(value):
                raise TrialDiverged(f"non-finite training loss ({value}) at step {step}")
            self.loss_curve.append(round(value, 5))

    def on_validation_epoch_start(self) -> None:
        self.record_steps()  # a run that diverged before this evaluation stops before it

    def on_train_epoch_end(self) -> None:
        self.record_steps()

    @property
    def eval_positions(self) -> np.ndarray | None:
        """The positions the running evaluation covers: the whole set after training, else the
        curve's (None: the whole set)."""
        return None if self.after_training else self.curve_positions

    @property
    def scored_evaluation(self) -> bool:
        """Whether the running evaluation is the scored one: the whole set after training, or the
        last epoch's when every epoch evaluates the whole set."""
        last_epoch = self.current_epoch + 1 == self.trainer.max_epochs
        return self.after_training or (self.curve_positions is None and last_epoch)

    def on_validation_epoch_end(self) -> None:
        if self.trainer.sanity_checking:
            return
        metrics = self.epoch_metrics()
        reach("evaluation")
        epoch = self.trainer.max_epochs if self.after_training else self.current_epoch + 1
        self.record_evaluation(metrics, epoch)

    def record_evaluation(self, metrics: dict[str, float], epoch: int) -> None:
        """An evaluation's metrics as a point of the curve at `epoch`; after training, as the score
        (`final`), its curve point the sample's share of the same predictions."""
        if self.after_training:
            self.final, metrics = metrics, self.curve_point
        if metrics is not None:
            self.history.append({"epoch": epoch, **metrics})

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

    def make_optimizer(self, precision: str = "32-true") -> torch.optim.Optimizer:
        """The trial's optimizer over this module, as it runs under Lightning's `precision`: over
        the suite's parameter groups, or those the method's `param_groups` hook gives, and built
        by the method's `optimizer` hook where it has one."""
        h, method, hooks = self.train_hparams, self.fine_tuning_method, self.method_hooks
        multipliers = lr_multipliers(self, h)
        if not hooks & {"param_groups", "optimizer"}:
            return make_optimizer(self, h.lr, h.weight_decay, h.bias_correction, multipliers, precision)
        groups = parameter_groups(self, h.lr, h.weight_decay, multipliers)
        if "param_groups" in hooks:
            groups = method.param_groups(self, groups)
        if "optimizer" in hooks:
            return method.optimizer(self, groups)
        return optimizer_over(groups, h.lr, h.bias_correction, precision)

    def configure_optimizers(self) -> dict[str, Any]:
        h = self.train_hparams
        optimizer = self.make_optimizer(str(self.trainer.precision))
        total = int(self.trainer.estimated_stepping_batches)
        schedule = get_linear_schedule_with_warmup(optimizer, round(h.warmup_ratio * total), total)
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": schedule, "interval": "step"}}
