"""Replicate-parallel training: R seed replicates of one sequence-classification setting (same
task, size, hyperparameters and subsample seed; their own init and order seeds) trained in one
process as one batched model (`torch.func.stack_module_state` + `functional_call` under `vmap`),
each returning the record `run_trial` would.

What keeps a replicate equal to its sequential `run_trial` (tests/test_replicas.py):
- init: each module is built as `run_trial` builds it (init seed, then `build_module`);
- data: each replicate iterates its own `FeatureDataModule` train loader, so its batches and
  their order are those Lightning would draw. A step's R batches are padded to a common length
  (and batch size): extra positions are masked out (`MASK_KIND`), extra rows weigh 0 in the loss;
- optimizer: AdamW and BertAdam are elementwise, so one optimizer over the stacked tensors, with
  the first module's own parameter groups (weight decay, lr multipliers), is R optimizers; the
  same linear warmup schedule; the gradient norm is clipped per replicate as Lightning's
  `clip_grad_norm_` clips one model;
- evaluation: all replicates see the same dev batches; each replicate's predictions go through
  its own module's `epoch_metrics`, so `history` is what `ClassificationModule` records: each
  epoch on the curve sample, then the whole set once after the last epoch (as `run_trial`).

Dropout is the exception: under `vmap(randomness="different")` the R masks are drawn from one
global stream (seeded from the group's keys), so a replicate's dropout depends on its group and
cannot equal its sequential draws. Records say so (`replicate_group`, `training_code`).
"""

from __future__ import annotations

import contextlib
import hashlib
import math
import time
import warnings
from collections.abc import Sequence
from typing import Any

import torch
from torch import nn
from torch.func import functional_call, stack_module_state, vmap
from transformers import get_linear_schedule_with_warmup

from suite.data.module import FeatureDataModule
from suite.errors import SuiteError
from suite.heads.classification import ClassificationModule
from suite.heads.registry import PreparedTask
from suite.model.adapters import parameter_counts
from suite.model.devices import resolve_trainer
from suite.model.encoders import load_encoder
from suite.model.optim import optimizer_label
from suite.training.trial import (
    _finish,
    add_eval_time,
    crash_reason,
    crash_trace,
    evaluated_on,
    new_record,
    record_costs,
)
from suite.training.trial_plan import TrialPlan

# SDPA's CPU kernel has no vmap batching rule: torch loops over the replicates for that one op
# (measured about as fast as eager attention's batched matmuls at R=4), and warns every step.
warnings.filterwarnings("ignore", message=".*not yet implemented the batching rule.*")

TRAINING_CODE = "replicate-parallel/1"  # dropout drawn per group: not comparable draw-for-draw
# How each supported family takes the padding mask under vmap. transformers'
# `create_bidirectional_mask` turns a 2D mask into 4D by branching on its values (vmap cannot
# trace that) but returns a prepared 4D mask as-is; DeBERTa-v2 expands its 2D mask by arithmetic.
# ModernBERT is refused: its sliding-window mask is built from the same argument, a 4D one
# would replace both. (Each family checked equal to sequential training: tests/test_replicas.py.)
MASK_KIND = dict.fromkeys(("bert", "roberta", "electra", "distilbert", "albert"), "4d") | {"deberta-v2": "2d"}


def check_group(task: PreparedTask, plans: Sequence[TrialPlan]) -> None:
    """Refuse a group that is not R seed replicates of one classification setting."""
    if not plans:
        raise SuiteError("replicate group: no plans")
    if task.spec.head != "classification":
        raise SuiteError(
            f"replicate group: task {task.spec.name} has head {task.spec.head!r}; "
            "replicate-parallel training covers the classification head only"
        )
    first = plans[0]
    for plan in plans[1:]:
        for what, a, b in (
            ("size", first.size, plan.size),
            ("hparams", first.hparams, plan.hparams),
            ("subsample seed", first.seeds.subsample, plan.seeds.subsample),
        ):
            if a != b:
                raise SuiteError(
                    f"replicate group: plans differ in {what} ({a} vs {b}); "
                    "replicates may differ only in their init and order seeds"
                )
    keys = [p.key for p in plans]
    if len(set(keys)) < len(keys):
        raise SuiteError("replicate group: a plan is listed twice")
    if first.hparams.split_batches:  # replicates share padded steps; pieces would differ per replicate
        raise SuiteError("replicate group: split_batches is not supported (set it to false)")
    if first.hparams.features != "last":  # the stacked forward reads the last layer only
        raise SuiteError("replicate group: features last4 is not supported (set it to last)")
    if first.hparams.adapter != "none":  # stacked state holds the plain encoder's parameters only
        raise SuiteError(f"replicate group: adapter {first.hparams.adapter} is not supported")
    if first.hparams.method is not None:  # its hooks act on one module, not a stack of them
        raise SuiteError(
            f"replicate group: method {first.hparams.method} is not supported (a setting with a "
            "method trains one trial at a time: run_trial)"
        )


def run_replicates(
    task: PreparedTask, model: str, plans: Sequence[TrialPlan], trainer: dict[str, Any] | None = None
) -> list[dict[str, Any]]:
    """Train the group as one batched model; one `run_trial`-shaped record per plan, in order.
    Its `wall_time_s` is the group's time / R (`group_wall_time_s` the whole)."""
    check_group(task, plans)
    keys = [p.key for p in plans]
    records = [
        {**new_record(task, model, p), "training_code": TRAINING_CODE, "replicate_group": keys} for p in plans
    ]
    start = time.perf_counter()
    try:
        _Group(task, model, plans, records, resolve_trainer(trainer or {})).fit()
    except SuiteError:
        raise
    except Exception as err:  # a crash errors every replicate of the group (as run_trial: not a run)
        for record in records:
            record.setdefault("outcome", "errored")
            record.setdefault("reason", crash_reason(err))
            record.setdefault("trace", crash_trace(err))
    end = time.perf_counter()
    for record in records:
        _finish(task, record, None)
        record.update(
            wall_time_s=round((end - start) / len(plans), 3), group_wall_time_s=round(end - start, 3)
        )
        record_costs(record, start, end)
    return records


def group_dropout_seed(keys: Sequence[str]) -> int:
    """The seed of the group's one dropout stream: a function of its plans, in order."""
    return int(hashlib.sha256("\n".join(keys).encode()).hexdigest()[:15], 16)


class _Group:
    def __init__(
        self,
        task: PreparedTask,
        model: str,
        plans: Sequence[TrialPlan],
        records: list[dict[str, Any]],
        options: dict[str, Any],
    ) -> None:
        self.task, self.plans, self.records = task, plans, records
        self.hparams = h = plans[0].hparams
        if options["precision"] not in ("32-true", "bf16-mixed"):
            raise SuiteError(
                f"replicate group: precision {options['precision']} is not supported (32-true or bf16-mixed)"
            )
        self.device = torch.device("cuda" if options["accelerator"] == "gpu" else "cpu")
        self.autocast = options["precision"] == "bf16-mixed"
        data = task.data
        train = data.features("train", data.train_indices(plans[0].size, plans[0].seeds.subsample))
        dev = data.features("dev", data.dev_indices())
        curve, self.positions = task.curve_features(dev)
        self.modules: list[ClassificationModule] = []
        for plan, record in zip(plans, records, strict=True):
            record.update(n_train=len(train), n_dev=len(dev), trainer=options)
            record["evaluated_on"] = evaluated_on(len(data.dev_indices()), self.positions)
            if task.eval_note is not None:
                record["eval_set"] = task.eval_note()
            torch.manual_seed(plan.seeds.init)  # the head's initial weights, as run_trial draws them
            encoder = load_encoder(model)
            if encoder.config.model_type not in MASK_KIND:
                raise SuiteError(
                    f"replicate group: {encoder.config.model_type} encoders are not "
                    f"supported (only {', '.join(MASK_KIND)})"
                )
            module = task.build_module(encoder, h)
            if not isinstance(module, ClassificationModule):
                raise SuiteError("replicate group: the task's head is not ClassificationModule")
            record["head"] = getattr(module, "head_name", task.spec.head)
            record["drawn_weights"] = list(getattr(module, "drawn_weights", []))
            record.update(parameter_counts(module))
            module.curve_positions = self.positions
            record["module"] = module  # partial results survive a crash mid-training
            record.update(epochs_run=h.epochs_for(len(train)), eval_every=h.eval_every(len(train)))
            self.modules.append(module.to(self.device))
        self.loaders = [
            FeatureDataModule(
                train, dev, h.batch_size, p.seeds.order, task.collate, group_by_length=h.group_by_length
            ).train_dataloader()
            for p in plans
        ]
        evaluation = FeatureDataModule(train, curve, h.batch_size, 0, task.collate)
        self.dev_loader = evaluation.val_dataloader()
        self.whole_loader = None if self.positions is None else evaluation.eval_dataloader(dev)
        self.skeleton = self.modules[0]  # functional_call swaps the stacked parameters in
        self.params, _ = stack_module_state(self.modules)  # buffers are equal: the skeleton's serve
        # The first module's own optimizer (its groups: decay, lr multipliers) with each parameter
        # swapped for its stack, before any step (no state yet); elementwise -> R optimizers.
        self.optimizer = self.skeleton.make_optimizer(options["precision"])  # as run_trial's
        names = {id(p): n for n, p in self.skeleton.named_parameters()}
        for group in self.optimizer.param_groups:
            group["params"] = [self.params[names[id(p)]] for p in group["params"]]
        self.trained = [p for g in self.optimizer.param_groups for p in g["params"]]
        for record in records:
            record["optimizer"] = optimizer_label(self.optimizer)
        for module in self.modules[1:]:
            module.to("meta")  # only its records (history, curve, tokens) are used from here on
        self.total = records[0]["epochs_run"] * len(self.loaders[0])
        self.schedule = get_linear_schedule_with_warmup(
            self.optimizer, round(h.warmup_ratio * self.total), self.total
        )
        self.dropout_seed = group_dropout_seed([p.key for p in plans])
        for record in records:
            record["dropout_seed"] = self.dropout_seed
        self.alive = torch.ones(len(plans), dtype=torch.bool)

    def _context(self) -> contextlib.AbstractContextManager:
        if self.autocast:
            return torch.autocast(self.device.type, dtype=torch.bfloat16)
        return contextlib.nullcontext()

    def _mask(self, attention: torch.Tensor) -> torch.Tensor:
        """[.., batch, length] 0/1 -> what the encoder takes (`MASK_KIND`): the 4D mask transformers
        itself would build, boolean for SDPA, additive float for eager attention."""
        if MASK_KIND[self.skeleton.encoder.config.model_type] == "2d":
            return attention
        keep = attention.bool()[..., None, None, :]
        if self.skeleton.encoder.config._attn_implementation == "sdpa":
            return keep
        return torch.zeros(keep.shape).masked_fill(~keep, torch.finfo(torch.float32).min)

    def _logits(self, params: dict[str, torch.Tensor], batch: dict[str, torch.Tensor]) -> torch.Tensor:
        return functional_call(self.skeleton, params, (batch,))

    def _loss(self, params: dict[str, torch.Tensor], batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """ClassificationModule.loss with per-row weights (0 for the rows padding the batch)."""
        weight = batch["weight"]
        logits = self._logits(params, batch)
        labels = batch["labels"]
        if self.skeleton.regression:
            per_row = (logits.float() - labels.float()) ** 2
        else:
            per_row = nn.functional.cross_entropy(logits.float(), labels, reduction="none")
        return (per_row * weight).sum() / weight.sum()

    def _stack(self, batches: list[dict[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
        """R collated batches -> one [R, batch, length] batch: padded positions masked out, padded
        rows weighted 0 (a row keeps one unmasked token: an all-masked row would give NaN)."""
        rows = max(b["input_ids"].shape[0] for b in batches)
        length = max(b["input_ids"].shape[1] for b in batches)
        # The collator's pad id: RoBERTa numbers positions by counting non-pad ids.
        pad_id = getattr(self.task.tokenizer, "pad_token_id", None) or 0
        out: dict[str, list[torch.Tensor]] = {}
        for b in batches:
            n, m = b["input_ids"].shape
            for key, value in b.items():
                if key == "example":
                    continue
                fill = pad_id if key == "input_ids" else 0
                widths = (0, length - m, 0, rows - n) if value.ndim == 2 else (0, rows - n)
                value = nn.functional.pad(value, widths, value=fill)
                if key == "attention_mask":
                    value[n:, 0] = 1
                out.setdefault(key, []).append(value)
            out.setdefault("weight", []).append((torch.arange(rows) < n).float())
        stacked = {k: torch.stack(v).to(self.device) for k, v in out.items()}
        stacked["attention_mask"] = self._mask(stacked["attention_mask"]).to(self.device)
        return stacked

    def _clip(self) -> None:
        """clip_grad_norm_ (Lightning's `gradient_clip_val`) per replicate: each replicate's own
        total norm, not the stack's; a diverged replicate's gradients are zeroed."""
        grads = [p.grad for p in self.trained if p.grad is not None]
        replicas = len(self.plans)
        norms = torch.stack([g.reshape(replicas, -1).norm(dim=1) for g in grads]).norm(dim=0)
        coef = (self.hparams.max_grad_norm / (norms + 1e-6)).clamp(max=1.0)
        coef = coef.masked_fill(~self.alive.to(coef.device), 0.0)
        for g in grads:
            g.mul_(coef.view(-1, *[1] * (g.ndim - 1))).nan_to_num_(0.0, 0.0, 0.0)

    def fit(self) -> None:
        torch.manual_seed(self.dropout_seed)
        loss_fn = vmap(self._loss, randomness="different")
        step = 0
        epochs, every = self.records[0]["epochs_run"], self.records[0]["eval_every"]
        for epoch in range(epochs):
            self.skeleton.train()
            for batches in zip(*self.loaders, strict=True):
                self.records[0].setdefault("first_step", time.perf_counter())
                with self._context():
                    losses = loss_fn(self.params, self._stack(batches))
                self._record_step(step, losses.detach().float().cpu().tolist(), batches)
                if not self.alive.any():
                    return
                losses.sum().backward()  # replicates are independent: each gets its own gradient
                self._clip()
                self.optimizer.step()
                self.optimizer.zero_grad(set_to_none=True)
                self.schedule.step()
                step += 1
            # With a curve sample, the last epoch is evaluated after training, on the whole set.
            if (epoch + 1) % every == 0 and not (self.whole_loader is not None and epoch + 1 == epochs):
                self._evaluate(epoch, self.dev_loader)
        end = time.perf_counter()
        for record in self.records:
            record["train_end"] = end
            record.setdefault("first_step", self.records[0]["first_step"])
        if self.whole_loader is not None:  # the score: the whole set, once, after the last epoch
            for module in self.modules:
                module.after_training = True
            self._evaluate(epochs - 1, self.whole_loader)

    def _record_step(self, step: int, losses: list[float], batches: list[dict[str, torch.Tensor]]) -> None:
        """Per replicate, what EncoderModule.training_step records (and its divergence check)."""
        for r, (value, batch) in enumerate(zip(losses, batches, strict=True)):
            if not self.alive[r]:
                continue
            if not math.isfinite(value):
                self.alive[r] = False
                self.records[r].update(
                    outcome="failed",
                    failure="diverged",
                    reason=f"diverged: non-finite training loss ({value}) at step {step}",
                )
                continue
            module = self.modules[r]
            module.loss_curve.append(round(value, 5))
            module.count_tokens(batch)

    @torch.no_grad()
    def _evaluate(self, epoch: int, loader: Any) -> None:
        """Every replicate predicts the same dev batches; its own module scores them (into its
        history, or its `final` score after training); each record gets the evaluation's time."""
        start = time.perf_counter()
        self.skeleton.eval()
        logits_fn = vmap(self._logits, in_dims=(0, None), randomness="different")
        for batch in loader:
            inputs = {k: v.to(self.device) for k, v in batch.items() if k != "example"}
            inputs["attention_mask"] = self._mask(inputs["attention_mask"]).to(self.device)
            with self._context():
                logits = logits_fn(self.params, inputs)
            for r, module in enumerate(self.modules):
                module._predictions.append(logits[r] if module.regression else logits[r].argmax(-1))
                module._labels.append(batch["labels"])
                module._examples.append(batch["example"])
        for r, module in enumerate(self.modules):
            metrics = module.epoch_metrics()
            if self.alive[r]:  # a diverged replicate stopped, as its sequential run would have
                module.record_evaluation(metrics, epoch + 1)
        self.skeleton.train()
        seconds = time.perf_counter() - start
        for module, record in zip(self.modules, self.records, strict=True):
            scored = module.after_training or (self.positions is None and epoch + 1 == record["epochs_run"])
            add_eval_time(record, seconds, scored, module.after_training)
