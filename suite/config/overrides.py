"""`--set path.to.field=value`: override any task or sweep field from the command line.

Task fields are named by their path (`sizes`, `data.tag_scheme`, `failure.threshold`); sweep
fields take a `sweep.` prefix (`sweep.hparams.lr`, `sweep.seeds.repeats`). The value is parsed
as YAML, like the file itself (`[100, 500]`, `1e-4`, `true`). Overrides are set into the raw
mapping after the profile is merged and before validation, so an overridden spec passes the
same schema as the YAML and is what the study's fingerprint sees; a hyperparameter's value is kept
as it reads there (`1e-4`, a string to YAML 1.1, is 0.0001: `SweepSpec._values_as_read`).
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Mapping
from typing import Any

import yaml

from suite.config.fields import kind
from suite.config.reading import Loader, one_line
from suite.errors import SpecError

SWEEP_PREFIX = "sweep."
_SEGMENT = re.compile(r"^[A-Za-z0-9_-]+$")


def parse_sets(items: list[str] | None) -> tuple[dict[str, Any], dict[str, Any]]:
    """`--set` arguments -> (task overrides, sweep overrides), each {dotted path: value}."""
    task: dict[str, Any] = {}
    sweep: dict[str, Any] = {}
    for item in items or []:
        path, sep, text = item.partition("=")
        path = path.strip()
        if not sep or not path:
            raise SpecError(one_line(f"--set {item}: expected PATH=VALUE, e.g. --set sizes=[100]"))
        if not all(_SEGMENT.match(s) for s in path.split(".")):
            raise SpecError(one_line(f"--set {path}: a field path is names (or list indexes) joined by '.'"))
        try:
            value = yaml.load(text, Loader=Loader) if text.strip() else None
        except yaml.YAMLError as err:
            problem = getattr(err, "problem", None) or str(err).splitlines()[0]
            raise SpecError(one_line(f"--set {path}: value {text!r} is not valid YAML ({problem})")) from None
        is_sweep = path.startswith(SWEEP_PREFIX)
        target, field = (sweep, path.removeprefix(SWEEP_PREFIX)) if is_sweep else (task, path)
        if field.split(".")[0] == "profiles":
            raise SpecError(f"--set {path}: profiles are merged before --set; set the field itself")
        if field in target:
            raise SpecError(f"--set {path}: given twice")
        target[field] = value
    return task, sweep


def apply_sets(raw: dict[str, Any], sets: Mapping[str, Any] | None, prefix: str = "") -> dict[str, Any]:
    """A copy of `raw` with each dotted path set. Missing mappings are created: the schema then
    rejects a field it does not know, naming it, exactly as in a YAML file."""
    out = copy.deepcopy(raw)
    for path, value in (sets or {}).items():
        node: dict | list = out
        *parents, last = path.split(".")
        for depth, key in enumerate(parents):
            where = prefix + ".".join(parents[: depth + 1])
            if isinstance(node, list):
                node = node[_index(node, key, where)]
            else:
                if node.get(key) is None:
                    node[key] = {}
                node = node[key]
            if not isinstance(node, dict | list):
                raise SpecError(f"--set {prefix}{path}: '{where}' is {kind(node)}, not a mapping or list")
        if isinstance(node, list):
            node[_index(node, last, prefix + path)] = value
        else:
            node[last] = value
    return out


def _index(items: list[Any], key: str, where: str) -> int:
    if not key.isdigit() or int(key) >= len(items):
        raise SpecError(f"--set {where}: expected a list index 0..{len(items) - 1}, got {key!r}")
    return int(key)


def describe_sets(sets: Mapping[str, Any] | None, prefix: str = "") -> str:
    """' with --set a=1, b=[2]' for error messages ('' when none)."""
    if not sets:
        return ""
    return " with --set " + ", ".join(f"{prefix}{k}={json.dumps(v, default=str)}" for k, v in sets.items())
