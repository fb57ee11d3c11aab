"""A study: the planned trials of (task, model, sweep, profile) as a queue in an Optuna storage,
run by one or many workers, and exported as records.

The `run` command is the only planner: it enqueues every planned (setting, size, seeds) that
the storage does not hold yet. Workers only pop queued trials, so each planned trial runs
once however many workers share the storage. A worker that dies mid-trial stops sending
heartbeats; the next worker to look re-queues its trial (same hyperparameters and seeds).
TPE settings cannot be planned up front: a worker with an empty queue asks the sampler for a
new setting, runs its first seed replicate and queues the others.
"""

from __future__ import annotations

import json
import os
import re
import time
import warnings
from dataclasses import asdict
from pathlib import Path
from typing import Any

import optuna
from optuna.storages import RetryHeartbeatStaleTrialCallback
from optuna.trial import TrialState

from suite.errors import SuiteError
from suite.faults import reach
from suite.heads.registry import PreparedTask
from suite.records import final_records, outcome
from suite.spec import TaskSpec
from suite.sweep import SweepSpec, seed_grid
from suite.trial import Seeds, TrialPlan, run_trial
from suite.trial_queue import fail_dead_trials, pop_planned, queue_lock

# Heartbeats, stale-trial retry and QMC are marked experimental by Optuna; they are what a
# shared study needs, so their warnings are silenced here once.
warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)

HEARTBEAT_ENV = "SUITE_HEARTBEAT_S"  # seconds between heartbeats; stale after 3 missed


def model_slug(model: str) -> str:
    name = Path(model).name if "/" in model and Path(model).exists() else model
    return re.sub(r"[^A-Za-z0-9._-]+", "_", name)


def run_folder(out: Path, task: TaskSpec, model: str) -> Path:
    return out / task.name / model_slug(model)


def sqlite_url(folder: Path) -> str:
    return f"sqlite:///{Path(folder).resolve() / 'study.db'}"


def storage_of(source: str | Path) -> str:
    """A storage URL as given, or the storage behind a run folder (its study.db, else the URL
    its run.json names)."""
    text = str(source)
    if "://" in text or text.startswith("journal:"):
        return text
    folder = Path(source)
    if (folder / "study.db").is_file():
        return sqlite_url(folder)
    info = folder / "run.json"
    if info.is_file() and "***" not in (url := json.loads(info.read_text()).get("storage", "***")):
        return url
    raise SuiteError(f"{folder}: no study.db here (expected a runs/<task>/<model> folder or a storage URL)")


def public_url(url: str) -> str:
    """A storage URL without its password, for records and messages."""
    return re.sub(r"//([^:/@]+):[^@]*@", r"//\1:***@", url)


def open_storage(url: str) -> optuna.storages.BaseStorage:
    """An RDB URL (sqlite, postgresql, mysql) with heartbeats, or `journal:PATH` for a journal file."""
    if url.startswith("journal:"):
        from optuna.storages.journal import JournalFileBackend, JournalStorage

        return JournalStorage(JournalFileBackend(url.removeprefix("journal:")))
    if not url.startswith(("sqlite:", "postgresql", "mysql")):
        raise SuiteError(
            f"--storage {public_url(url)!r}: expected sqlite:///, postgresql://, mysql:// or journal:PATH"
        )
    heartbeat = int(os.environ.get(HEARTBEAT_ENV, "30"))
    engine = {"connect_args": {"timeout": 60}} if url.startswith("sqlite") else {"pool_pre_ping": True}
    try:
        return optuna.storages.RDBStorage(
            url,
            engine_kwargs=engine,
            heartbeat_interval=heartbeat,
            grace_period=3 * heartbeat,
            heartbeat_stale_trial_callback=RetryHeartbeatStaleTrialCallback(max_retry=3),
        )
    except Exception as err:  # SQLAlchemy raises many kinds for a bad URL or a down server
        raise SuiteError(f"--storage {public_url(url)!r}: cannot open ({str(err).splitlines()[0]})") from None


def open_study(
    storage: optuna.storages.BaseStorage, name: str, sweep: SweepSpec, maximize: bool
) -> optuna.Study:
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    return optuna.create_study(
        storage=storage,
        study_name=name,
        direction="maximize" if maximize else "minimize",
        sampler=sweep.make_sampler(),
        pruner=sweep.make_pruner(),
        load_if_exists=True,
    )


def replicate_plans(task: TaskSpec, sweep: SweepSpec, values: dict[str, Any]) -> list[TrialPlan]:
    """One setting at every size on the sweep's seed grid."""
    hparams = sweep.hparams_for(values)
    return [TrialPlan(size, hparams, Seeds(*s)) for size in task.sizes for s in seed_grid(sweep.seeds)]


def plan_trials(task: TaskSpec, sweep: SweepSpec) -> list[TrialPlan]:
    """Every planned trial of a non-adaptive sweep, in a fixed order."""
    return [p for values in sweep.settings() for p in replicate_plans(task, sweep, values)]


MAX_ATTEMPTS = 2  # an errored trial is retried once with the same seeds


def _attrs(plan: TrialPlan, values: dict[str, Any], attempt: int = 1) -> dict[str, Any]:
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


def _planned_attrs(trial: optuna.trial.FrozenTrial | optuna.Trial, attempt: int) -> dict[str, Any]:
    """A trial's plan to queue again (a retry): its attributes without its old record."""
    return {**{k: v for k, v in trial.user_attrs.items() if k != "record"}, "attempt": attempt}


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
            study.enqueue_trial(
                t.user_attrs["setting"], user_attrs=_planned_attrs(t, 1), skip_if_exists=False
            )
        return len(todo)
    added = 0
    for values in sweep.settings():
        for plan in replicate_plans(task, sweep, values):
            if plan.key not in held:
                study.enqueue_trial(values, user_attrs=_attrs(plan, values), skip_if_exists=False)
                added += 1
    return added


def _propose(study: optuna.Study, task: TaskSpec, sweep: SweepSpec) -> optuna.Trial:
    """TPE: a new setting from the sampler; this trial runs its first replicate, the rest queue."""
    trial = study.ask({k: p.distribution() for k, p in sweep.space.items()})
    if "key" in trial.user_attrs:  # another worker queued trials meanwhile: run that one
        return trial
    values = dict(trial.params)
    first, *rest = replicate_plans(task, sweep, values)
    for name, value in _attrs(first, values).items():
        trial.set_user_attr(name, value)
    for plan in rest:
        study.enqueue_trial(values, user_attrs=_attrs(plan, values), skip_if_exists=False)
    return trial


def _settings_proposed(trials: list[optuna.trial.FrozenTrial]) -> int:
    return len(
        {json.dumps(t.user_attrs.get("setting"), sort_keys=True) for t in trials if "key" in t.user_attrs}
    )


def work(
    study: optuna.Study,
    task: PreparedTask,
    model: str,
    sweep: SweepSpec,
    stamp: dict[str, Any],
    trainer: dict[str, Any] | None = None,
    progress: bool = True,
    on_done: Any = None,
) -> int:
    """Run queued trials until the study is complete; returns how many this worker ran.

    Waits while other workers' trials are running: a dead worker's trial turns stale after its
    grace period and comes back to the queue.
    """
    from optuna.storages._heartbeat import get_heartbeat_thread  # the heartbeat optimize() uses

    ran = 0
    heartbeat = int(os.environ.get(HEARTBEAT_ENV, "30"))
    while True:
        fail_dead_trials(study)
        with queue_lock(study):
            trial = pop_planned(study)
            trials = study.get_trials(deepcopy=False)
            if trial is None and sweep.adaptive and _settings_proposed(trials) < sweep.budget:
                trial = _propose(study, task.spec, sweep)
        if trial is None:
            if any(t.state == TrialState.RUNNING for t in trials):
                time.sleep(min(heartbeat, 5))
                continue
            return ran
        with get_heartbeat_thread(trial._trial_id, study._storage):
            try:
                record = _run_one(trial, task, model, sweep, stamp, trainer, progress)
            except SuiteError as err:  # a user error inside a trial stops the study, not a run
                trial.set_user_attr("record", {**trial.user_attrs, "outcome": "errored", "reason": str(err)})
                study.tell(trial, state=TrialState.FAIL)
                raise
        _tell(study, trial, record, task.baseline[task.spec.metric.main])
        if outcome(record) == "errored" and record["attempt"] < MAX_ATTEMPTS:
            attrs = _planned_attrs(trial, record["attempt"] + 1)
            study.enqueue_trial(attrs["setting"], user_attrs=attrs, skip_if_exists=False)
        ran += 1
        if on_done is not None:
            on_done(record)


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
    record = run_trial(task, model, plan, progress=progress, trainer=trainer, pruning_trial=pruning)
    return {**record, **stamp, "trial_number": trial.number, "attempt": attrs.get("attempt", 1)}


def _tell(study: optuna.Study, trial: optuna.Trial, record: dict[str, Any], baseline: float) -> None:
    """Samplers learn from runs only: a diverged run is told as the trivial baseline's score
    (a poor result), an errored trial as FAIL (Optuna's samplers skip it)."""
    trial.set_user_attr("record", record)
    kind = outcome(record)
    if kind == "pruned":
        study.tell(trial, state=TrialState.PRUNED)
    elif kind == "errored":
        study.tell(trial, state=TrialState.FAIL)
    else:
        study.tell(trial, record["score"] if record["score"] is not None else baseline)


def study_records(study: optuna.Study) -> list[dict[str, Any]]:
    """Every ended trial's record (every attempt), in trial order."""
    return [r for t in study.get_trials(deepcopy=False) if (r := _record(t)) is not None]


def finished_records(study: optuna.Study) -> dict[str, dict[str, Any]]:
    """The final record of each planned trial that ended (its run, else its errored attempt)."""
    return {r["key"]: r for r in final_records(study_records(study))}


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


def write_jsonl(path: Path, records: list[dict[str, Any]]) -> None:
    """Atomic write: a crash mid-write never leaves a truncated trials file."""
    write_atomic(path, "".join(json.dumps(r, sort_keys=True) + "\n" for r in records))


def write_atomic(path: Path, text: str) -> None:
    """Write a temporary file beside `path`, then rename it into place; a full disk or an
    unwritable folder is one line naming the file."""
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    try:
        tmp.write_text(text, encoding="utf-8")
        reach("outputs_write")
        os.replace(tmp, path)
    except OSError as err:
        tmp.unlink(missing_ok=True)
        raise SuiteError(
            f"{path}: cannot write ({err.strerror or err}); the trials are kept in the "
            "storage: rerun the same command after the fix to write the outputs"
        ) from None
