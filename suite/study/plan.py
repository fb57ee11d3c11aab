"""A study's plan as a queue: every planned (setting, size, seeds) of (task, model, sweep, profile)
queued once in the Optuna storage, what the storage holds of it, and its trials' records.

The `run` command is the only planner: it enqueues every planned trial the storage does not hold
yet. Workers only pop queued trials (suite/study/work.py), so each planned trial runs once however
many workers share the storage. A worker that dies mid-trial stops sending heartbeats; the next
worker to look re-queues its trial (same hyperparameters and seeds). TPE settings cannot be
planned up front: a worker with an empty queue asks the sampler for a new setting, runs its first
seed replicate and queues the others. Random and QMC settings are drawn once, when the study is
created, and kept in its run info. Each run is planned once: size `full` trains on every example
whatever the subsample seed, so it has one (subsample 0).
"""

from __future__ import annotations

import json
from dataclasses import asdict
from typing import Any

import numpy as np
import optuna
from optuna.trial import TrialState

from suite.config.sweep import SweepSpec, seed_grid
from suite.config.task import TaskSpec
from suite.errors import SuiteError
from suite.study.records import WHOLE_SET, final_records, outcome, repeated_runs, run_key
from suite.study.repeated_errors import PLAN_EPOCH_ATTR, plan_epoch
from suite.study.storage import open_storage
from suite.study.stored_records import ended_record, rdb_records
from suite.training.trial_plan import Seeds, TrialPlan  # plain dataclasses: no torch, no Lightning


def replicate_seeds(sweep: SweepSpec, size: int | str) -> list[tuple[int, int, int]]:
    """(init, order, subsample) seeds of one setting at one size: the sweep's seed grid, except at
    `full`, which trains on every example whatever the subsample seed: there each (init, order)
    pair runs once, as subsample 0 (more subsample seeds would train the same run again)."""
    grid = list(seed_grid(sweep.seeds))
    if size != WHOLE_SET:
        return grid
    return [(init, order, 0) for init, order in dict.fromkeys((i, o) for i, o, _ in grid)]


def replicates(task: TaskSpec, sweep: SweepSpec) -> int:
    """Planned trials per setting (every size, its seeds)."""
    return sum(len(replicate_seeds(sweep, size)) for size in task.sizes)


def replicate_plans(task: TaskSpec, sweep: SweepSpec, values: dict[str, Any]) -> list[TrialPlan]:
    """One setting at every size on the sweep's seed grid."""
    hparams = sweep.hparams_for(values)
    return [TrialPlan(size, hparams, Seeds(*s)) for size in task.sizes for s in replicate_seeds(sweep, size)]


def plan_trials(
    task: TaskSpec, sweep: SweepSpec, stored: list[dict[str, Any]] | None = None
) -> list[TrialPlan]:
    """Every planned trial of a non-adaptive sweep, in a fixed order, each once (`stored`: the
    settings its study drew, see `planned_settings`)."""
    plans = (p for values in planned_settings(sweep, stored) for p in replicate_plans(task, sweep, values))
    return list({p.key: p for p in plans}.values())  # random draws of a small space can repeat


def _drawn(sweep: SweepSpec) -> bool:
    """Settings drawn by a sampler up front (random, QMC), not enumerated."""
    return sweep.sampler.type in ("random", "qmc") and bool(sweep.space) and not sweep.recipes


def planned_settings(sweep: SweepSpec, stored: list[dict[str, Any]] | None = None) -> list[dict[str, Any]]:
    """The settings a non-adaptive sweep plans. Random and QMC settings are drawn once, when
    their study is created, and stored with it (`stored`): they are re-planned from there, so
    another optuna or scipy, whose draws differ, never adds a second set to a stored study; a
    grown budget draws only the settings past the stored ones."""
    if stored is None or not _drawn(sweep):
        return sweep.settings()
    if len(stored) >= (sweep.budget or 0):
        return stored[: sweep.budget]
    return stored + sweep.settings()[len(stored) :]


SETTINGS = "settings"  # run info: a random or QMC study's settings, as drawn when it was created


def study_settings(study: optuna.Study, sweep: SweepSpec) -> list[dict[str, Any]] | None:
    """The settings a random or QMC study stored (None: another sampler, or none stored yet). A
    study stored before its settings were holds them in its trials: the first time each appears."""
    if not _drawn(sweep):
        return None
    stored = (study.user_attrs.get("run_info") or {}).get(SETTINGS)
    if stored is not None:
        return stored
    held = (t.user_attrs["setting"] for t in study.get_trials(deepcopy=False) if "setting" in t.user_attrs)
    return list({json.dumps(v, sort_keys=True): v for v in held}.values()) or None


def _store_settings(study: optuna.Study, settings: list[dict[str, Any]]) -> None:
    """Keep a random or QMC study's settings in its run info: drawn at its creation, extended
    when its budget grows (never re-drawn)."""
    info = study.user_attrs.get("run_info")
    if info is not None and len(settings) > len(info.get(SETTINGS) or []):
        study.set_user_attr("run_info", {**info, SETTINGS: settings})


def proposing_sampler(sweep: SweepSpec, proposed: int) -> optuna.samplers.BaseSampler:
    """TPE's sampler for a study's next setting, seeded by how many it has proposed: a process's
    seeded sampler starts its stream over, so a grown budget, a resumed study or another worker
    would otherwise propose the study's first setting again."""
    base = sweep.sampler.seed if sweep.sampler.seed is not None else sweep.seeds.master
    seed = int(np.random.SeedSequence([base, proposed]).generate_state(1)[0] % 2**31)
    reseeded = sweep.sampler.model_copy(update={"seed": seed})
    return sweep.model_copy(update={"sampler": reseeded}).make_sampler()


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
    """The trial's record if it ended (`stored_records.ended_record`)."""
    return ended_record(trial.state.name, trial.user_attrs.get("record"))


def held_keys(trials: list[optuna.trial.FrozenTrial]) -> set[str]:
    """Planned runs (keys, `records.run_key`) the storage holds as a run, a queued or a running
    trial (not as an errored one: a rerun plans it again)."""
    return {
        run_key(t.user_attrs.get("key"))
        for t in trials
        if t.state in (TrialState.WAITING, TrialState.RUNNING)
        or (r := _record(t)) is not None
        and outcome(r) != "errored"
    }


def enqueue_plan(study: optuna.Study, task: TaskSpec, sweep: SweepSpec) -> int:
    """Queue every planned trial the storage does not hold as a run, queued or running trial
    (an errored trial is planned again: a rerun after a fix continues, and the errors before it
    stop nothing, `suite.study.repeated_errors`); returns how many."""
    trials = study.get_trials(deepcopy=False)
    held = held_keys(trials)
    fresh_attempts(study, trials)
    if sweep.adaptive:  # TPE's settings exist only in the storage: re-queue their errored trials
        keyed = [t for t in trials if "key" in t.user_attrs]
        todo = {run_key(t.user_attrs["key"]): t for t in keyed if run_key(t.user_attrs["key"]) not in held}
        for t in todo.values():
            study.enqueue_trial(t.user_attrs["setting"], user_attrs=retry_attrs(t, 1), skip_if_exists=False)
        return len(todo)
    settings = planned_settings(sweep, study_settings(study, sweep))
    if _drawn(sweep):
        _store_settings(study, settings)
    added = 0
    for values, plan in seed_major(settings, [replicate_plans(task, sweep, v) for v in settings]):
        if plan.key not in held:
            study.enqueue_trial(values, user_attrs=trial_attrs(plan, values), skip_if_exists=False)
            held.add(plan.key)
            added += 1
    return added


def seed_major(
    settings: list[dict[str, Any]], plans: list[list[TrialPlan]]
) -> list[tuple[dict[str, Any], TrialPlan]]:
    """Each setting's plans, queued seed by seed: the trials that share a (size, seeds) cell across
    settings or recipes sit next to each other, so a study stopped partway holds complete pairs
    (every setting runs the same seed grid, so a plan's place in its setting's list is its cell)."""
    cells = [
        (place, values, plan)
        for values, own in zip(settings, plans, strict=True)
        for place, plan in enumerate(own)
    ]
    return [(values, plan) for _, values, plan in sorted(cells, key=lambda cell: cell[0])]


def fresh_attempts(study: optuna.Study, trials: list[optuna.trial.FrozenTrial]) -> None:
    """A rerun after errors, with no trial running (another `run` of the study is not a rerun):
    the errors before it stop nothing any more (a new plan epoch), and the retries still queued
    start again at their first attempt, as the errored trials this plan queues again do."""
    errored = any(
        t.state == TrialState.FAIL and outcome(t.user_attrs.get("record") or {}) == "errored" for t in trials
    )
    if not errored or any(t.state == TrialState.RUNNING for t in trials):
        return
    study.set_user_attr(PLAN_EPOCH_ATTR, plan_epoch(study) + 1)
    for t in trials:
        if t.state == TrialState.WAITING and t.user_attrs.get("attempt", 1) > 1:
            study._storage.set_trial_user_attr(t._trial_id, "attempt", 1)


def note_repeated_runs(study: optuna.Study) -> str | None:
    """A line saying that a stored study holds runs at `full` trained under several subsample
    seeds (planned before `full` was planned once): they are read once. Kept in its run info."""
    repeated = repeated_runs(study_records(study))
    if not repeated:
        return None
    info = study.user_attrs.get("run_info")
    if info is not None and info.get("repeated_runs") != repeated:
        study.set_user_attr("run_info", {**info, "repeated_runs": repeated})
    return (
        f"note: {repeated} stored runs at size {WHOLE_SET} repeat another run under another subsample "
        "seed (the same examples): each run is counted once"
    )


Trials = list[optuna.trial.FrozenTrial]


def study_records(study: optuna.Study, trials: Trials | None = None) -> list[dict[str, Any]]:
    """Every ended trial's record (every attempt), in trial order: from an RDB storage's tables
    in one query (`stored_records`), else from the study's trials. Given `trials` (read by the
    caller), from those: a watcher that looks again and again reads Optuna's cached ended trials,
    where the one query parses every record each time."""
    if trials is None:
        found = rdb_records(study)
        if found is not None:
            return found
        trials = study.get_trials(deepcopy=False)
    return [r for t in trials if (r := _record(t)) is not None]


def finished_records(study: optuna.Study, trials: Trials | None = None) -> dict[str, dict[str, Any]]:
    """The final record of each planned trial that ended (its run, else its errored attempt)."""
    return {r["key"]: r for r in final_records(study_records(study, trials))}


def ended_runs(study: optuna.Study, trials: Trials | None = None) -> dict[str, dict[str, Any]]:
    """The planned trials that ended as runs (or pruned), which no rerun runs again; an errored
    trial is not among them (a rerun retries it)."""
    return {k: r for k, r in finished_records(study, trials).items() if outcome(r) != "errored"}


def planned_keys(study: optuna.Study) -> set[str]:
    """The planned runs the storage holds trials of (`records.run_key`)."""
    return {run_key(t.user_attrs["key"]) for t in study.get_trials(deepcopy=False) if "key" in t.user_attrs}


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
