"""One trial: one fine-tuning run (task, model, size, hyperparameters, three seeds) ->
a record with per-epoch dev metrics, loss curve, wall time, tokens and failure verdict."""

from __future__ import annotations

import contextlib
import logging
import math
import resource
import time
import traceback
import warnings
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import lightning as L
import optuna
import torch

from suite.config.sweep import HParams
from suite.config.task import Size
from suite.data.module import FeatureDataModule
from suite.data.pieces import piece_cost
from suite.errors import SuiteError, TrialDiverged
from suite.heads.registry import PreparedTask
from suite.model.devices import resolve_trainer
from suite.model.encoders import load_encoder

# Lightning sets its loggers to INFO on import; a study prints its own progress and summary.
logging.getLogger("lightning.pytorch").setLevel(logging.ERROR)
logging.getLogger("lightning.fabric").setLevel(logging.ERROR)
warnings.filterwarnings("ignore", module=r"lightning\..*")


@dataclass(frozen=True)
class Seeds:
    init: int  # the new head's weights, and the encoder weights its checkpoint lacked
    order: int  # training data order and dropout masks
    subsample: int  # which training examples a small-data size draws


@dataclass(frozen=True)
class TrialPlan:
    size: Size
    hparams: HParams
    seeds: Seeds

    @property
    def key(self) -> str:
        """Identifies a planned run; a study runs each key exactly once."""
        h = self.hparams.as_record()
        setting = ",".join(f"{k}={h[k]}" for k in sorted(h))
        s = self.seeds
        return f"size={self.size}|{setting}|init={s.init},order={s.order},subsample={s.subsample}"


def run_trial(
    task: PreparedTask,
    model: str,
    plan: TrialPlan,
    progress: bool = False,
    trainer: dict[str, Any] | None = None,
    pruning_trial: Any = None,
    callbacks: Sequence[L.Callback] = (),
) -> dict[str, Any]:
    """Train and evaluate; returns a record whose `outcome` is succeeded, failed (no better
    than the trivial baseline, or diverged), errored (a crash: not a run) or pruned.

    A user error (`SuiteError`) is not an outcome: it propagates and stops the study.
    `trainer` passes Lightning options through (accelerator, devices, strategy, precision);
    `pruning_trial` (an Optuna trial) is told the dev score after every epoch and may stop
    the run, which is then recorded as pruned, not failed. `callbacks` watch the run (progress)
    and must not change it.
    """
    record = new_record(task, model, plan)
    start = time.perf_counter()
    module = None
    try:
        module = _fit(task, model, plan, progress, record, trainer or {}, pruning_trial, callbacks)
    except optuna.TrialPruned as err:
        record.update(outcome="pruned", reason=f"pruned: {err}")
    except TrialDiverged as err:
        record.update(outcome="failed", failure="diverged", reason=f"diverged: {err}")
    except SuiteError:
        raise
    except Exception as err:  # a crash (OOM, a bug, a bad kernel) is an errored trial, not a run
        record.update(outcome="errored", reason=crash_reason(err))
    _finish(task, record, module)
    end = time.perf_counter()
    record["wall_time_s"] = round(end - start, 3)
    record_costs(record, start, end)
    return record


def new_record(task: PreparedTask, model: str, plan: TrialPlan) -> dict[str, Any]:
    """What a trial's record says before it trains: the plan, the model, the metric and baseline."""
    return {
        "key": plan.key,
        "task": task.spec.name,
        "model": model,
        "size": plan.size,
        "hparams": plan.hparams.as_record(),
        "seeds": asdict(plan.seeds),
        "threads": torch.get_num_threads(),
        "metric": task.spec.metric.main,
        "baseline": task.baseline[task.spec.metric.main],
    }


def crash_reason(err: Exception) -> str:
    """An errored trial's reason: the exception and the file:line it was raised at."""
    frame = traceback.extract_tb(err.__traceback__)[-1]
    where = f"{frame.filename.rsplit('/', 1)[-1]}:{frame.lineno}"
    return f"error: {type(err).__name__}: {err} ({where})"


def record_costs(record: dict[str, Any], start: float, end: float) -> None:
    """Peak memory and per-trial overhead (from the `first_step`/`train_end` marks) into the record."""
    # The process's peak resident memory (Linux: KiB) since the worker reset it as this trial started
    # (suite/study/memory.py), else since the process started: a leak shows as growth over trials.
    record["peak_rss_mb"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)
    if "train_end" in record:  # the overhead of a trial: everything but training and evaluation
        record["overhead_s"] = {
            "to_first_step": round(record.pop("first_step") - start, 3),
            "after_training": round(end - record.pop("train_end"), 3),
        }
    record.pop("first_step", None)


def _fit(
    task: PreparedTask,
    model: str,
    plan: TrialPlan,
    progress: bool,
    record: dict[str, Any],
    trainer_options: dict[str, Any],
    pruning_trial: Any,
    watchers: Sequence[L.Callback] = (),
) -> Any:
    data = task.data
    train_idx = data.train_indices(plan.size, plan.seeds.subsample)
    train = data.features("train", train_idx)
    dev = data.features("dev", data.dev_indices())
    record.update(n_train=len(train), n_dev=len(dev))
    if task.eval_note is not None:
        record["eval_set"] = task.eval_note()

    torch.manual_seed(plan.seeds.init)  # the head's initial weights, and weights the checkpoint lacks
    module = task.build_module(load_encoder(model), plan.hparams)
    record["head"] = getattr(module, "head_name", task.spec.head)
    # Encoder weights the checkpoint lacked (a masked-LM checkpoint's pooler), drawn under the init seed.
    record["drawn_weights"] = list(getattr(module, "drawn_weights", []))
    torch.manual_seed(plan.seeds.order)  # dropout masks
    datamodule = FeatureDataModule(
        train,
        dev,
        plan.hparams.batch_size,
        plan.seeds.order,
        task.collate,
        group_by_length=plan.hparams.group_by_length,
    )
    record["module"] = module  # partial results survive a crash mid-training
    options = record["trainer"] = resolve_trainer(trainer_options)
    if plan.hparams.split_batches:  # decided by the device: the record says how batches were computed
        module.piece_cost = record["piece_cost"] = piece_cost(options["accelerator"])
    clock = StepClock(record)
    callbacks = [clock, PruneOnEpoch(pruning_trial, task.spec.metric.main)] if pruning_trial else [clock]
    callbacks += list(watchers)
    trainer = L.Trainer(
        max_epochs=record.setdefault("epochs_run", plan.hparams.epochs_for(len(train))),
        check_val_every_n_epoch=record.setdefault("eval_every", plan.hparams.eval_every(len(train))),
        callbacks=callbacks,
        **options,
        gradient_clip_val=plan.hparams.max_grad_norm,
        logger=False,
        enable_checkpointing=False,
        enable_model_summary=False,
        enable_progress_bar=progress,
        num_sanity_val_steps=0,
    )
    trainer.fit(module, datamodule=datamodule)
    return module


class StepClock(L.Callback):
    """Notes when the first training step starts and when training (with its last dev
    evaluation) ends, so a record tells its per-trial overhead apart from its compute."""

    def __init__(self, record: dict[str, Any]) -> None:
        self.record = record

    def on_train_batch_start(self, trainer: L.Trainer, module: Any, batch: Any, batch_idx: int) -> None:
        self.record.setdefault("first_step", time.perf_counter())

    def on_train_end(self, trainer: L.Trainer, module: Any) -> None:
        self.record["train_end"] = time.perf_counter()


class PruneOnEpoch(L.Callback):
    """Reports each epoch's dev score to Optuna and stops the run when its pruner says so.
    (optuna-integration's callback broke on Lightning 2.x; this is the part we need.)"""

    def __init__(self, trial: Any, metric: str) -> None:
        self.trial, self.metric, self.reported = trial, metric, 0

    def on_train_epoch_end(self, trainer: L.Trainer, module: Any) -> None:
        if len(module.history) > self.reported:  # a new dev evaluation happened this epoch
            self.reported = len(module.history)
            epoch = module.history[-1]
            self.trial.report(epoch[self.metric], epoch["epoch"])
            if self.trial.should_prune():
                raise optuna.TrialPruned(
                    f"at epoch {epoch['epoch']} ({self.metric} {epoch[self.metric]:.4f})"
                )


def _finish(task: PreparedTask, record: dict[str, Any], module: Any) -> None:
    """Copy the module's record out and judge the run by the task's failure rule. Only a run
    that ended as a run keeps a score: a diverged, errored or pruned one keeps its per-epoch
    history (and `last_score`) but has no score for any statistic."""
    module = record.pop("module", module)
    if module is not None:
        with contextlib.suppress(Exception):  # steps a crash left unread (a GPU's last few), if readable
            module.record_steps()
        record.update(epochs=module.history, loss_curve=module.loss_curve, tokens=dict(module.tokens))
        record["per_example"] = module.per_example
    record.setdefault("epochs", [])
    final = record["epochs"][-1] if record["epochs"] else {}
    score = final.get(task.spec.metric.main)
    if "outcome" not in record:
        failure, reason = judge(task, score)
        record.update(outcome="failed" if failure else "succeeded", failure=failure, reason=reason)
    scored = record["outcome"] in ("succeeded", "failed") and record.get("failure") != "diverged"
    record["score"] = score if scored else None
    record["scores"] = {k: v for k, v in final.items() if k != "epoch"} if scored else {}
    if not scored and score is not None:
        record["last_score"] = score
    record["failed"] = record["outcome"] == "failed"
    record.setdefault("failure", None)


def judge(task: PreparedTask, score: float | None) -> tuple[str | None, str | None]:
    """The failure rule (docs/design.md, Outcomes) -> (failure kind or None, reason)."""
    rule, spec = task.spec.failure, task.spec
    if score is None:
        return "diverged", "diverged: no dev score was produced"
    if not math.isfinite(score):
        return "diverged", f"diverged: non-finite dev {spec.metric.main} ({score})"
    higher = spec.metric.higher_is_better  # the metric's own direction
    if rule.rule == "threshold":
        if score < rule.threshold if higher else score > rule.threshold:
            side = "below" if higher else "above"
            return "threshold", f"dev {spec.metric.main} {score:.4f} {side} the threshold {rule.threshold}"
        return None, None
    base = task.baseline[spec.metric.main]
    worse = score <= base + rule.margin if higher else score >= base - rule.margin
    if worse:
        return (
            "baseline",
            f"dev {spec.metric.main} {score:.4f} no better than the trivial baseline {base:.4f}",
        )
    return None, None
