"""Reading a spec file: YAML as plain data (a key given twice is an error), profiles merged
before validation, and every error as one line naming the file and field."""

from __future__ import annotations

import copy
import hashlib
import re
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from suite.config.fields import describe, kind
from suite.errors import SpecError


def _deep_merge(base: dict, override: dict) -> dict:
    out = dict(base)
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _deep_merge(out[key], value)
        else:
            out[key] = value
    return out


_BREAKS = re.compile(r"[\n\r\x0b\x0c\x1c-\x1e\x85\u2028\u2029]")


def one_line(text: str) -> str:
    """Escape line breaks (from YAML keys, values or paths): an error is always one line."""
    return _BREAKS.sub(lambda m: repr(m.group())[1:-1], text)


class Loader(yaml.SafeLoader):
    """`yaml.SafeLoader` that rejects a key given twice in one mapping (YAML keeps the last)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue
            key = self.construct_object(key_node, deep=True)
            try:
                duplicate = key in seen
            except TypeError:  # an unhashable key: the base loader reports it
                break
            if duplicate:
                raise yaml.constructor.ConstructorError(
                    None, None, f"duplicate key {key!r}", key_node.start_mark
                )
            seen.add(key)
        return super().construct_mapping(node, deep)


def _yaml_error(path: Path, err: yaml.YAMLError) -> SpecError:
    mark = getattr(err, "problem_mark", None) or getattr(err, "context_mark", None)
    where = f"{path}:{mark.line + 1}" if mark is not None else f"{path}"
    problem = getattr(err, "problem", None) or getattr(err, "context", None) or str(err).splitlines()[0]
    return SpecError(one_line(f"{where}: not valid YAML ({problem})"))


MAX_SPEC_BYTES = 256 * 1024  # the largest shipped spec is ~3 KB; PyYAML's pure-Python loader takes
# minutes over megabytes, so a larger file is refused before it is parsed

# (path, content) -> its mapping: a spec is parsed once per process, however many checks read it
# (validation, every profile, the catalog); reading its bytes again costs nothing beside parsing
_READ: dict[tuple[Path, bytes], dict[str, Any]] = {}


def read_yaml(path: Path) -> dict[str, Any]:
    """A spec file's top-level mapping (a copy: callers may change it), parsed once per process."""
    if not path.is_file():
        raise SpecError(one_line(f"{path}: spec file not found"))
    if (size := path.stat().st_size) > MAX_SPEC_BYTES:
        shown, limit = f"{size:,}", f"{MAX_SPEC_BYTES:,}"
        raise SpecError(one_line(f"{path}: {shown} bytes, over the {limit} a task or sweep spec may hold"))
    data = path.read_bytes()
    key = (path, hashlib.sha1(data).digest())
    if key not in _READ:
        _READ[key] = _parsed(path, data)
    return copy.deepcopy(_READ[key])


def _parsed(path: Path, data: bytes) -> dict[str, Any]:
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as err:
        line = data[: err.start].count(b"\n") + 1
        raise SpecError(one_line(f"{path}:{line}: not UTF-8 text (byte {data[err.start]:#04x})")) from None
    try:
        raw = yaml.load(text, Loader=Loader)  # a SafeLoader: plain data only, no Python tags
    except yaml.YAMLError as err:
        raise _yaml_error(path, err) from None
    if not isinstance(raw, dict):
        got = "an empty file" if raw is None else kind(raw)
        raise SpecError(one_line(f"{path}: expected a mapping at the top level, got {got}"))
    return raw


def validate(model: type[BaseModel], raw: dict, path: Path, where: str = "") -> Any:
    try:
        return model.model_validate(raw)
    except ValidationError as err:
        raise SpecError(one_line(f"{path}{where}: {describe(err)}")) from None


def _profiles(raw: dict, path: Path) -> dict[str, dict]:
    """The `profiles` block: profile name -> a mapping of overrides (null = no overrides)."""
    profiles = raw.get("profiles")
    if profiles is None:
        return {}
    if not isinstance(profiles, dict):
        raise SpecError(
            one_line(f"{path}: field 'profiles': expected a mapping of profile name to overrides")
        )
    for name, overrides in profiles.items():
        if not isinstance(name, str):
            raise SpecError(one_line(f"{path}: field 'profiles': profile names are strings, got {name!r}"))
        if overrides is not None and not isinstance(overrides, dict):
            raise SpecError(
                one_line(
                    f"{path}: field 'profiles.{name}': expected a mapping of overrides, got {kind(overrides)}"
                )
            )
    return {name: overrides or {} for name, overrides in profiles.items()}


def apply_profile(raw: dict, profile: str | None, path: Path, required: bool) -> dict:
    profiles = _profiles(raw, path)
    raw = {k: v for k, v in raw.items() if k != "profiles"}
    if profile is None or (profile not in profiles and (profile == "default" or not required)):
        return raw
    if profile not in profiles:
        known = ", ".join(sorted(profiles)) or "none"
        raise SpecError(one_line(f"{path}: field 'profiles': no profile {profile!r} (known: {known})"))
    return _deep_merge(raw, profiles[profile])


def load_checked(model: type[BaseModel], path: Path, profile: str | None, required: bool) -> dict:
    """The file's mapping under `profile`, once its base and every profile validate as written:
    what `suite validate` refuses, a run refuses too, with the same line, whatever profile it picks
    (a profile must not mend a wrong base value before anything checks it)."""
    raw = read_yaml(path)
    for name in [None, *sorted(_profiles(raw, path))]:
        validate(model, apply_profile(raw, name, path, required=True), path, profile_label(name))
    return apply_profile(raw, profile, path, required)


def profile_names(path: str | Path) -> list[str]:
    path = Path(path)
    return sorted(_profiles(read_yaml(path), path))


def profile_label(profile: str | None) -> str:
    return f" (profile {profile})" if profile and profile != "default" else ""
