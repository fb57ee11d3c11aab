"""A worker's loop: pop a queued trial, run it with a heartbeat, tell the study its outcome, retry
an errored trial once with the same seeds; TPE studies propose new settings when the queue is empty.

Waits while other workers' trials are running: a dead worker's trial turns stale after its grace
period and comes back to the queue.
"""

from __future__ import annotations

import functools
import json
import os
import sys
from collections.abc import Callable
from typing import Any

import optuna
from optuna.trial import FrozenTrial, TrialState

from suite.config.sweep import SweepSpec
from suite.config.task import TaskSpec
from suite.errors import SuiteError
from suite.faults import reach
from suite.heads.registry import PreparedTask
from suite.study.memory import release, reset_peak, trimming
from suite.study.pending import Keeping, keeping_for, tell_or_keep
from suite.study.plan import held_keys, proposing_sampler, replicate_plans, retry_attrs, trial_attrs
from suite.study.queue import fail_dead_trials, pop_planned, queue_lock
from suite.study.records import outcome, run_key, short_key
from suite.study.repeated_errors import PLAN_EPOCH_ATTR, Stop, plan_epoch, study_stops
from suite.study.resume import note_stack
from suite.study.storage import HEARTBEAT_ENV
from suite.study.supervise import WORKER_ATTR, idle_wait, stop_point, stops_allowed, stops_held
from suite.study.trial_progress import TakenOver, TrialProgress
from suite.training.trial import run_trial
from suite.training.trial_plan import Seeds, TrialPlan

MAX_ATTEMPTS = 2  # an errored trial is retried once with the same seeds


REPEATED_ATTR = "repeated_setting"  # a TPE proposal of a setting the study holds: failed, never run
MAX_PROPOSALS = 100  # proposals in a row that repeat held settings before giving up


def _propose(study: optuna.Study, task: TaskSpec, sweep: SweepSpec) -> optuna.Trial:
    """TPE: a new setting from the sampler; this trial runs its first replicate, the rest queue.
    A proposal of a setting the study holds is failed without a key (nothing reads it as a run)
    and the sampler, seeded by the proposals made, proposes again."""
    for _ in range(MAX_PROPOSALS):
        trials = study.get_trials(deepcopy=False)
        study.sampler = proposing_sampler(sweep, proposals_made(trials))
        trial = study.ask({k: p.distribution() for k, p in sweep.space.items()})
        if "key" in trial.user_attrs:  # another worker queued trials meanwhile: run that one
            return trial
        values = dict(trial.params)
        first, *rest = replicate_plans(task, sweep, values)
        if {run_key(p.key) for p in (first, *rest)} & held_keys(trials):
            trial.set_user_attr(REPEATED_ATTR, values)
            study.tell(trial, state=TrialState.FAIL)
            continue
        for name, value in trial_attrs(first, values).items():
            trial.set_user_attr(name, value)
        for plan in rest:
            study.enqueue_trial(values, user_attrs=trial_attrs(plan, values), skip_if_exists=False)
        return trial
    raise SuiteError(
        f"sweep {sweep.name}: TPE proposed {MAX_PROPOSALS} settings in a row that the study already "
        "holds; lower its budget"
    )


def settings_proposed(trials: list[optuna.trial.FrozenTrial]) -> int:
    return len(
        {json.dumps(t.user_attrs.get("setting"), sort_keys=True) for t in trials if "key" in t.user_attrs}
    )


def proposals_made(trials: list[optuna.trial.FrozenTrial]) -> int:
    """The sampler's seed: distinct settings plus repeated proposals (a repeat must not leave it
    unchanged, or the next proposal would be the same setting again)."""
    return settings_proposed(trials) + sum(REPEATED_ATTR in t.user_attrs for t in trials)


def _stopped_by(stops: list[Stop]) -> Callable[[FrozenTrial], bool] | None:
    """The queued trials a worker must not take: those a repeated error covers (None: none)."""
    if not stops:
        return None
    return lambda trial: any(stop.covers(trial) for stop in stops)


def _freeing_memory(loop: Any) -> Any:
    """Around a worker's loop: what the setup's checks left (the pre-flight's model copy and
    features) freed first, and free heap pages handed back every few seconds while it trains."""

    @functools.wraps(loop)
    def wrapped(*args: Any, **kwargs: Any) -> Any:
        release()
        with trimming():
            return loop(*args, **kwargs)

    return wrapped


@_freeing_memory
def work(
    study: optuna.Study,
    task: PreparedTask,
    model: str,
    sweep: SweepSpec,
    stamp: dict[str, Any],
    trainer: dict[str, Any] | None = None,
    progress: bool = True,
    on_done: Any = None,
    tracking: Any = None,
    keeping: Keeping | None = None,
) -> int:
    """Run queued trials until the study is complete; returns how many this worker ran.
    `tracking` (suite/study/trackers.py) logs each ended trial to the `--log-to` trackers;
    `keeping`: where a record the storage would not take is kept, for which study (suite/study/pending.py).

    Waits while other workers' trials are running: a dead worker's trial turns stale after its
    grace period and comes back to the queue. Each trial's objects are freed before the next one
    starts, and free heap pages go back to the system while it trains (suite/study/memory.py).
    """
    from optuna.storages._heartbeat import get_heartbeat_thread  # the heartbeat optimize() uses

    from suite.study.lock import storage_url

    ran = 0
    heartbeat = int(os.environ.get(HEARTBEAT_ENV, "30"))
    keeping = keeping or keeping_for(study, storage_url(study._storage), None)  # before a write can fail
    baseline = task.baseline[task.spec.metric.main]
    with stops_held():  # a stop lands while a trial trains or while this worker waits, never mid-pop
        while True:
            trial = None
            try:  # from the pop until the study is told: a stop anywhere in between puts the trial back
                stop_point()  # a stop held during the last outcome: take no new trial
                with queue_lock(study):
                    fail_dead_trials(study)
                    trials = study.get_trials(deepcopy=False)  # read under the lock: no pop or tell between
                    stops = study_stops(study, trials)  # what errors that repeat stopped: never started again
                    trial = pop_planned(study, _stopped_by(stops))
                    # TPE proposes no setting past a stop: it could fall in the stop's scope, and
                    # Optuna's ask() would pop a stopped trial first.
                    proposing = sweep.adaptive and not stops
                    if trial is None and proposing and settings_proposed(trials) < sweep.budget:
                        trial = _propose(study, task.spec, sweep)
                    if trial is not None and stamp.get("worker"):  # `run` names it if this worker dies
                        study._storage.set_trial_system_attr(trial._trial_id, WORKER_ATTR, stamp["worker"])
                if trial is None:
                    if not any(t.state == TrialState.RUNNING for t in trials):
                        return ran
                    with stops_allowed():
                        idle_wait(min(heartbeat, 5))
                    continue
                with get_heartbeat_thread(trial._trial_id, study._storage):
                    try:
                        with stops_allowed():
                            record = _run_one(trial, task, model, sweep, stamp, trainer, progress)
                    except TakenOver:  # another worker runs it again: nothing to tell
                        print(taken_over_line(trial), file=sys.stderr, flush=True)
                        continue
                    except SuiteError as err:  # a user error inside a trial stops the study, not a run
                        attrs = retry_attrs(trial, trial.user_attrs.get("attempt", 1))
                        trial.set_user_attr("record", {**attrs, "outcome": "errored", "reason": str(err)})
                        study.tell(trial, state=TrialState.FAIL)
                        raise
                    finally:
                        release()  # before the next trial builds its module, optimizer and trainer
                reach("tell", trial.user_attrs["key"])
                tell_or_keep(study, trial, record, baseline, conclude, keeping)  # a failed write: kept
            except (KeyboardInterrupt, SystemExit) as err:  # Lightning turns Ctrl-C into SystemExit(1)
                if trial is not None and not study._storage.get_trial(trial._trial_id).state.is_finished():
                    _put_back(study, trial)
                raise Interrupted(ran) from err
            ran += 1
            if tracking is not None:  # from the stored record: the trial's numbers are already final
                tracking.log_trial(record)
            if on_done is not None:
                on_done(record)


class Interrupted(KeyboardInterrupt):
    """Ctrl-C (or SIGINT from the process that started this worker) while a trial ran: its trial
    went back to the queue, so rerunning the same command resumes it with the same seeds."""

    def __init__(self, ran: int) -> None:
        super().__init__(f"interrupted after {ran} trial(s) of this worker")
        self.ran = ran


def taken_over_line(trial: optuna.Trial) -> str:
    return (
        f"trial {trial.number} ({short_key(trial.user_attrs['key'])}) was taken over after a missed "
        "heartbeat; its result is discarded"
    )


def _put_back(study: optuna.Study, trial: optuna.Trial) -> None:
    """An interrupted trial is no outcome: fail it without a record (so nothing reads it as a run)
    and queue the same plan again, at the same attempt (one step under the lock: a planner between
    the two would queue it too)."""
    with queue_lock(study):
        study.tell(trial, state=TrialState.FAIL)
        attrs = retry_attrs(trial, trial.user_attrs.get("attempt", 1))
        study.enqueue_trial(attrs["setting"], user_attrs=attrs, skip_if_exists=False)


def _run_one(
    trial: optuna.Trial,
    task: PreparedTask,
    model: str,
    sweep: SweepSpec,
    stamp: dict[str, Any],
    trainer: dict[str, Any] | None,
    progress: bool,
) -> dict[str, Any]:
    attrs = trial.user_attrs
    for name, param in sweep.space.items():  # register the params so samplers learn from every trial
        param.suggest(trial, name)
    plan = TrialPlan(attrs["size"], sweep.hparams_for(attrs["setting"]), Seeds(**attrs["seeds"]))
    pruning = trial if sweep.pruner.type != "none" else None
    watch = [TrialProgress(trial, task.spec.metric.main)]
    reach("trial", attrs["key"])
    reset_peak()  # the record's peak_rss_mb: this trial's own
    record = run_trial(task, model, plan, progress, trainer, pruning, callbacks=watch)
    return {**record, **stamp, "trial_number": trial.number, "attempt": attrs.get("attempt", 1)}


def conclude(study: optuna.Study, trial: optuna.Trial, record: dict[str, Any], baseline: float) -> None:
    """A finished trial told and, if errored, queued again: one step for a planner, under the
    study's lock (the worker's, or the next `run`'s for a record kept in a side file). Its stack
    first: a study never holds a trial of a stack it does not list."""
    if record.get("stack"):
        note_stack(study, record["stack"])
    _tell(study, trial, record, baseline)
    if outcome(record) == "errored" and record["attempt"] < MAX_ATTEMPTS:
        attrs = retry_attrs(trial, record["attempt"] + 1)
        study.enqueue_trial(attrs["setting"], user_attrs=attrs, skip_if_exists=False)


def _tell(study: optuna.Study, trial: optuna.Trial, record: dict[str, Any], baseline: float) -> None:
    """Samplers learn from runs only: a diverged run is told as the trivial baseline's score
    (a poor result), an errored trial as FAIL (Optuna's samplers skip it). Called under the
    study's lock: a trial another worker failed as stale meanwhile (this one's heartbeat was late)
    was queued again as a twin; the record is told on that twin, so it is not trained again."""
    if study._storage.get_trial(trial._trial_id).state.is_finished():
        trial = _claim_twin(study, trial)
        if trial is None:  # another worker already runs it again (or told it): its record will come
            return
    kind = outcome(record)
    if kind == "errored":  # which plan's errors it counts among (suite.study.repeated_errors)
        record = {**record, PLAN_EPOCH_ATTR: plan_epoch(study)}
    trial.set_user_attr("record", record)
    if kind == "pruned":
        study.tell(trial, state=TrialState.PRUNED)
    elif kind == "errored":
        study.tell(trial, state=TrialState.FAIL)
    else:
        study.tell(trial, record["score"] if record["score"] is not None else baseline)


def _claim_twin(study: optuna.Study, trial: optuna.Trial) -> optuna.Trial | None:
    """The queued copy of a trial that was failed as stale and queued again, taken off the queue
    (None when no copy waits)."""
    key, attempt = trial.user_attrs["key"], trial.user_attrs.get("attempt", 1)
    for twin in study.get_trials(deepcopy=False, states=(TrialState.WAITING,)):
        if twin.user_attrs.get("key") == key and twin.user_attrs.get("attempt", 1) == attempt:
            try:
                if study._storage.set_trial_state_values(twin._trial_id, state=TrialState.RUNNING):
                    return optuna.Trial(study, twin._trial_id)
            except optuna.exceptions.UpdateFinishedTrialError:
                continue
    return None
