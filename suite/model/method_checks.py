"""Pre-flight of the methods a sweep names: each imported, built with its arguments and checked
against every setting it runs in, before any trial; a method that cannot run is one line naming
the sweep file and field (exit 2). What passes gives each method's code (`method_code`): the
study's identity holds its hash, and `validate` and `plan` print it, so a user sees what a sweep
they did not write will run.

Called after the early checks (`--out`, the spec's size): a sweep that names a method runs that
method's code, as an import does, from here on."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from suite.config.sweep import HParams, SweepSpec
from suite.errors import SpecError
from suite.model.method_code import MethodCode, method_code
from suite.model.methods import MethodRefused, build_method, conflict


@dataclass
class Planned:
    """One method with one set of arguments, the fields that set them, and every setting of the
    sweep it runs in (each hyperparameter's values: one each, or a TPE space's candidates)."""

    path: str
    args: dict[str, Any] | None
    fields: dict[str, str]  # `method` / `method_args` / a hyperparameter -> the sweep field that sets it
    # Each setting: its hyperparameters' values, and the fields that set them.
    settings: list[tuple[dict[str, list[Any]], dict[str, str]]] = field(default_factory=list)


def planned_methods(sweep: SweepSpec) -> list[Planned]:
    """The methods a sweep's settings name (a TPE space: each searched method with every value the
    other hyperparameters can take), in the order they first appear."""
    found: dict[str, Planned] = {}
    if sweep.adaptive:
        base = HParams.model_construct(**sweep.merged({}))
        values = {n: [getattr(base, n, None)] for n in HParams.model_fields}
        values.update({n: p.candidates() for n, p in sweep.space.items()})
        for path in values["method"]:
            if path is not None:
                block = {"method": path}
                _add(found, sweep, block, path, base.method_args, values)
        return list(found.values())
    for block in sweep.settings():
        h = sweep.hparams_for(block)
        if h.method is not None:
            _add(found, sweep, block, h.method, h.method_args, {n: [v] for n, v in h.model_dump().items()})
    return list(found.values())


def _add(
    found: dict[str, Planned],
    sweep: SweepSpec,
    block: dict[str, Any],
    path: str,
    args: dict[str, Any] | None,
    values: dict[str, list[Any]],
) -> None:
    key = f"{path}|{sorted((args or {}).items())}"
    fields = {name: sweep.block_of(block, name) for name in HParams.model_fields}
    found.setdefault(key, Planned(path, args, fields)).settings.append((values, fields))


def check_methods(sweep: SweepSpec, where: str | Path) -> dict[str, MethodCode]:
    """Every method the sweep names imports, builds with its arguments and fits each setting it runs
    in; returns each method's code by path. Else one line naming the sweep file and field."""
    codes: dict[str, MethodCode] = {}
    for planned in planned_methods(sweep):
        try:
            method = build_method(planned.path, planned.args)
            for values, fields in planned.settings:
                if found := _conflict(method, planned.path, values):
                    name, value = found
                    raise SpecError(
                        f"{where}: field '{fields['method']}': {planned.path} cannot be combined with "
                        f"{name} {value} (its `incompatible`; {name} set by '{fields[name]}')"
                    )
        except MethodRefused as err:
            raise SpecError(f"{where}: field '{planned.fields[err.about]}': {err}") from None
        codes.setdefault(planned.path, method_code(planned.path))
    return codes


def _conflict(method: Any, path: str, values: dict[str, list[Any]]) -> tuple[str, Any] | None:
    """The first (hyperparameter, value) the method refuses among every value a setting's
    hyperparameters can take (one each, or a TPE space's candidates)."""
    for name, taken in values.items():
        for value in taken:
            single = {n: (value if n == name else values[n][0]) for n in values}
            if found := conflict(method, path, single):
                return found
    return None


def method_lines(codes: dict[str, MethodCode]) -> list[str]:
    """What `validate` and `plan` print of each method: its path, file and hash."""
    return [code.line() for code in codes.values()]
