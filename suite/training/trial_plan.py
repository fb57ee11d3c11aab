"""What one planned trial is: its size, hyperparameters and three seeds, and the key a study runs
once. Its own module so that planning (which imports no Lightning) and training share it."""

from __future__ import annotations

from dataclasses import dataclass

from suite.config.sweep import HParams
from suite.config.task import Size


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
