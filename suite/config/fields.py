"""The field types every spec schema shares: strict integers and booleans, numbers that are
never booleans, seeds, the frozen base model, and cross-field errors that name their field."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, TypeAdapter, ValidationError
from pydantic import Strict as StrictType


def _not_a_bool(value: Any) -> Any:
    # pydantic's lax mode reads `true` as 1.0; a YAML boolean is never a number here.
    if isinstance(value, bool):
        raise ValueError("Input should be a valid number, not a boolean")
    return value


# Integers and booleans are strict (no `true` as 1, no "3" or 1 as a boolean); floats stay lax so
# that `5e-5`, which YAML 1.1 reads as a string, still means a number.
Int = Annotated[int, StrictType()]
Bool = Annotated[bool, StrictType()]
Float = Annotated[float, BeforeValidator(_not_a_bool)]
Seed = Annotated[int, StrictType(), Field(ge=0, lt=2**32)]  # numpy and Optuna seeds are uint32


def as_read(adapter: TypeAdapter, value: Any) -> Any:
    """`value` as `adapter` reads it, where that is another value: `1e-4` (a string to YAML 1.1)
    becomes 0.0001, so it is one value with `1.0e-4` wherever a spec is compared or fingerprinted.
    A value read as an equal one stays as given (an int for a float stays an int: what a stored
    fingerprint holds does not change), and one refused stays for the check that names it."""
    try:
        read = adapter.validate_python(value)
    except ValidationError:
        return value
    return value if read == value else read


def kind(value: Any) -> str:
    """What a YAML value is, in words ("a list", "an integer")."""
    names = {bool: "a boolean", int: "an integer", float: "a number", str: "a string", list: "a list"}
    if value is None:
        return "null"
    return names.get(type(value), "a mapping" if isinstance(value, dict) else f"a {type(value).__name__}")


class FieldError(ValueError):
    """A cross-field check's failure, with the field (relative to the model raising it) to name."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


def describe(err: ValidationError) -> str:
    """The first error as "field 'a.b': message (+N more)"; a cross-field check names its field."""
    first = err.errors()[0]
    loc = [str(p) for p in first["loc"]]
    cause = (first.get("ctx") or {}).get("error")
    if isinstance(cause, FieldError) and cause.field:
        loc.append(cause.field)
    field = ".".join(loc) or "(top level)"
    more = f" (+{err.error_count() - 1} more)" if err.error_count() > 1 else ""
    msg = first["msg"].removeprefix("Value error, ")
    return f"field '{field}': {msg}{more}"
