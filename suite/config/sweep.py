"""Sweep specs: the hyperparameter space, how settings are chosen (grid, random, TPE, QMC), and
the seed design each setting is repeated with.

Seeds are a replicate axis: samplers propose hyperparameters only, and every setting runs on
the same seed grid, so settings are compared on equal terms (docs/design.md, Seeds).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from functools import cache
from itertools import product
from pathlib import Path
from typing import Annotated, Any, Literal

import numpy as np
from pydantic import Field, PlainValidator, TypeAdapter, ValidationError, model_validator

from suite.config.fields import Bool, FieldError, Float, Int, Seed, Strict, as_read, kind
from suite.config.method_fields import MethodArgs, MethodPath
from suite.config.overrides import SWEEP_PREFIX, apply_sets, describe_sets
from suite.config.reading import load_checked, profile_label, validate
from suite.errors import SpecError


def _lora_targets(value: Any) -> str:
    # One spelling per set of modules: "value, query" and "query,value" train the same model, so
    # they are one setting (one key), not two.
    if not isinstance(value, str):
        raise ValueError(f"expected comma-separated module names or auto, got {value!r}")
    if value.strip() == "auto":
        return "auto"
    if not (names := sorted({n.strip() for n in value.split(",") if n.strip()})):
        raise ValueError(f"names no module: give comma-separated module names or auto, got {value!r}")
    return ",".join(names)


LoraTargets = Annotated[str, PlainValidator(_lora_targets)]


class HParams(Strict):
    lr: Float = Field(gt=0, lt=1)
    batch_size: Int = Field(ge=1)
    epochs: Int = Field(ge=1)
    warmup_ratio: Float = Field(0.1, ge=0, lt=1)
    weight_decay: Float = Field(0.01, ge=0)
    bias_correction: Bool = True
    max_grad_norm: Float = Field(1.0, gt=0)
    group_by_length: Bool = Field(False, description="batches of near-equal lengths (whole-set buckets)")
    split_batches: Bool = Field(
        False, description="compute each batch as length-sorted pieces: the same loss, less padding"
    )
    min_steps: Int = Field(0, ge=0, description="train at least this many steps (more epochs on tiny sets)")
    # Stabilisers (suite/model/stabilisers.py): the remedies the variance papers tested.
    reinit_layers: Int = Field(0, ge=0, description="re-draw the top k encoder layers (and a used pooler)")
    llrd: Float = Field(1.0, gt=0, le=1, description="lr x llrd per layer going down from the top layer")
    freeze: Literal["none", "embeddings", "encoder"] = "none"
    head_lr_mult: Float = Field(1.0, gt=0, description="the head's learning rate relative to the encoder's")
    # The head as a factor a recipe can vary (classification tasks; `task`: the task's `classifier`).
    classifier: Literal["task", "auto", "pooler", "cls", "mean"] = "task"
    features: Literal["last", "last4"] = Field(
        "last",
        description="the head's input: the last layer, or the last four concatenated under a small "
        "MLP (classification) or a 2-layer BiLSTM (tagging): Devlin et al. 2019 s5.3, feature-based",
    )
    # Parameter-efficient fine-tuning (suite/model/adapters.py): what of the encoder trains.
    adapter: Literal["none", "lora", "bitfit"] = Field(
        "none",
        description="none: full fine-tuning; lora: low-rank updates of the attention projections "
        "(Hu et al. 2021); bitfit: the encoder's bias terms (Ben Zaken et al. 2022); the head always trains",
    )
    lora_r: Int = Field(8, ge=1, description="LoRA rank")
    lora_alpha: Float = Field(8.0, gt=0, description="LoRA scaling: the update is x alpha / r")
    lora_dropout: Float = Field(0.0, ge=0, lt=1, description="dropout on the LoRA branch's input")
    lora_targets: LoraTargets = Field(
        "auto",
        description="comma-separated names of the modules LoRA adapts; auto: the family's "
        "attention query and value projections",
    )
    # A fine-tuning method from the user's own code (suite/model/methods.py, docs/methods.md).
    method: MethodPath | None = Field(None, description="package.module:Object, a fine-tuning method")
    method_args: MethodArgs = Field(None, description="keyword arguments the method's object is called with")
    recipe: str | None = Field(None, description="the sweep recipe this setting belongs to (a label)")

    @model_validator(mode="after")
    def _meaningful(self) -> HParams:
        if self.freeze == "encoder" and self.reinit_layers:
            raise FieldError("reinit_layers", "re-initialised layers of a frozen encoder would stay random")
        if self.freeze == "encoder" and self.llrd != 1:
            raise FieldError("llrd", "a frozen encoder has no layer learning rates to decay")
        if self.adapter != "none" and self.freeze != "none":
            raise FieldError(
                "adapter",
                f"{self.adapter} decides itself what of the encoder trains; freeze {self.freeze} "
                "(a linear probe or feature-based recipe) takes no adapter",
            )
        if self.adapter != "none" and self.reinit_layers:
            raise FieldError(
                "adapter",
                f"{self.adapter} keeps pretrained weights frozen: re-drawn layers would stay random",
            )
        if self.adapter != "lora" and (given := [n for n in LORA if getattr(self, n) != LORA[n]]):
            raise FieldError(given[0], f"{given[0]} applies to adapter lora only, not {self.adapter}")
        if self.method_args is not None and self.method is None:
            raise FieldError("method_args", "method_args are the arguments of a `method`; none is set")
        return self

    def __hash__(self) -> int:  # `method_args` is a mapping: hashed by its canonical JSON
        return hash(json.dumps(self.model_dump(), sort_keys=True))

    def as_record(self) -> dict[str, Any]:
        """Every hyperparameter, except a stabiliser or adapter at its default and an absent
        recipe or method: a setting without them keeps the trial key and record it had before they
        existed, so studies made then still resume. A LoRA setting records all of LoRA's values;
        `method_args` is recorded as its canonical JSON text (a scalar, as every other value)."""
        kept = {
            k: v
            for k, v in self.model_dump().items()
            if (self.adapter == "lora" if k in LORA else k not in OPTIONAL or v != OPTIONAL[k])
        }
        if self.method_args is not None:  # one value, as every other: its canonical JSON text
            kept["method_args"] = json.dumps(self.method_args, sort_keys=True)
        return kept

    def eval_every(self, n_train: int) -> int:
        """Epochs per dev evaluation. A tiny training set that needs `min_steps` (Splinter's
        few-shot recipe: 10 epochs or 200 steps, whichever is more) trains this many epochs
        per evaluation, so it is still evaluated `epochs` times, not once per short epoch."""
        steps_per_epoch = max(1, -(-n_train // self.batch_size))
        return max(1, -(-self.min_steps // (steps_per_epoch * self.epochs)))

    def epochs_for(self, n_train: int) -> int:
        return self.epochs * self.eval_every(n_train)


# Fields left out of a trial's key and record at these values (see `HParams.as_record`).
OPTIONAL: dict[str, Any] = {
    "split_batches": False,
    "reinit_layers": 0,
    "llrd": 1.0,
    "freeze": "none",
    "head_lr_mult": 1.0,
    "classifier": "task",
    "features": "last",
    "adapter": "none",
    "method": None,
    "method_args": None,
    "recipe": None,
}
# LoRA's values: in a LoRA setting's key and record (all of them), in no other setting's.
LORA: dict[str, Any] = {
    n: HParams.model_fields[n].default for n in ("lora_r", "lora_alpha", "lora_dropout", "lora_targets")
}
SETTABLE = tuple(n for n in HParams.model_fields if n != "recipe")  # `recipe` is a label, set by `recipes:`


def _scalar(value: Any) -> Any:
    # Kept as given (an int choice stays an int); one message instead of four union branches.
    if isinstance(value, float | int | bool | str):
        return value
    raise ValueError(f"a choice is a number, a boolean or a string, got {kind(value)}")


Choice = Annotated[float | int | bool | str, PlainValidator(_scalar)]


class Param(Strict):
    """One searched hyperparameter: categorical choices, or a float/int range."""

    type: Literal["categorical", "float", "int"]
    choices: list[Choice] | None = None
    low: Float | None = None
    high: Float | None = None
    log: Bool = False
    step: Float | None = Field(None, gt=0)

    @model_validator(mode="after")
    def _complete(self) -> Param:
        if self.type == "categorical":
            if not self.choices:
                raise FieldError("choices", "a categorical parameter needs `choices`")
            if len({repr(c) for c in self.choices}) < len(self.choices):
                raise FieldError("choices", "a choice is listed twice")
            return self
        if self.low is None or self.high is None or self.low >= self.high:
            raise FieldError(
                "high" if self.low is not None else "low", f"a {self.type} parameter needs `low` < `high`"
            )
        if self.type == "int" and not all(
            float(v).is_integer() for v in (self.low, self.high, self.step or 1)
        ):
            raise FieldError("low", "an int parameter needs integer `low`, `high` and `step`")
        if self.log and self.low <= 0:
            raise FieldError("low", "a `log` range needs `low` > 0")
        if self.log and self.step is not None:
            raise FieldError("step", "a `log` range takes no `step`")
        return self

    def candidates(self) -> list[Any]:
        """The values to check against the hyperparameter's schema: every choice, or both ends."""
        if self.type == "categorical":
            return list(self.choices)
        cast = int if self.type == "int" else float
        return [cast(self.low), cast(self.high)]

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
    seed: Seed | None = Field(None, description="default: the seed design's master seed")
    n_startup_trials: Int = Field(6, ge=1, description="tpe: random settings before modelling")


class PrunerSpec(Strict):
    """Search-phase pruning. Off by default: pruned runs bias a variance study."""

    type: Literal["none", "median", "wilcoxon"] = "none"
    n_startup_trials: Int = Field(5, ge=0)
    n_warmup_steps: Int = Field(1, ge=0, description="epochs before pruning may start")


class SeedSpec(Strict):
    master: Seed = 0
    design: Literal["independent", "crossed"] = "independent"
    repeats: Int = Field(5, ge=1, description="independent design: (init, order) draws per setting")
    init: Int = Field(5, ge=1, description="crossed design: init seeds")
    order: Int = Field(5, ge=1, description="crossed design: order seeds")
    subsample: Int = Field(1, ge=1, description="subsample draws per small-data size")
    subsample_seeds: list[Seed] | None = Field(
        None,
        min_length=1,
        description="explicit subsample seeds (e.g. the few-shot split files' seeds) instead of draws",
    )

    @model_validator(mode="after")
    def _distinct(self) -> SeedSpec:
        seeds = self.subsample_seeds or []
        if len(set(seeds)) < len(seeds):
            raise FieldError("subsample_seeds", "a seed is listed twice")
        return self


class SweepSpec(Strict):
    name: str
    description: str = ""
    hparams: dict[str, Any] = Field(default_factory=dict, description="fixed values")
    space: dict[str, Param] = Field(default_factory=dict, description="searched values")
    recipes: dict[str, dict[str, Any]] = Field(
        default_factory=dict,
        description="named settings, each overriding `hparams` in several values at once; each is "
        "crossed with the space and run on the same seed grid",
    )
    references: dict[str, str] = Field(
        default_factory=dict,
        description="recipe -> the recipe its table row is tested against (default: the first); "
        "written as `reference:` inside a recipe",
    )
    sampler: SamplerSpec = SamplerSpec()
    budget: Int | None = Field(None, ge=1, description="settings to run (grid: default all)")
    seeds: SeedSpec = SeedSpec()
    pruner: PrunerSpec = PrunerSpec()

    @model_validator(mode="before")
    @classmethod
    def _lift_references(cls, data: Any) -> Any:
        """`reference:` inside a recipe names what the recipe is compared with; it is a label of
        the analysis, not a hyperparameter, so it moves to `references` before validation."""
        if not isinstance(data, dict) or not isinstance(data.get("recipes"), dict):
            return data
        recipes, references = {}, dict(data.get("references") or {})
        for name, recipe in data["recipes"].items():
            if isinstance(recipe, dict) and "reference" in recipe:
                recipe = dict(recipe)
                references[name] = recipe.pop("reference")
            recipes[name] = recipe
        return {**data, "recipes": recipes, "references": references}

    @model_validator(mode="before")
    @classmethod
    def _values_as_read(cls, data: Any) -> Any:
        """Every fixed, recipe and choice value as HParams reads it (`canonical`), so the spec and a
        study's fingerprint hold one value for `1e-4`, `1.0e-4` and `0.0001`."""
        if not isinstance(data, dict):
            return data
        out = dict(data)
        if isinstance(data.get("hparams"), dict):
            out["hparams"] = _canonical_block(data["hparams"])
        if isinstance(data.get("recipes"), dict):
            out["recipes"] = {r: _canonical_block(v) for r, v in data["recipes"].items()}
        if isinstance(data.get("space"), dict):
            out["space"] = {n: _canonical_choices(n, p) for n, p in data["space"].items()}
        return out

    @model_validator(mode="after")
    def _consistent(self) -> SweepSpec:
        known = set(SETTABLE)
        blocks = [("hparams", self.hparams), ("space", self.space)]
        blocks += [(f"recipes.{name}", recipe) for name, recipe in self.recipes.items()]
        for block, names in blocks:
            for name in names:
                if name not in known:
                    raise FieldError(
                        f"{block}.{name}",
                        f"unknown hyperparameter {name!r} (known: {', '.join(sorted(known))})",
                    )
        if both := set(self.hparams) & set(self.space):
            name = sorted(both)[0]
            raise FieldError(f"space.{name}", f"{name!r} is both fixed (hparams) and searched (space)")
        for name, ref in self.references.items():
            if name not in self.recipes:
                raise FieldError(f"references.{name}", f"no recipe {name!r} to give a reference to")
            if ref not in self.recipes or ref == name:
                others = ", ".join(r for r in self.recipes if r != name)
                raise FieldError(f"recipes.{name}.reference", f"{ref!r} is not another recipe ({others})")
        if self.recipes and self.space:  # a recipe table compares whole settings, one per recipe
            raise FieldError(
                "space", "a sweep with `recipes` searches nothing: each recipe is one whole setting"
            )
        if self.sampler.type == "grid":
            if bad := [k for k, p in self.space.items() if p.values() is None]:
                raise FieldError(
                    f"space.{bad[0]}",
                    f"the grid sampler needs enumerable values; {bad[0]!r} is a float range",
                )
        elif self.budget is None:
            raise FieldError(
                "budget", f"the {self.sampler.type} sampler needs a `budget` (number of settings)"
            )
        self._check_values()
        if not self.adaptive and self.sampler.type == "grid":
            self._check_settings()
        return self

    def _check_values(self) -> None:
        """Fixed values, and every value a searched parameter can take, pass HParams' checks."""
        for name, value in self.hparams.items():
            _check_hparam(f"hparams.{name}", name, value)
        for name, param in self.space.items():
            takes = HParams.model_fields[name].annotation  # a float range never fits an int or a bool
            if (param.type == "float" and takes is not float) or (param.type == "int" and takes is bool):
                shown = getattr(takes, "__name__", "string")  # `method`: an optional import path
                raise FieldError(
                    f"space.{name}.type", f"{name} takes {shown} values, not a {param.type} range"
                )
            for value in param.candidates():
                _check_hparam(f"space.{name}", name, value)
        for recipe, values in self.recipes.items():
            for name, value in values.items():
                _check_hparam(f"recipes.{recipe}.{name}", name, value)
        by_all = set.intersection(*(set(v) for v in self.recipes.values())) if self.recipes else set()
        given = {*self.hparams, *self.space, *by_all}
        if missing := [n for n, f in HParams.model_fields.items() if f.is_required() and n not in given]:
            raise FieldError(f"hparams.{missing[0]}", "required: fix it in `hparams` or search it in `space`")

    @property
    def adaptive(self) -> bool:
        """TPE proposes settings from finished results, so they cannot be planned up front."""
        return self.sampler.type == "tpe"

    def _check_settings(self) -> None:
        """Every planned grid setting is a valid whole (e.g. no re-initialised layers under a
        frozen encoder), named by the block that set the offending value."""
        for values in self.settings():
            try:
                HParams(**self.merged(values))
            except ValidationError as err:
                name = str(err.errors()[0]["loc"][0]) if err.errors()[0]["loc"] else ""
                cause = (err.errors()[0].get("ctx") or {}).get("error")
                name = getattr(cause, "field", None) or name
                raise FieldError(self.block_of(values, name), _message(err)) from None

    def block_of(self, values: dict[str, Any], name: str) -> str:
        """The sweep field that gave a setting's value of `name` (for error messages)."""
        if name in self.recipes.get(values.get("recipe"), {}):
            return f"recipes.{values['recipe']}.{name}"
        return f"space.{name}" if name in self.space else f"hparams.{name}"

    def merged(self, values: dict[str, Any]) -> dict[str, Any]:
        """A setting's hyperparameters: fixed values, then its recipe's, then searched ones."""
        values = dict(values)
        recipe = values.pop("recipe", None)
        named = {"recipe": recipe} if recipe is not None else {}
        return {**self.hparams, **self.recipes.get(recipe, {}), **values, **named}

    def hparams_for(self, values: dict[str, Any]) -> HParams:
        """The hyperparameters of a planned setting (`values`: searched values and its recipe)."""
        try:
            return HParams(**self.merged(values))
        except ValidationError as err:  # a searched combination the grid check could not see
            raise SpecError(f"sweep {self.name}: setting {values}: {_message(err)}") from None

    def settings(self) -> list[dict[str, Any]]:
        """Every setting planned up front (grid, random, QMC): its searched values, or (a sweep
        with recipes) `{"recipe": name}` per recipe, in the order they are listed."""
        if self.recipes:
            return [{"recipe": name} for name in self.recipes]
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


@cache
def _hparam_adapter(name: str) -> TypeAdapter:
    info = HParams.model_fields[name]
    takes = Annotated[info.annotation, *info.metadata] if info.metadata else info.annotation
    return TypeAdapter(takes, config=HParams.model_config)


def canonical(name: str, value: Any) -> Any:
    """A hyperparameter's value as HParams reads it (`fields.as_read`); a name of no
    hyperparameter, or a value it refuses, stays for the check that names it."""
    return as_read(_hparam_adapter(name), value) if name in SETTABLE else value


def _canonical_block(values: Any) -> Any:
    return {n: canonical(n, v) for n, v in values.items()} if isinstance(values, dict) else values


def _canonical_choices(name: str, param: Any) -> Any:
    if not isinstance(param, dict) or not isinstance(param.get("choices"), list):
        return param
    return {**param, "choices": [canonical(name, c) for c in param["choices"]]}


def _message(err: ValidationError) -> str:
    return err.errors()[0]["msg"].removeprefix("Value error, ")


def _check_hparam(field: str, name: str, value: Any) -> None:
    """One hyperparameter value against its HParams field (type and bounds)."""
    try:
        _hparam_adapter(name).validate_python(value)
    except ValidationError as err:
        raise FieldError(field, f"{_message(err)} (got {value!r})") from None


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


def load_sweep(path: str | Path, profile: str | None = "default", sets: dict | None = None) -> SweepSpec:
    """A sweep profile sets the training side (hparams, space, seeds); it must exist in the sweep."""
    path = Path(path)
    raw = apply_sets(load_checked(SweepSpec, path, profile, required=True), sets, SWEEP_PREFIX)
    return validate(SweepSpec, raw, path, profile_label(profile) + describe_sets(sets, SWEEP_PREFIX))
