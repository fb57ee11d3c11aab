"""Trackers (`--log-to`): every ended trial, and a study's summary, in MLflow, TensorBoard, CSV or
Weights & Biases, through Lightning's own loggers.

A trial is logged from its record once it ended (docs/outputs.md, Trackers): the logger never sees
the training, so tracking cannot touch a trial's RNG or computation, and its numbers are the same
with or without it. Tracking is not part of a study's identity: a rerun with or without `--log-to`
resumes the same study. A tracker that fails while logging says so in one line; the trial's
record is already stored in the study.
"""

from __future__ import annotations

import importlib.util
import json
import logging
import os
import re
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from suite.errors import SpecError

# kind -> (module the logger needs, what to pip install); csv needs nothing beyond Lightning
KINDS = {
    "mlflow": ("mlflow", "mlflow-skinny"),
    "tensorboard": ("tensorboard", "tensorboard"),
    "csv": (None, None),
    "wandb": ("wandb", "wandb"),
}
DEFAULT_DIRS = {"tensorboard": "tb_logs", "csv": "csv_logs"}  # under the current folder
STUDY_ROLE = "study"  # the tag `suite.role` of a study's MLflow parent run
USAGE = "expected mlflow[:URI], tensorboard[:DIR], csv[:DIR] or wandb[:PROJECT]"


@dataclass(frozen=True)
class Target:
    kind: str
    where: str  # MLflow's tracking URI, the TensorBoard or CSV folder, or the W&B project ("": the task)

    @property
    def arg(self) -> str:
        """As `--log-to` takes it again (a worker `run` starts gets this)."""
        return f"{self.kind}:{self.where}" if self.where else self.kind


def targets_of(values: Sequence[str]) -> tuple[Target, ...]:
    """`--log-to` values, checked before any training: a kind that does not exist, or whose
    package is not installed, is one line. Folders become absolute (workers resolve them alike)."""
    targets = []
    for value in values:
        kind, _, where = value.partition(":")
        if kind not in KINDS:
            raise SpecError(f"--log-to {value!r}: {USAGE}")
        module, pip = KINDS[kind]
        if module and not _installed(module):
            raise SpecError(
                f"--log-to {kind}: the {module} package is not installed (pip install {pip}, "
                "or the suite's trackers extra)"
            )
        target = Target(kind, _where(kind, where))
        if why := _unusable(target):
            raise SpecError(f"--log-to {value}: {why}")
        targets.append(target)
    return tuple(targets)


def _unusable(target: Target) -> str | None:
    """Why a tracker could not take this study's runs, found before any training (a run logged
    after its trial ended is not logged again by a rerun, which has nothing left to train)."""
    folder = {"tensorboard": target.where, "csv": target.where}.get(target.kind)
    if target.kind == "mlflow" and target.where.startswith("sqlite:///"):
        folder = str(Path(target.where.removeprefix("sqlite:///")).parent)
    if folder is not None:
        try:
            Path(folder).mkdir(parents=True, exist_ok=True)
        except OSError as err:
            return f"cannot make its folder {folder} ({err.strerror})"
        if not os.access(folder, os.W_OK):
            return f"cannot write in {folder}"
    if target.kind == "wandb" and not _wandb_can_log():
        # wandb.init would stop at a login prompt inside a worker's trial loop
        return "W&B is not logged in: set WANDB_API_KEY, run `wandb login`, or WANDB_MODE=offline"
    return None


def _wandb_can_log() -> bool:
    if os.environ.get("WANDB_API_KEY") or os.environ.get("WANDB_MODE") in ("offline", "disabled", "dryrun"):
        return True
    netrc = Path(os.environ.get("NETRC", Path.home() / ".netrc"))
    return netrc.is_file() and "api.wandb.ai" in netrc.read_text(errors="replace")


def _installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a module set to None in sys.modules cannot be imported
        return False


def _where(kind: str, where: str) -> str:
    if kind == "mlflow":
        where = where or os.environ.get("MLFLOW_TRACKING_URI", "") or "mlflow.db"
        if "://" in where or where.startswith(("file:", "databricks")):
            return where
        path = Path(where).resolve()  # a folder (its mlflow.db) or an .db file: SQLite
        return f"sqlite:///{path if path.suffix == '.db' else path / 'mlflow.db'}"
    if kind in DEFAULT_DIRS:
        return str(Path(where or DEFAULT_DIRS[kind]).resolve())
    return where


def safe_name(text: str) -> str:
    """A study or trial name as a folder name, and a summary key as an MLflow metric name."""
    return re.sub(r"[^\w.\-/ ]+", "_", text).replace("/", "_").strip("_") or "_"


def trial_tags(record: dict[str, Any]) -> dict[str, str]:
    """What identifies a tracked trial: its study, task, size, seeds, setting and outcome."""
    from suite.study.records import outcome

    seeds = record.get("seeds", {})
    return {
        "suite.study": str(record.get("study")),
        "suite.task": str(record.get("task")),
        "suite.model": str(record.get("model")),
        "suite.size": str(record.get("size")),
        **{f"suite.seed.{k}": str(seeds.get(k)) for k in ("init", "order", "subsample")},
        "suite.setting": json.dumps(record.get("hparams", {}), sort_keys=True),
        "suite.outcome": outcome(record),
        "suite.trial": str(record.get("trial_number")),
        "suite.attempt": str(record.get("attempt", 1)),
    }


def trial_metrics(record: dict[str, Any]) -> list[tuple[int, dict[str, float]]]:
    """(step, metrics) to log: each epoch's dev metrics (`dev_*`, step = epoch), the loss curve
    (`train_loss`, step = optimizer step) and the final scores (`score`, `final_*`)."""
    steps: list[tuple[int, dict[str, float]]] = []
    for i, epoch in enumerate(record.get("epochs") or []):
        dev = {f"dev_{k}": float(v) for k, v in epoch.items() if k != "epoch" and _number(v)}
        steps.append((int(epoch.get("epoch", i)), dev))
    steps += [
        (i, {"train_loss": float(v)}) for i, v in enumerate(record.get("loss_curve") or []) if _number(v)
    ]
    final = {f"final_{k}": float(v) for k, v in (record.get("scores") or {}).items() if _number(v)}
    if _number(record.get("score")):
        final["score"] = float(record["score"])
    if final:
        steps.append((len(record.get("epochs") or []), final))
    return steps


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


class Tracking:
    """The trackers of one study, in one process (a worker, or `run` for its summary)."""

    def __init__(self, targets: Sequence[Target], study: str, task: str) -> None:
        self.targets, self.study, self.task = tuple(targets), study, task
        if any(t.kind == "mlflow" for t in self.targets):  # a new store's migrations print at INFO
            import mlflow  # noqa: F401 (it sets its loggers' level on import)

            for name in ("mlflow", "alembic"):
                logging.getLogger(name).setLevel(logging.WARNING)
        self._parent: str | None = None  # the MLflow parent run's id, once found

    def log_trial(self, record: dict[str, Any]) -> None:
        """One tracked run per ended trial: tags, hyperparameters as params, metrics."""
        name = f"trial {record.get('trial_number')}"
        if record.get("attempt", 1) > 1:
            name += f" attempt {record['attempt']}"
        for target in self.targets:
            self._guarded(target, name, lambda t=target: self._log_trial(t, name, record))

    def open_study(self) -> None:
        """The MLflow parent run, before any worker logs a trial under it."""
        for target in self.targets:
            if target.kind == "mlflow":
                self._guarded(target, "the study", lambda t=target: self._parent_run(t.where))

    def log_study(self, rows: Sequence[dict[str, Any]]) -> None:
        """The study's summary, a row per (size, setting) (`suite.outputs.run_folder.summary_rows`):
        MLflow's parent run, W&B's study run, a summary.json in a TensorBoard or CSV folder."""
        rows = list(rows)
        metrics = {
            safe_name(f"{r['size']} {r['setting']}") + f"/{k}": float(r[k])
            for r in rows
            for k in ("median", "iqr", "min", "max", "failed", "runs")
            if r.get(k) is not None
        }
        for target in self.targets:
            self._guarded(target, "the study", lambda t=target: self._log_study(t, rows, metrics))

    def _guarded(self, target: Target, what: str, log: Any) -> None:
        try:
            log()
        except Exception as err:  # tracking never loses a trial: its record is already stored
            print(f"--log-to {target.kind}: {what} of study {self.study} not logged ({err})", file=sys.stderr)

    def _log_trial(self, target: Target, name: str, record: dict[str, Any]) -> None:
        tags, params = trial_tags(record), dict(record.get("hparams", {}))
        if target.kind == "mlflow":
            from lightning.pytorch.loggers import MLFlowLogger

            parent = {"mlflow.parentRunId": self._parent_run(target.where)}
            logger = MLFlowLogger(
                experiment_name=self.task, run_name=name, tracking_uri=target.where,
                tags={**tags, **parent}, **_artifacts(target.where),
            )  # fmt: skip
        elif target.kind == "wandb":
            from lightning.pytorch.loggers import WandbLogger

            logger = WandbLogger(
                name=name,
                project=target.where or self.task,
                group=self.study,
                job_type="trial",
                **_wandb_dir(),
            )
            logger.experiment.config.update(tags)
        else:
            logger = _folder_logger(target, self.study, name)
            params = {**params, **tags}  # neither has tags: they go with the params
        logger.log_hyperparams(params)
        if target.kind == "mlflow":  # one call per step costs ~25 ms on SQLite: a curve goes in batches
            _mlflow_batches(logger.experiment, logger.run_id, trial_metrics(record))
        else:
            for step, metrics in trial_metrics(record):
                logger.log_metrics(metrics, step=step)
        _finish(logger, "failed" if tags["suite.outcome"] == "errored" else "success")

    def _parent_run(self, uri: str) -> str:
        """The study's parent run in MLflow: found by its tags, created when there is none."""
        if self._parent is None:
            from mlflow import MlflowClient

            client = MlflowClient(uri)
            experiment = _experiment(client, self.task, uri)
            found = client.search_runs([experiment], f"tags.`suite.role` = '{STUDY_ROLE}'", max_results=5000)
            ours = [r.info.run_id for r in found if r.data.tags.get("suite.study") == self.study]
            tags = {"suite.role": STUDY_ROLE, "suite.study": self.study, "suite.task": self.task}
            self._parent = (
                ours[0] if ours else client.create_run(experiment, tags=tags, run_name=self.study).info.run_id
            )
        return self._parent

    def _log_study(self, target: Target, rows: list[dict[str, Any]], metrics: dict[str, float]) -> None:
        if target.kind == "mlflow":
            from mlflow import MlflowClient

            client, parent = MlflowClient(target.where), self._parent_run(target.where)
            step = sum(int(r["runs"]) for r in rows)  # a resumed study's summary is the newer one
            _mlflow_batches(client, parent, [(step, metrics)])
            client.set_tag(parent, "suite.summary", json.dumps(rows)[:5000])
            client.set_terminated(parent, "FINISHED")
        elif target.kind == "wandb":
            from lightning.pytorch.loggers import WandbLogger

            logger = WandbLogger(
                name=self.study,
                project=target.where or self.task,
                group=self.study,
                job_type=STUDY_ROLE,
                **_wandb_dir(),
            )
            logger.log_metrics(metrics)
            _finish(logger, "success")
        else:
            folder = Path(target.where) / safe_name(self.study)
            folder.mkdir(parents=True, exist_ok=True)
            (folder / "summary.json").write_text(
                json.dumps({"study": self.study, "rows": rows}, indent=2) + "\n"
            )


def _mlflow_batches(client: Any, run_id: str, steps: list[tuple[int, dict[str, float]]]) -> None:
    from mlflow.entities import Metric

    now = int(time.time() * 1000)
    metrics = [Metric(k, v, now, step) for step, values in steps for k, v in values.items()]
    for i in range(0, len(metrics), 1000):  # MLflow's batch limit
        client.log_batch(run_id, metrics=metrics[i : i + 1000])


def _experiment(client: Any, name: str, uri: str) -> str:
    found = client.get_experiment_by_name(name)
    if found is not None:
        return found.experiment_id
    try:
        return client.create_experiment(name, **_artifacts(uri))
    except Exception:  # another worker created it meanwhile
        return client.get_experiment_by_name(name).experiment_id


def _artifacts(uri: str) -> dict[str, str]:
    """A SQLite store keeps its artifacts beside it (else MLflow picks a folder in the current one)."""
    if uri.startswith("sqlite:///"):
        return {"artifact_location": (Path(uri[len("sqlite:///") :]).parent / "artifacts").as_uri()}
    return {}


def _folder_logger(target: Target, study: str, name: str) -> Any:
    from lightning.pytorch.loggers import CSVLogger, TensorBoardLogger

    if target.kind == "tensorboard":
        return TensorBoardLogger(target.where, safe_name(study), safe_name(name), default_hp_metric=False)
    return CSVLogger(target.where, safe_name(study), safe_name(name))


def _wandb_dir() -> dict[str, str]:
    """W&B's own WANDB_DIR, which Lightning's logger would override with the current folder."""
    return {"save_dir": os.environ["WANDB_DIR"]} if os.environ.get("WANDB_DIR") else {}


def _finish(logger: Any, status: str) -> None:
    logger.finalize(status)
    if type(logger).__name__ == "WandbLogger":  # Lightning leaves a W&B run open
        logger.experiment.finish(exit_code=0 if status == "success" else 1)
