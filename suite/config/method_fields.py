"""The two hyperparameters that name a fine-tuning method from the user's own code: `method`, an
import path `package.module:Object`, and `method_args`, the keyword arguments its object is called
with. Read here as plain values (nothing is imported: a spec is checked before any method is,
suite/model/method_checks.py), in one canonical form, so that a setting has one trial key however
its arguments were written."""

from __future__ import annotations

import json
import math
import re
from typing import Annotated, Any

from pydantic import PlainValidator

from suite.config.fields import kind

_NAME = r"[A-Za-z_]\w*"
PATH = re.compile(rf"{_NAME}(\.{_NAME})*:{_NAME}(\.{_NAME})*")
# What YAML 1.1 leaves a string though a reader means a number (`1e-4`): read as that number.
_NUMBER = re.compile(r"[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?")
_EXACT = 2**53  # floats below this hold whole numbers exactly


def _method_path(value: Any) -> str:
    if not isinstance(value, str) or not PATH.fullmatch(value.strip()):
        shown = repr(value) if isinstance(value, str) else kind(value)
        raise ValueError(
            f"expected an import path package.module:Object (e.g. mypkg.rdrop:RDrop), got {shown}"
        )
    return value.strip()


def canonical_value(value: Any, where: str = "method_args") -> Any:
    """An argument as it enters the key: mappings with sorted keys, a number written as a string
    (`1e-4`) read as that number, a whole float as an int (4.0 and 4 are one value), recursively."""
    if isinstance(value, dict):
        if bad := [k for k in value if not isinstance(k, str)]:
            raise ValueError(f"{where}: argument names are strings, got {bad[0]!r}")
        return {k: canonical_value(value[k], f"{where}.{k}") for k in sorted(value)}
    if isinstance(value, list | tuple):
        return [canonical_value(v, where) for v in value]
    if isinstance(value, str) and _NUMBER.fullmatch(value.strip()):
        value = float(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"{where}: a finite number, got {value}")
        return int(value) if value.is_integer() and abs(value) < _EXACT else value
    if value is None or isinstance(value, bool | int | str):
        return value
    raise ValueError(f"{where}: a number, boolean, string, list or mapping, got {kind(value)}")


def _method_args(value: Any) -> dict[str, Any] | None:
    if value is None:
        return None
    if isinstance(value, str) and value.lstrip().startswith("{"):  # as a record holds it (JSON text)
        try:
            value = json.loads(value)
        except ValueError:
            raise ValueError(f"expected a mapping of argument names to values, got {value!r}") from None
    if not isinstance(value, dict):
        raise ValueError(f"expected a mapping of argument names to values, got {kind(value)}")
    return canonical_value(value) or None  # no arguments: the same setting as none given


MethodPath = Annotated[str, PlainValidator(_method_path)]
MethodArgs = Annotated[dict[str, Any] | None, PlainValidator(_method_args)]
