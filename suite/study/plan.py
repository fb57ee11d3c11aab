"""A study's plan as a queue: every planned (setting, size, seeds) of (task, model, sweep, profile)
queued once in the Optuna storage, what the storage holds of it, and its trials' records.

The `run` command is the only planner: it enqueues every planned trial the storage does not hold
yet. Workers only pop queued trials (suite/study/work.py), so each planned trial runs once however
many workers share the storage. A worker that dies mid-trial stops sending heartbeats; the next
worker to look re-queues its trial (same hyperparameters and seeds). TPE settings cannot be
planned up front: a worker with an empty queue asks the sampler for a new setting, runs its first
seed replicate and queues the others.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import TYPE_CHECKING, Any

import optuna
from optuna.trial import TrialState

from suite.config.sweep import SweepSpec, seed_grid
from suite.config.task import TaskSpec
from suite.errors import SuiteError
from suite.study.records import final_records, outcome
from suite.study.storage import open_storage

if TYPE_CHECKING:  # the trial module imports torch and Lightning: `run`'s waiting process needs neither
    from suite.training.trial import TrialPlan


def replicate_plans(task: TaskSpec, sweep: SweepSpec, values: dict[str, Any]) -> list[TrialPlan]:
    """One setting at every size on the sweep's seed grid."""
    from suite.training.trial import Seeds, TrialPlan

    hparams = sweep.hparams_for(values)
    return [TrialPlan(size, hparams, Seeds(*s)) for size in task.sizes for s in seed_grid(sweep.seeds)]


def plan_trials(task: TaskSpec, sweep: SweepSpec) -> list[TrialPlan]:
    """Every planned trial of a non-adaptive sweep, in a fixed order."""
    return [p for values in sweep.settings() for p in replicate_plans(task, sweep, values)]


def trial_attrs(plan: TrialPlan, values: dict[str, Any], attempt: int = 1) -> dict[str, Any]:
    """Everything a worker needs to run a planned trial, and the trial's full setting as flat
    scalars (`hp.lr`, `seed.init`, ...): optuna-dashboard shows those as sortable columns, while
    a trial's params are only its searched values (none at all in a seeds-only study)."""
    hparams, seeds = plan.hparams.as_record(), asdict(plan.seeds)
    return {
        "key": plan.key,
        "size": plan.size,
        "hparams": hparams,
        "seeds": seeds,
        "setting": values,
        "attempt": attempt,
        **{f"hp.{name}": value for name, value in hparams.items()},
        **{f"seed.{axis}": value for axis, value in seeds.items()},
    }


PROGRESS_ATTR = "progress"  # a running trial's progress (suite/study/progress.py): never planned again


def retry_attrs(trial: optuna.trial.FrozenTrial | optuna.Trial, attempt: int) -> dict[str, Any]:
    """A trial's plan to queue again (a retry): its attributes without its old record or progress."""
    kept = {k: v for k, v in trial.user_attrs.items() if k not in ("record", PROGRESS_ATTR)}
    return {**kept, "attempt": attempt}


def _record(trial: optuna.trial.FrozenTrial) -> dict[str, Any] | None:
    """The trial's record if it ended: a run or pruned trial is COMPLETE/PRUNED; an errored one
    is FAIL with its record. A FAIL without an errored record is a worker killed mid-trial
    (its record, if any, was written before the kill and is not trusted)."""
    record = trial.user_attrs.get("record")
    if record is None:
        return None
    if trial.state in (TrialState.COMPLETE, TrialState.PRUNED):
        return record
    if trial.state == TrialState.FAIL and outcome(record) == "errored":
        return record
    return None


def held_keys(trials: list[optuna.trial.FrozenTrial]) -> set[str]:
    """Planned keys the storage holds as a run, a queued or a running trial (not as an errored
    one: a rerun plans it again)."""
    return {
        t.user_attrs.get("key")
        for t in trials
        if t.state in (TrialState.WAITING, TrialState.RUNNING)
        or (r := _record(t)) is not None
        and outcome(r) != "errored"
    }


def enqueue_plan(study: optuna.Study, task: TaskSpec, sweep: SweepSpec) -> int:
    """Queue every planned trial the storage does not hold as a run, queued or running trial
    (an errored trial is planned again: a rerun after a fix continues); returns how many."""
    trials = study.get_trials(deepcopy=False)
    held = held_keys(trials)
    if sweep.adaptive:  # TPE's settings exist only in the storage: re-queue their errored trials
        keyed = [t for t in trials if "key" in t.user_attrs]
        todo = {t.user_attrs["key"]: t for t in keyed if t.user_attrs["key"] not in held}
        for t in todo.values():
            study.enqueue_trial(t.user_attrs["setting"], user_attrs=retry_attrs(t, 1), skip_if_exists=False)
        return len(todo)
    added = 0
    for values in sweep.settings():
        for plan in replicate_plans(task, sweep, values):
            if plan.key not in held:
                study.enqueue_trial(values, user_attrs=trial_attrs(plan, values), skip_if_exists=False)
                added += 1
    return added


def study_records(study: optuna.Study) -> list[dict[str, Any]]:
    """Every ended trial's record (every attempt), in trial order."""
    return [r for t in study.get_trials(deepcopy=False) if (r := _record(t)) is not None]


def finished_records(study: optuna.Study) -> dict[str, dict[str, Any]]:
    """The final record of each planned trial that ended (its run, else its errored attempt)."""
    return {r["key"]: r for r in final_records(study_records(study))}


def ended_runs(study: optuna.Study) -> dict[str, dict[str, Any]]:
    """The planned trials that ended as runs (or pruned), which no rerun runs again; an errored
    trial is not among them (a rerun retries it)."""
    return {k: r for k, r in finished_records(study).items() if outcome(r) != "errored"}


def planned_keys(study: optuna.Study) -> set[str]:
    return {t.user_attrs["key"] for t in study.get_trials(deepcopy=False) if "key" in t.user_attrs}


def export_studies(
    storage: str | optuna.storages.BaseStorage, study: str | None = None
) -> list[tuple[dict[str, Any], list[dict[str, Any]]]]:
    """(run info, every ended trial's record) of one study, or of every study in a storage."""
    storage = open_storage(storage) if isinstance(storage, str) else storage
    names = [study] if study else [s.study_name for s in optuna.get_all_study_summaries(storage)]
    out = []
    for name in names:
        try:
            loaded = optuna.load_study(study_name=name, storage=storage)
        except KeyError:
            raise SuiteError(f"--study {name!r}: no such study in this storage") from None
        out.append((loaded.user_attrs.get("run_info", {}), study_records(loaded)))
    return out
