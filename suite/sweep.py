"""Sweep specs: the hyperparameter space, how settings are chosen (grid, random, TPE, QMC), and
the seed design each setting is repeated with.

Seeds are a replicate axis: samplers propose hyperparameters only, and every setting runs on
the same seed grid, so settings are compared on equal terms (DESIGN.md section 3).
"""

from __future__ import annotations

from collections.abc import Iterator
from itertools import product
from typing import Any, Literal

import numpy as np
from pydantic import Field, model_validator

from suite.spec import Strict


class HParams(Strict):
    lr: float = Field(gt=0, lt=1)
    batch_size: int = Field(ge=1)
    epochs: int = Field(ge=1)
    warmup_ratio: float = Field(0.1, ge=0, lt=1)
    weight_decay: float = Field(0.01, ge=0)
    bias_correction: bool = True
    max_grad_norm: float = Field(1.0, gt=0)
    group_by_length: bool = Field(False, description="batch examples of similar length (less padding)")
    min_steps: int = Field(0, ge=0, description="train at least this many steps (more epochs on tiny sets)")

    def eval_every(self, n_train: int) -> int:
        """Epochs per dev evaluation. A tiny training set that needs `min_steps` (Splinter's
        few-shot recipe: 10 epochs or 200 steps, whichever is more) trains this many epochs
        per evaluation, so it is still evaluated `epochs` times, not once per short epoch."""
        steps_per_epoch = max(1, -(-n_train // self.batch_size))
        return max(1, -(-self.min_steps // (steps_per_epoch * self.epochs)))

    def epochs_for(self, n_train: int) -> int:
        return self.epochs * self.eval_every(n_train)


class Param(Strict):
    """One searched hyperparameter: categorical choices, or a float/int range."""

    type: Literal["categorical", "float", "int"]
    choices: list[float | int | bool | str] | None = None
    low: float | None = None
    high: float | None = None
    log: bool = False
    step: float | None = None

    @model_validator(mode="after")
    def _complete(self) -> Param:
        if self.type == "categorical" and not self.choices:
            raise ValueError("a categorical parameter needs `choices`")
        if self.type != "categorical" and (self.low is None or self.high is None or self.low >= self.high):
            raise ValueError(f"a {self.type} parameter needs `low` < `high`")
        return self

    def values(self) -> list[Any] | None:
        """Every value, when the parameter is enumerable (for the grid sampler)."""
        if self.type == "categorical":
            return list(self.choices)
        if self.type == "int":
            return list(range(int(self.low), int(self.high) + 1, int(self.step or 1)))
        return None

    def suggest(self, trial: Any, name: str) -> Any:
        """Ask an Optuna trial for this parameter (a queued trial returns its fixed value)."""
        if self.type == "categorical":
            return trial.suggest_categorical(name, self.choices)
        if self.type == "int":
            return trial.suggest_int(
                name, int(self.low), int(self.high), step=int(self.step or 1), log=self.log
            )
        return trial.suggest_float(name, self.low, self.high, step=self.step, log=self.log)

    def distribution(self) -> Any:
        from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution

        if self.type == "categorical":
            return CategoricalDistribution(self.choices)
        if self.type == "int":
            return IntDistribution(int(self.low), int(self.high), log=self.log, step=int(self.step or 1))
        return FloatDistribution(self.low, self.high, log=self.log, step=self.step)


class SamplerSpec(Strict):
    type: Literal["grid", "random", "tpe", "qmc"] = "grid"
    seed: int | None = Field(None, description="default: the seed design's master seed")
    n_startup_trials: int = Field(6, ge=1, description="tpe: random settings before modelling")


class PrunerSpec(Strict):
    """Search-phase pruning. Off by default: pruned runs bias a variance study."""

    type: Literal["none", "median", "wilcoxon"] = "none"
    n_startup_trials: int = Field(5, ge=0)
    n_warmup_steps: int = Field(1, ge=0, description="epochs before pruning may start")


class SeedSpec(Strict):
    master: int = 0
    design: Literal["independent", "crossed"] = "independent"
    repeats: int = Field(5, ge=1, description="independent design: (init, order) draws per setting")
    init: int = Field(5, ge=1, description="crossed design: init seeds")
    order: int = Field(5, ge=1, description="crossed design: order seeds")
    subsample: int = Field(1, ge=1, description="subsample draws per small-data size")
    subsample_seeds: list[int] | None = Field(
        None, description="explicit subsample seeds (e.g. the few-shot split files' seeds) instead of draws"
    )


class SweepSpec(Strict):
    name: str
    description: str = ""
    hparams: dict[str, Any] = Field(default_factory=dict, description="fixed values")
    space: dict[str, Param] = Field(default_factory=dict, description="searched values")
    sampler: SamplerSpec = SamplerSpec()
    budget: int | None = Field(None, ge=1, description="settings to run (grid: default all)")
    seeds: SeedSpec = SeedSpec()
    pruner: PrunerSpec = PrunerSpec()

    @model_validator(mode="after")
    def _consistent(self) -> SweepSpec:
        known = set(HParams.model_fields)
        for name in [*self.hparams, *self.space]:
            if name not in known:
                raise ValueError(f"unknown hyperparameter {name!r} (known: {', '.join(sorted(known))})")
        if both := set(self.hparams) & set(self.space):
            raise ValueError(f"{sorted(both)[0]!r} is both fixed (hparams) and searched (space)")
        if self.sampler.type == "grid":
            if bad := [k for k, p in self.space.items() if p.values() is None]:
                raise ValueError(f"the grid sampler needs enumerable values; {bad[0]!r} is a float range")
        elif self.budget is None:
            raise ValueError(f"the {self.sampler.type} sampler needs a `budget` (number of settings)")
        example = {k: (p.values() or [p.low])[0] for k, p in self.space.items()}
        try:
            HParams(**self.hparams, **example)
        except Exception as err:  # pydantic's message names the field
            raise ValueError(
                f"hparams: {str(err).splitlines()[1]}: {str(err).splitlines()[2].strip()}"
            ) from None
        return self

    @property
    def adaptive(self) -> bool:
        """TPE proposes settings from finished results, so they cannot be planned up front."""
        return self.sampler.type == "tpe"

    def hparams_for(self, values: dict[str, Any]) -> HParams:
        return HParams(**self.hparams, **values)

    def settings(self) -> list[dict[str, Any]]:
        """The searched values of every setting, planned up front (grid, random, QMC)."""
        if not self.space:
            return [{}]
        if self.sampler.type == "grid":
            names = sorted(self.space)
            grid = [
                dict(zip(names, combo, strict=True))
                for combo in product(*(self.space[n].values() for n in names))
            ]
            return grid[: self.budget] if self.budget else grid
        return self._sampled_settings()

    def _sampled_settings(self) -> list[dict[str, Any]]:
        """Random/QMC settings drawn on an in-memory study: seeded, so the plan is reproducible."""
        import optuna

        optuna.logging.set_verbosity(optuna.logging.WARNING)
        study = optuna.create_study(sampler=self.make_sampler())
        distributions = {k: p.distribution() for k, p in self.space.items()}
        out = []
        for _ in range(self.budget):
            trial = study.ask(distributions)
            out.append(dict(trial.params))
            study.tell(trial, 0.0)
        return out

    def make_sampler(self) -> Any:
        import optuna

        seed = self.sampler.seed if self.sampler.seed is not None else self.seeds.master
        return {
            "grid": lambda: optuna.samplers.RandomSampler(seed=seed),  # the grid is enqueued, never sampled
            "random": lambda: optuna.samplers.RandomSampler(seed=seed),
            "qmc": lambda: optuna.samplers.QMCSampler(
                seed=seed, scramble=True, warn_independent_sampling=False
            ),
            "tpe": lambda: optuna.samplers.TPESampler(
                seed=seed, n_startup_trials=self.sampler.n_startup_trials
            ),
        }[self.sampler.type]()

    def make_pruner(self) -> Any:
        import optuna

        p = self.pruner
        if p.type == "median":
            return optuna.pruners.MedianPruner(
                n_startup_trials=p.n_startup_trials, n_warmup_steps=p.n_warmup_steps
            )
        if p.type == "wilcoxon":
            return optuna.pruners.WilcoxonPruner()
        return optuna.pruners.NopPruner()


# Seed axes, so each axis draws its own stream from the master seed.
_AXES = {"init": 1, "order": 2, "subsample": 3}


def child_seed(master: int, axis: str, index: int) -> int:
    """The `index`-th seed of one axis; adding repeats never changes earlier seeds."""
    return int(np.random.SeedSequence([master, _AXES[axis], index]).generate_state(1)[0] % 2**31)


def seed_grid(seeds: SeedSpec) -> Iterator[tuple[int, int, int]]:
    """(init, order, subsample) triples: independent draws, or the crossed init x order grid."""
    if seeds.design == "crossed":
        pairs = list(product(range(seeds.init), range(seeds.order)))
    else:
        pairs = [(i, i) for i in range(seeds.repeats)]
    subsamples = seeds.subsample_seeds or [
        child_seed(seeds.master, "subsample", s) for s in range(seeds.subsample)
    ]
    for sub in subsamples:
        for i, o in pairs:
            yield child_seed(seeds.master, "init", i), child_seed(seeds.master, "order", o), sub
