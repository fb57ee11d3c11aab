"""A running trial's progress, written into its Optuna trial for whoever watches the study
(`suite.study.progress` reads it; that module imports no torch, as `run`'s waiting process must not)."""

from __future__ import annotations

import math
import os
import time
from typing import Any

import lightning as L
import optuna
from sqlalchemy.exc import SQLAlchemyError

from suite.study.plan import PROGRESS_ATTR
from suite.study.supervise import stop_point, stops_held

PROGRESS_ENV = "SUITE_PROGRESS_S"  # seconds between a trial's progress writes (default 5)


class TakenOver(BaseException):  # noqa: N818  a stop, like KeyboardInterrupt, not an error
    """This trial was failed as stale by another worker (this one's heartbeat came late) and queued
    again: training it on is wasted and its record would be discarded. A BaseException, so that the
    trial's own crash handling (an errored trial) lets it through to the worker (suite/study/work.py)."""


class TrialProgress(L.Callback):
    """Writes the trial's progress into its Optuna trial at most every `interval` seconds and
    after every dev evaluation. Reads only host-side counters (no device sync)."""

    def __init__(self, trial: optuna.Trial, metric: str, interval: float | None = None) -> None:
        self.trial, self.metric = trial, metric
        self.interval = float(os.environ.get(PROGRESS_ENV, "5")) if interval is None else interval
        self.start = self.last = time.monotonic()
        self.score: float | None = None

    def on_train_start(self, trainer: L.Trainer, module: Any) -> None:
        self.start = time.monotonic()
        self._send(trainer)

    def on_train_batch_end(self, trainer: L.Trainer, module: Any, *args: Any) -> None:
        # A stop that a library swallowed (a KeyboardInterrupt raised inside a weakref callback
        # during a collection is only printed, "Exception ignored in") stops the trial here, at
        # its next step, not at its end.
        stop_point()
        if time.monotonic() - self.last >= self.interval:
            self._send(trainer)

    def on_validation_end(self, trainer: L.Trainer, module: Any) -> None:
        history = getattr(module, "history", None)
        if history:
            self.score = history[-1].get(self.metric)
        self._send(trainer)

    def _send(self, trainer: L.Trainer) -> None:
        try:
            # Held: a stop raised mid-write can leave its transaction open (a locked SQLite file).
            with stops_held():
                self._write(trainer)
        except optuna.exceptions.UpdateFinishedTrialError:
            raise TakenOver(self.trial.number) from None
        except (optuna.exceptions.StorageInternalError, SQLAlchemyError, OSError):
            pass  # a storage hiccup (a full disk, a lost server) must not fail a healthy run: skipped

    def _write(self, trainer: L.Trainer) -> None:
        self.last = time.monotonic()
        steps = trainer.estimated_stepping_batches
        self.trial.set_user_attr(
            PROGRESS_ATTR,
            {
                "epoch": trainer.current_epoch + 1,
                "epochs": trainer.max_epochs,
                "step": trainer.global_step,
                "steps": int(steps) if math.isfinite(steps) else None,
                "score": self.score,
                "metric": self.metric,
                "elapsed_s": round(self.last - self.start, 2),
            },
        )
