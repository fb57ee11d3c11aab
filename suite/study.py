"""A study: the planned trials of (task, model, sweep, profile), run through an Optuna
study kept in a SQLite file inside the run folder, then written out as trials.jsonl."""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator
from itertools import product
from pathlib import Path
from typing import Any

import numpy as np
import optuna
from tqdm.auto import tqdm

from suite.heads.registry import PreparedTask
from suite.spec import HParams, SeedSpec, Size, SweepSpec, TaskSpec
from suite.trial import Seeds, TrialPlan, run_trial

# Seed axes, so each axis draws its own stream from the master seed.
_AXES = {"init": 1, "order": 2, "subsample": 3}


def child_seed(master: int, axis: str, index: int) -> int:
    """The `index`-th seed of one axis; adding replicates never changes earlier seeds."""
    return int(np.random.SeedSequence([master, _AXES[axis], index]).generate_state(1)[0] % 2**31)


def seed_grid(seeds: SeedSpec) -> Iterator[Seeds]:
    """(init, order) pairs: independent draws, or the crossed init x order grid."""
    if seeds.design == "crossed":
        pairs = product(range(seeds.init), range(seeds.order))
    else:
        pairs = ((i, i) for i in range(seeds.replicates))
    pairs = list(pairs)
    for sub in range(seeds.subsample):
        for i, o in pairs:
            yield Seeds(
                init=child_seed(seeds.master, "init", i),
                order=child_seed(seeds.master, "order", o),
                subsample=child_seed(seeds.master, "subsample", sub),
            )


def plan_trials(task: TaskSpec, sweep: SweepSpec) -> list[TrialPlan]:
    return [
        TrialPlan(size=size, hparams=sweep.hparams, seeds=seeds)
        for size in task.sizes
        for seeds in seed_grid(sweep.seeds)
    ]


def model_slug(model: str) -> str:
    name = Path(model).name if "/" in model and Path(model).exists() else model
    return re.sub(r"[^A-Za-z0-9._-]+", "_", name)


def run_folder(out: Path, task: TaskSpec, model: str) -> Path:
    return out / task.name / model_slug(model)


def _storage(folder: Path) -> str:
    return f"sqlite:///{folder / 'study.db'}"


def _params(size: Size, hparams: HParams) -> dict[str, optuna.distributions.BaseDistribution]:
    """Each hyperparameter as a one-value distribution: the setting is fixed by the plan, and
    Optuna keeps it as the trial's params (seeds stay out: they are user attributes)."""
    values = {"size": size, **hparams.model_dump()}
    return {k: optuna.distributions.CategoricalDistribution([v]) for k, v in values.items()}


def finished_records(study: optuna.Study) -> dict[str, dict[str, Any]]:
    """Records of trials that ran to an end (scored or failed), keyed by plan key."""
    done = {}
    for t in study.get_trials(deepcopy=False):
        if t.state in (optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.FAIL):
            if "record" in t.user_attrs:
                done[t.user_attrs["key"]] = t.user_attrs["record"]
    return done


def run_study(
    task: PreparedTask,
    model: str,
    sweep: SweepSpec,
    folder: Path,
    study_name: str,
    info: dict[str, Any],
    progress: bool = True,
) -> list[dict[str, Any]]:
    """Run every planned trial not yet finished in the storage; return all records in plan order.

    `info` (provenance: specs, versions, data hashes) is kept on the study itself, so any
    storage can be exported and analysed without the run folder.
    """
    folder.mkdir(parents=True, exist_ok=True)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    direction = "maximize" if task.spec.metric.higher_is_better else "minimize"
    study = optuna.create_study(
        storage=_storage(folder), study_name=study_name, direction=direction, load_if_exists=True
    )
    if "run_info" not in study.user_attrs:  # the study's creation is its provenance
        study.set_user_attr("run_info", info)
    info = study.user_attrs["run_info"]
    (folder / "run.json").write_text(json.dumps(info, indent=2) + "\n", encoding="utf-8")
    stamp = {
        "study": study_name,
        "sweep": sweep.name,
        "profile": info.get("profile"),
        "eval_split": task.spec.eval_split,
    }
    plans = plan_trials(task.spec, sweep)
    done = finished_records(study)
    todo = [p for p in plans if p.key not in done]
    bar = tqdm(total=len(plans), initial=len(plans) - len(todo), desc="trials", disable=not progress)
    for plan in todo:
        trial = study.ask(_params(plan.size, plan.hparams))
        trial.set_user_attr("key", plan.key)
        trial.set_user_attr("seeds", vars(plan.seeds))
        record = {**run_trial(task, model, plan, progress=progress), **stamp}
        trial.set_user_attr("record", record)
        score = record.get("score")
        if score is None:
            study.tell(trial, state=optuna.trial.TrialState.FAIL)
        else:
            study.tell(trial, score)
        done[plan.key] = record
        bar.set_postfix_str(_postfix(record))
        bar.update()
    bar.close()
    write_jsonl(folder / "trials.jsonl", [r for _, rs in export_studies(_storage(folder)) for r in rs])
    return [done[p.key] for p in plans]


def export_studies(storage: str) -> list[tuple[dict[str, Any], list[dict[str, Any]]]]:
    """(run info, finished records in trial order) of every study in a storage."""
    out = []
    for summary in sorted(optuna.get_all_study_summaries(storage), key=lambda s: s._study_id):
        study = optuna.load_study(study_name=summary.study_name, storage=storage)
        records = finished_records(study)
        out.append((study.user_attrs.get("run_info", {}), list(records.values())))
    return out


def _postfix(record: dict[str, Any]) -> str:
    score = record.get("score")
    text = f"{record['metric']}={score:.3f}" if score is not None else "no score"
    return text + (" FAILED" if record.get("failed") else "")


def write_jsonl(path: Path, records: list[dict[str, Any]]) -> None:
    """Atomic write: a crash mid-write never leaves a truncated trials file."""
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    with tmp.open("w", encoding="utf-8") as handle:
        for record in records:
            handle.write(json.dumps(record, sort_keys=True) + "\n")
    os.replace(tmp, path)
