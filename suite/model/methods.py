"""A fine-tuning method from the user's own code, as a recipe beside the shipped ones: the
interface (`Method`) and how the suite imports, builds and attaches one (docs/methods.md).

A sweep names a method by import path (`method: mypkg.rdrop:RDrop`, `method_args: {alpha: 1.0}`);
each trial calls that object with the arguments, so every trial gets a fresh method. Every hook is
optional; those the object has are called in this order:

1. the module is built: the head (from the init seed), the encoder weights the checkpoint lacked,
   re-initialised layers (`reinit_layers`), freezing (`freeze`), then the LoRA or BitFit wrap;
2. `setup(module, pretrained, generator)`, under `torch.no_grad()`: may change the model (add
   noise, swap layers). `pretrained` holds the checkpoint's encoder weights as loaded (before any
   of step 1), named as in `module.named_parameters()` (`encoder.`...); `generator` is a CPU
   `torch.Generator` seeded from the init seed: a setup's draws come from it, never from the
   global RNG;
3. `callbacks()`: Lightning callbacks added to the trial's training Trainer (after the suite's);
4. `param_groups(module, groups)`: the suite's groups (weight decay on matrices only, the LLRD and
   head rates, frozen parameters left out), returned changed or as they are;
5. `optimizer(module, groups)`: builds the optimizer from the groups instead of the suite's AdamW
   or BERT-Adam (`module.train_hparams` holds lr, weight decay, bias correction); the suite's
   linear warmup and decay schedule wraps whatever it returns;
6. `loss(batch, outputs, base_loss, module)`, at every training step (on each piece of a split
   batch): `outputs` are the head's outputs of the step's forward pass, `base_loss` the head's loss
   of them as an fp32 tensor; it returns the loss to train on. It runs inside the trainer's
   autocast: computing its own extra terms in fp32 is the method's job. Randomness at step time
   (a second pass's dropout) comes from the global RNG, which the suite seeds from the order seed.

A method may not change the evaluation, the data or the seeds. `incompatible` declares what it
cannot be combined with (`{"adapter": {"lora"}}`): such a setting is refused before any trial.
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, ClassVar

if TYPE_CHECKING:
    import torch

HOOKS = ("setup", "param_groups", "optimizer", "loss", "callbacks")
# The setup generator's stream, apart from the init seed's own (the head's draws): [init seed, this].
SETUP_STREAM = 62


class MethodRefused(Exception):
    """A method that cannot be used as named: before any trial the pre-flight turns it into one
    line naming the sweep file and field (`about`: `method` or `method_args`); inside a trial it is
    an errored trial (a crash)."""

    def __init__(self, message: str, about: str = "method") -> None:
        super().__init__(message)
        self.about = about


class Method:
    """Subclass this and override the hooks you need (or write any class with some of them).
    The defaults change nothing; the suite calls only the hooks a method overrides."""

    incompatible: ClassVar[dict[str, set[Any]]] = {}  # hyperparameter -> values refused with it

    def setup(self, module: Any, pretrained: Mapping[str, torch.Tensor], generator: torch.Generator) -> None:
        """Change the built model before training (under `torch.no_grad()`)."""

    def param_groups(self, module: Any, groups: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """The optimizer's parameter groups (each `params`, `lr`, `weight_decay`)."""
        return groups

    def optimizer(self, module: Any, groups: list[dict[str, Any]]) -> torch.optim.Optimizer:
        """The optimizer over `groups`, instead of the suite's."""
        raise NotImplementedError

    def loss(self, batch: dict[str, Any], outputs: Any, base_loss: torch.Tensor, module: Any) -> torch.Tensor:
        """The training loss of a step, from the head's outputs and loss."""
        return base_loss

    def callbacks(self) -> list[Any]:
        """Extra Lightning callbacks of the training Trainer."""
        return []


def hooks_of(target: Any) -> frozenset[str]:
    """The hooks a method (a class or an instance) has: those a `Method` subclass overrides, or
    the callables of those names on any other object."""
    cls = target if isinstance(target, type) else type(target)
    if issubclass(cls, Method):
        return frozenset(h for h in HOOKS if getattr(cls, h) is not getattr(Method, h))
    return frozenset(h for h in HOOKS if callable(getattr(target, h, None)))


def with_current_dir() -> None:
    """The current directory on the import path (as `python -m` puts it), so that a method beside
    the command imports under the `suite` console script too."""
    here = os.getcwd()
    if here not in sys.path and "" not in sys.path:
        sys.path.insert(0, here)


def split_path(path: str) -> tuple[str, str]:
    """`package.module:Object` -> ("package.module", "Object")."""
    module, _, name = path.partition(":")
    return module, name


def import_object(path: str) -> Any:
    """The object an import path names, imported from the current directory or installed packages."""
    with_current_dir()
    module_name, name = split_path(path)
    try:
        target: Any = importlib.import_module(module_name)
    except Exception as err:  # any failure of the user's module is its own line
        raise MethodRefused(f"cannot import {module_name!r} ({type(err).__name__}: {err})") from None
    for part in name.split("."):
        if not hasattr(target, part):
            raise MethodRefused(f"module {module_name!r} has no object {name!r}")
        target = getattr(target, part)
    return target


def build_method(path: str, args: Mapping[str, Any] | None) -> Any:
    """The method a setting names, imported and called with its arguments: an object with at
    least one hook, else `MethodRefused`."""
    target = import_object(path)
    if isinstance(target, type) and not hooks_of(target):
        raise MethodRefused(f"{path} has none of the hooks {', '.join(HOOKS)}")
    if not callable(target):
        raise MethodRefused(f"{path} is not a class to call with method_args (got {type(target).__name__})")
    try:
        method = target(**dict(args or {}))
    except Exception as err:
        given = ", ".join(f"{k}={v!r}" for k, v in (args or {}).items()) or "no arguments"
        raise MethodRefused(
            f"{path} refused its arguments ({given}): {type(err).__name__}: {err}", "method_args"
        ) from None
    if not hooks_of(method):
        raise MethodRefused(f"{path} has none of the hooks {', '.join(HOOKS)}")
    return method


def incompatibilities(method: Any, path: str) -> dict[str, set[Any]]:
    """What a method declares it cannot be combined with: hyperparameter -> refused values."""
    declared = getattr(method, "incompatible", None) or {}
    if not isinstance(declared, Mapping):
        raise MethodRefused(
            f"{path}: `incompatible` maps hyperparameters to values, got {type(declared).__name__}"
        )
    out = {}
    for name, values in declared.items():
        values = {values} if isinstance(values, str | int | float | bool) else values
        try:
            out[str(name)] = set(values)
        except TypeError:
            raise MethodRefused(f"{path}: `incompatible[{name!r}]` is a set of values") from None
    return out


def conflict(method: Any, path: str, values: Mapping[str, Any]) -> tuple[str, Any] | None:
    """(hyperparameter, value) of a setting (`values`: every hyperparameter) that the method
    declares it cannot be combined with, else None."""
    for name, refused in incompatibilities(method, path).items():
        if name not in values:
            known = ", ".join(sorted(values))
            raise MethodRefused(f"{path}: `incompatible` names {name!r}, no hyperparameter (known: {known})")
        if values[name] in refused:
            return name, values[name]
    return None


def setup_generator(init_seed: int) -> torch.Generator:
    """A setup hook's generator: a stream of the init seed's own, the global RNG untouched."""
    import numpy as np
    import torch

    seed = int(np.random.SeedSequence([init_seed, SETUP_STREAM]).generate_state(1)[0])
    return torch.Generator().manual_seed(seed)


def pretrained_state(encoder: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The encoder's weights as loaded, named as the built module names them (`encoder.`...)."""
    return {f"encoder.{name}": p.detach().clone() for name, p in encoder.named_parameters()}


def attach(module: Any, method: Any, pretrained: Mapping[str, Any], init_seed: int) -> None:
    """Hand a built module its method (`fine_tuning_method`, `method_hooks`: what the training
    code calls) and run its setup."""
    import torch

    hooks = hooks_of(method)
    module.fine_tuning_method, module.method_hooks = method, hooks
    if "setup" in hooks:
        with torch.no_grad():
            method.setup(module, pretrained, setup_generator(init_seed))


def method_callbacks(module: Any) -> list[Any]:
    """The callbacks of a module's method (none without one)."""
    if "callbacks" not in getattr(module, "method_hooks", ()):
        return []
    return list(module.fine_tuning_method.callbacks() or [])
