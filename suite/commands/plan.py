"""`suite plan`: what `run` would do, without training or writing a trial.

The planned trials (sizes x settings x seeds) come from the same planner `run` queues from
(`study.plan.plan_trials`), what the storage holds from the same test `run` uses before queuing
(`study.plan.held_keys`), and whether `run` would refuse the stored study from the same fingerprint.
The wall time is an estimate: a few timed training steps of the real model and head on real
batches of this machine, scaled by each trial's planned steps and evaluations.
"""

from __future__ import annotations

import math
import statistics
import sys
import time
from typing import Any

import torch

from suite.config.request import Request
from suite.errors import SuiteError
from suite.study.budget import (
    Budget,
    budgets,
    floor_warning,
    setting_label,
    steps_of,
    train_counts,
    values_text,
)
from suite.study.setup import Setup, setup_study
from suite.training.trial_plan import TrialPlan

TIMED_STEPS = 3  # after one untimed warm-up step (allocations, lazy initialisation)
EVAL_BATCH = 64  # FeatureDataModule's dev batch size


def plan(request: Request) -> int:
    """Print the plan, the storage's share of it and the estimate; 2 when `run` would refuse."""
    from suite.study.plan import plan_trials

    s = setup_study(request)
    plans = plan_trials(s.task, s.sweep)
    print(describe_plan(s, plans))
    line, refusal, held = storage_report(s, {p.key for p in plans})
    print(line)
    counts = train_counts(s.prepared.data, plans)
    rows = budgets(s.prepared.data, s.sweep.space, plans, counts)
    if s.trainer.get("accelerator") == "gpu" and not torch.cuda.is_available():
        print(budget_table(rows, {}))
        print("estimate: none (the trials run on a GPU, and this machine has none)")
    else:
        torch.set_num_threads(s.threads)
        print(estimate(s, plans, held, rows, counts))
    if warning := floor_warning(rows):
        print(warning)
    if refusal:
        print(f"error: {refusal}", file=sys.stderr)
        return 2
    return 0


def describe_plan(s: Setup, plans: list[TrialPlan]) -> str:
    from suite.study.plan import replicate_seeds

    sweep, task = s.sweep, s.task
    seeds = sweep.seeds
    crossed = seeds.design == "crossed"
    grid = f"{seeds.init} init x {seeds.order} order seeds" if crossed else f"{seeds.repeats} seed draws"
    subsamples = len(seeds.subsample_seeds or range(seeds.subsample))
    settings = sweep.settings()
    per_setting = len(plans) // max(1, len(settings) * len(task.sizes))
    whole = ""
    if "full" in task.sizes and subsamples > 1:  # full trains each (init, order) pair once
        whole = f" ({len(replicate_seeds(sweep, 'full'))} at full: every example, one subsample)"
        per_setting = len(replicate_seeds(sweep, next((z for z in task.sizes if z != "full"), "full")))
    lines = [
        f"plan: study {s.name!r} (model {s.model}, sweep {sweep.name})",
        f"fixed: {values_text(sweep.hparams) or '(none)'}",
        f"seeds: {grid} x {subsamples} subsample(s) per size and setting",
        f"planned: {len(task.sizes)} size(s) x {len(settings)} setting(s) x {per_setting} seeds{whole}"
        f" = {len(plans)} trials",
    ]
    if sweep.adaptive:
        lines.append(
            f"  (TPE proposes its {sweep.budget} settings from results; these are sampled stand-ins)"
        )
    # A sweep that names a method runs its code: what, from where, and the code's hash.
    lines += [code.line() for code in s.methods.values()]
    return "\n".join(lines)


def storage_report(s: Setup, keys: set[str]) -> tuple[str, str | None, set[str]]:
    """What the storage holds of the planned keys (a line, and the keys), and `run`'s refusal
    when the stored study's fingerprint differs. Opens an existing storage only: nothing is
    created or written."""

    from suite.study.plan import finished_records, held_keys
    from suite.study.records import outcome
    from suite.study.resume import resumption
    from suite.study.storage import public_url, storage_file, stored_study

    where = public_url(s.url)
    local = storage_file(s.url)
    if local is not None and not local.exists():
        return f"storage: {where} does not exist yet; all {len(keys)} trials to run", None, set()
    study = stored_study(s.url, s.name)
    if study is None:
        return f"storage: no study {s.name!r} in {where} yet; all {len(keys)} trials to run", None, set()
    trials = study.get_trials(deepcopy=False)
    refusal, grown = None, ""
    if (stored := study.user_attrs.get("fingerprint")) is not None or trials:
        try:
            info = study.user_attrs.get("run_info")
            allow = s.request.allow_stack_change
            how = resumption(stored, s.fingerprint, info, s.task, s.sweep, s.name, where, allow)
            grown = f"; {how.describe()}" if how.grown or how.stack_changed else ""
        except SuiteError as err:
            refusal = str(err)
    # TPE's settings exist only in the storage: its stand-in keys never match, so count trials.
    held = held_keys(trials) if s.sweep.adaptive else held_keys(trials) & keys
    ended = {k for k, r in finished_records(study).items() if outcome(r) != "errored"} & held
    line = (
        f"storage: {where} holds {len(held)} of the {len(keys)} planned trials "
        f"({len(ended)} ended as runs, {len(held - ended)} queued or running); "
        f"{max(0, len(keys) - len(held))} to run{grown}"
    )
    return line, refusal, held


def estimate(
    s: Setup, plans: list[TrialPlan], held: set[str], rows: list[Budget], counts: dict[tuple[str, int], int]
) -> str:
    """`budget_table` with the estimated time of one trial per (size, setting); then the time of
    the trials still to run (not `held`) on the setup's workers. `counts`: `train_counts`."""
    data = s.prepared.data
    dev = data.features("dev", data.dev_indices())
    n_dev, n_curve = len(dev), len(s.prepared.curve_features(dev)[0])  # each epoch but the last: the sample
    timed = sorted({_timed_as(p.hparams) for p in plans})
    step_s = _timed(s, {k: next(p for p in plans if _timed_as(p.hparams) == k) for k in timed})
    eval_s = step_s[timed[0]][1]
    seconds: dict[tuple[str, str], float] = {}
    todo = 0.0
    for p in plans:
        h = p.hparams
        n = counts[str(p.size), p.seeds.subsample]
        evals = (h.epochs - 1) * math.ceil(n_curve / EVAL_BATCH) + math.ceil(n_dev / EVAL_BATCH)
        trial_s = steps_of(h, n) * step_s[_timed_as(h)][0] + evals * eval_s
        key = (str(p.size), setting_label(h, s.sweep.space))
        seconds[key] = seconds.get(key, 0.0) + trial_s
        todo += 0.0 if p.key in held else trial_s
    if s.sweep.adaptive:  # stand-in settings: scale the whole plan by the share still to run
        todo = sum(seconds.values()) * max(0, len(plans) - len(held)) / len(plans)
    lines = [budget_table(rows, seconds)]
    calibrated = ", ".join(f"{_label(k)}: {t:.2f} s/step" for k, (t, _) in sorted(step_s.items()))
    side_by_side, where = s.workers, f"{s.workers} worker(s) x {s.threads} threads"
    if s.trainer["accelerator"] == "gpu":  # workers sharing a card do not add up (1.3x at 6 measured)
        from suite.model.devices import visible_devices

        side_by_side = min(s.workers, max(1, len(visible_devices())))
        where = f"{side_by_side} GPU(s) at one worker's pace each (more workers per GPU: not counted)"
    left = max(0, len(plans) - len(held))
    lines.append(
        f"estimate: ~{_duration(todo / side_by_side)} for the {left} trials to run on "
        f"{where} ({TIMED_STEPS} timed training steps per batch size and method: {calibrated}; dev batch of "
        f"{EVAL_BATCH}: {eval_s:.2f} s)"
    )
    return "\n".join(lines)


def budget_table(rows: list[Budget], seconds: dict[tuple[str, str], float]) -> str:
    """Per (size, setting): training examples, optimizer steps and trials, and the estimated time
    of one trial where `seconds` (the row's trials together) has it."""
    lines = [f"{'size':>6s}  {'setting':30s} {'n_train':>7s} {'steps':>6s} {'trials':>6s}  est. per trial"]
    for b in rows:
        total = seconds.get((b.size, b.setting))
        per_trial = _duration(total / b.trials) if total is not None else "-"
        lines.append(f"{b.size:>6s}  {b.setting:30s} {b.n_train:7d} {b.steps:6d} {b.trials:6d}  {per_trial}")
    return "\n".join(lines)


Timed = tuple[int, str]  # what a step's time depends on: the batch size, and the method (its loss hook)


def _timed_as(h: Any) -> Timed:
    """A trial's steps are timed as those of its batch size and method: R-Drop's loss hook runs a
    second forward pass, so its steps are timed with it, not as plain fine-tuning's."""
    return (
        h.batch_size,
        "" if h.method is None else f"{h.method} {h.as_record().get('method_args', '')}".strip(),
    )


def _label(timed: Timed) -> str:
    return f"batch {timed[0]}" + (f" with {timed[1]}" if timed[1] else "")


def _timed(s: Setup, trials: dict[Timed, TrialPlan]) -> dict[Timed, tuple[float, float]]:
    """`calibrate` on a trial of each batch size, with a progress bar on stderr (unless --quiet):
    on a big model or a busy machine each step takes seconds, and a silent `plan` looks hung."""
    from tqdm.auto import tqdm

    with tqdm(
        total=len(trials) * (TIMED_STEPS + 2),  # the warm-up step, the timed ones, a dev batch
        desc=f"plan: timing {TIMED_STEPS} training steps per batch size (and method)",
        unit="step",
        disable=s.request.quiet,
        leave=False,
    ) as bar:
        times = {}
        for timed, trial in trials.items():
            bar.set_postfix_str(_label(timed))
            times[timed] = calibrate(s, trial, bar.update)
        return times


def _duration(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 90 * 60:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"


def calibrate(s: Setup, trial: TrialPlan, tick: Any = None) -> tuple[float, float]:
    """(seconds per training step, seconds per dev batch) of the real model and head on the
    trial's own batches, on the trials' device at their precision: forward, backward, clipping and
    the optimizer step, as a trial does. Nothing is kept: the module is a fresh copy and is thrown
    away. `tick()` after each step."""
    tick = tick or (lambda: None)
    from lightning.fabric.utilities.apply_func import move_data_to_device

    from suite.data.module import FeatureDataModule
    from suite.data.pieces import piece_cost
    from suite.model.encoders import load_encoder

    task, h = s.prepared, trial.hparams
    device = torch.device("cuda" if s.trainer["accelerator"] == "gpu" else "cpu")
    train_idx = task.data.train_indices(trial.size, trial.seeds.subsample)
    train = task.data.features("train", train_idx)
    dev = task.data.features("dev", task.data.dev_indices())
    torch.manual_seed(trial.seeds.init)
    module = task.build_trial_module(load_encoder(s.model), h, trial.seeds.init).to(device)  # a method too
    module.piece_cost = piece_cost(s.trainer["accelerator"])  # as the trial sets it
    loader = FeatureDataModule(
        train, dev, h.batch_size, trial.seeds.order, task.collate, group_by_length=h.group_by_length
    ).train_dataloader()
    optimizer = module.make_optimizer(s.trainer["precision"])
    # 16-mixed steps through a gradient scaler, as Lightning's: its unscale and inf check are timed
    scaler = torch.amp.GradScaler(device.type, enabled=s.trainer["precision"] == "16-mixed")
    batches = _cycle(loader, TIMED_STEPS + 1)
    module.train()
    times = []
    for batch in batches:
        start = _now(device)
        work = move_data_to_device(module.step_work(batch), device)  # pieces cut on the CPU, as in training
        with _autocast(device, s.trainer["precision"]):
            loss = module.work_loss(work)
        scaler.scale(loss).backward()
        scaler.unscale_(optimizer)
        torch.nn.utils.clip_grad_norm_(module.parameters(), h.max_grad_norm)
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad()
        times.append(_now(device) - start)
        tick()
    module.eval()
    ordered = sorted(dev, key=lambda f: len(f["input_ids"]))  # dev batches are length-sorted:
    middle = max(0, len(ordered) // 2 - EVAL_BATCH // 2)  # time one of median length
    dev_batch = move_data_to_device(task.collate(ordered[middle : middle + EVAL_BATCH]), device)
    with torch.no_grad(), _autocast(device, s.trainer["precision"]):
        start = _now(device)
        module.loss(dev_batch)
        eval_time = _now(device) - start
    tick()
    return statistics.median(times[1:]), eval_time


def _now(device: torch.device) -> float:
    """The time once the device has done what was queued (a GPU runs asynchronously)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return time.perf_counter()


def _autocast(device: torch.device, precision: str) -> Any:
    """Lightning's autocast for a mixed `precision` (none at full precision)."""
    import contextlib

    from suite.model.optim import AUTOCAST_DTYPES

    if precision not in AUTOCAST_DTYPES:
        return contextlib.nullcontext()
    return torch.autocast(device.type, dtype=AUTOCAST_DTYPES[precision])


def _cycle(loader: Any, n: int) -> list[Any]:
    """The first `n` batches, starting over when a tiny training set has fewer."""
    out: list[Any] = []
    while len(out) < n:
        out += [b for _, b in zip(range(n - len(out)), loader, strict=False)]
    return out
