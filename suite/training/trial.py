"""One trial: one fine-tuning run (task, model, size, hyperparameters, three seeds) ->
a record with per-epoch dev metrics, loss curve, wall time, tokens and failure verdict.

Each epoch evaluates the task's curve sample (`curve_sample`: a fixed sample of the evaluation set,
the same for every trial; the curve and a pruner's intermediate values); the score is the whole
set's, evaluated once after the last epoch. With a whole-set curve (`curve_sample: full`, or a set
no larger than the sample) the last epoch's evaluation is the score, as before there was a sample.
`evaluated_on` says which set each part of the record is on; `time_s` splits the trial's time."""

from __future__ import annotations

import contextlib
import logging
import math
import resource
import time
import traceback
import warnings
from collections.abc import Sequence
from dataclasses import asdict
from typing import Any

import lightning as L
import optuna
import torch

from suite.data.module import FeatureDataModule
from suite.data.pieces import piece_cost
from suite.errors import SuiteError, TrialDiverged
from suite.heads.registry import CURVE_SAMPLE_SEED, PreparedTask
from suite.model.adapters import parameter_counts
from suite.model.devices import resolve_trainer
from suite.model.encoders import load_encoder
from suite.model.gpu_memory import CONTEXT_MB
from suite.model.method_code import method_code
from suite.model.methods import method_callbacks
from suite.model.optim import optimizer_label
from suite.training.trial_plan import TrialPlan

# Lightning sets its loggers to INFO on import; a study prints its own progress and summary.
logging.getLogger("lightning.pytorch").setLevel(logging.ERROR)
logging.getLogger("lightning.fabric").setLevel(logging.ERROR)
warnings.filterwarnings("ignore", module=r"lightning\..*")


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
    `pruning_trial` (an Optuna trial) is told the curve's dev score (on the curve sample) after
    every epoch and may stop the run, which is then recorded as pruned, not failed. `callbacks`
    watch the run (progress) and must not change it.
    """
    record = new_record(task, model, plan)
    if torch.cuda.is_initialized():  # the record's peak_gpu_mb: this trial's own
        torch.cuda.reset_peak_memory_stats()
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
        record.update(outcome="errored", reason=crash_reason(err), trace=crash_trace(err))
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


def crash_trace(err: Exception, lines: int = 80) -> str:
    """An errored trial's traceback, its header and last `lines` lines (a trace through Lightning
    runs to hundreds): the record keeps the story while the run prints one line."""
    kept = "".join(traceback.format_exception(err)).splitlines()
    if len(kept) > lines + 1:
        kept = [kept[0], f"  ... ({len(kept) - lines - 1} lines)", *kept[-lines:]]
    return "\n".join(kept)


def evaluated_on(n: int, positions: Any) -> dict[str, dict[str, Any]]:
    """Which set each part of a record is on: `epochs` (the curve) on the sample at `positions`
    (None: the whole set of `n` examples), the score (`score`, `scores`, `per_example`) on the
    whole set. Examples are sentences for tagging, questions for span tasks."""
    whole = {"set": "whole", "examples": n}
    if positions is None:
        return {"epochs": whole, "score": whole}
    curve = {"set": "sample", "examples": len(positions), "seed": CURVE_SAMPLE_SEED}
    return {"epochs": curve, "score": whole}


def record_costs(record: dict[str, Any], start: float, end: float) -> None:
    """Peak memory, and the trial's time split into training, curve evaluation, final evaluation and
    overhead (from the `first_step`/`train_end` marks and the evaluations' `eval_s`), into the record."""
    # The process's peak resident memory (Linux: KiB) since the worker reset it as this trial started
    # (suite/study/memory.py), else since the process started: a leak shows as growth over trials.
    record["peak_rss_mb"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)
    if torch.cuda.is_initialized():  # what sizes `--workers auto` on a GPU (suite.model.devices)
        record["peak_gpu_mb"] = round(torch.cuda.max_memory_reserved() / 2**20 + CONTEXT_MB, 1)
    evals = record.pop("eval_s", {})
    curve, final, after = (evals.get(k, 0.0) for k in ("curve", "final", "after_training"))
    if "train_end" in record:  # the overhead of a trial: everything but training and evaluation
        first, train_end = record.pop("first_step"), record.pop("train_end")
        record["overhead_s"] = {
            "to_first_step": round(first - start, 3),
            "after_training": round(end - train_end - after, 3),
        }
        training = train_end - first - (curve + final - after)
        record["time_s"] = {
            "training": round(training, 3),
            "curve_evaluation": round(curve, 3),
            "final_evaluation": round(final, 3),
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
    curve, positions = task.curve_features(dev)
    record.update(n_train=len(train), n_dev=len(dev))
    record["evaluated_on"] = evaluated_on(len(data.dev_indices()), positions)
    if task.eval_note is not None:
        record["eval_set"] = task.eval_note()

    torch.manual_seed(plan.seeds.init)  # the head's initial weights, and weights the checkpoint lacks
    if plan.hparams.method is not None:  # the code it runs, as imported here (suite/model/method_code.py)
        record["method"] = method_code(plan.hparams.method).record()
    module = task.build_trial_module(load_encoder(model), plan.hparams, plan.seeds.init)
    record["head"] = getattr(module, "head_name", task.spec.head)
    # Encoder weights the checkpoint lacked (a masked-LM checkpoint's pooler), drawn under the init seed.
    record["drawn_weights"] = list(getattr(module, "drawn_weights", []))
    record.update(parameter_counts(module))  # what the adapter or freeze leaves training
    module.curve_positions = positions
    torch.manual_seed(plan.seeds.order)  # dropout masks
    datamodule = FeatureDataModule(
        train,
        curve,
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
    if positions is not None:
        callbacks.append(ScoredAfterTraining())
    callbacks += list(watchers) + method_callbacks(module)
    common = dict(
        max_epochs=record.setdefault("epochs_run", plan.hparams.epochs_for(len(train))),
        **options,
        logger=False,
        enable_checkpointing=False,
        enable_model_summary=False,
        enable_progress_bar=progress,
    )
    trainer = L.Trainer(
        check_val_every_n_epoch=record.setdefault("eval_every", plan.hparams.eval_every(len(train))),
        callbacks=callbacks,
        gradient_clip_val=plan.hparams.max_grad_norm,
        num_sanity_val_steps=0,
        **common,
    )
    trainer.fit(module, datamodule=datamodule)
    if positions is not None:  # the score: the whole set, once, on the last epoch's weights
        module.after_training = True
        # Its own Trainer, timed by the clock: the run's watchers (progress, pruning) follow training.
        scorer = L.Trainer(callbacks=[clock], **common)
        scorer.validate(module, dataloaders=datamodule.eval_dataloader(dev), verbose=False)
    return module


class ScoredAfterTraining(L.Callback):
    """With a curve sample, the last epoch is not evaluated in the loop: the evaluation after
    training, on the whole set, gives the score and, from the same predictions, the curve's last
    point; the sample is never evaluated twice on the same weights."""

    def on_train_epoch_start(self, trainer: L.Trainer, module: Any) -> None:
        if trainer.current_epoch + 1 == trainer.max_epochs:
            trainer.check_val_every_n_epoch = trainer.max_epochs + 1  # divides no epoch: none evaluated


class StepClock(L.Callback):
    """Notes the optimizer the trial built, when the first training step starts, when training
    (with its last in-loop dev evaluation) ends, and how long each evaluation takes (`eval_s`:
    the curve's, the scored one's, and what of it ran after training), so a record tells
    training, evaluation and per-trial overhead apart."""

    def __init__(self, record: dict[str, Any]) -> None:
        self.record = record
        self.eval_start = 0.0

    def on_train_start(self, trainer: L.Trainer, module: Any) -> None:
        self.record["optimizer"] = optimizer_label(trainer.optimizers[0])  # as built for the precision

    def on_train_batch_start(self, trainer: L.Trainer, module: Any, batch: Any, batch_idx: int) -> None:
        self.record.setdefault("first_step", time.perf_counter())

    def on_train_end(self, trainer: L.Trainer, module: Any) -> None:
        self.record["train_end"] = time.perf_counter()

    def on_validation_start(self, trainer: L.Trainer, module: Any) -> None:
        self.eval_start = time.perf_counter()

    def on_validation_end(self, trainer: L.Trainer, module: Any) -> None:
        seconds = time.perf_counter() - self.eval_start
        add_eval_time(self.record, seconds, module.scored_evaluation, module.after_training)


def add_eval_time(record: dict[str, Any], seconds: float, scored: bool, after_training: bool) -> None:
    """An evaluation's seconds into the record's `eval_s` (see `record_costs`): the scored one's
    or the curve's, and whether it ran after training."""
    evals = record.setdefault("eval_s", {})
    for kind in ["final" if scored else "curve"] + ["after_training"] * after_training:
        evals[kind] = evals.get(kind, 0.0) + seconds


class PruneOnEpoch(L.Callback):
    """Reports each epoch's dev score (the curve's: on the curve sample) to Optuna and stops the
    run when its pruner says so. (optuna-integration's callback broke on Lightning 2.x; this is
    the part we need.)"""

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
        # Per example: the whole set's outcomes only (a sample's, before the score ran, are not kept).
        whole = module.curve_positions is None or module.final is not None
        record["per_example"] = module.per_example if whole else None
    record.setdefault("epochs", [])
    final = record["epochs"][-1] if record["epochs"] else {}
    if module is not None and module.final is not None:  # the whole set, after the last epoch
        final = module.final
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
