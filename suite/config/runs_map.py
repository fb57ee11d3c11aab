"""`suite import`: how per-run results trained elsewhere map onto the suite's trial records (which
column holds the score, the size, the seeds, each hyperparameter, an outcome or an error), and the
typed request of the command. A mapping is read from a small YAML (`--map`) or built from flags;
without either, the columns are read in the suite's own spelling (`suite export`'s)."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import Field, model_validator

from suite.config.fields import FieldError, Strict
from suite.config.reading import read_yaml, validate
from suite.config.request import model_problem
from suite.errors import SpecError

Scalar = str | int | float | bool
# A folder-name pattern's placeholder (`{seed}`), or a regular expression's named group.
_PLACEHOLDER = re.compile(r"\{(\w+)\}")


class SeedColumns(Strict):
    """One column per seed axis (the suite's own three)."""

    init: str
    order: str
    subsample: str | None = Field(None, description="default: as one seed column maps it")


class RunsMap(Strict):
    """Column names, as the file spells them (a dotted name reaches into a JSON line's objects:
    `config.learning_rate`). Every field is optional; what no column holds, `fixed` may state."""

    score: str | None = Field(None, description="the task's main metric, one run's final dev score")
    size: str | None = Field(None, description="training examples, `full` or K per class (`16/class`)")
    seed: str | None = Field(None, description="one seed: init = order = seed; subsample: the size's draw")
    seeds: SeedColumns | None = None
    hparams: dict[str, str] = Field(default_factory=dict, description="hyperparameter -> its column")
    fixed: dict[str, Scalar] = Field(default_factory=dict, description="size or hyperparameter -> a value")
    outcome: str | None = Field(None, description="succeeded, failed, errored or pruned (the suite's words)")
    error: str | None = Field(None, description="an error message or a tracker's run state")
    attempt: str | None = None
    folder_pattern: str | None = Field(
        None,
        description="Trainer output folders: `{name}` placeholders (or named groups) in the folder's name",
    )

    @model_validator(mode="after")
    def _one_seed_source(self) -> RunsMap:
        if self.seed and self.seeds:
            raise FieldError("seeds", "give `seed` (one column for every axis) or `seeds`, not both")
        if clash := sorted(set(self.fixed) & ({*self.hparams} | ({"size"} if self.size else set()))):
            raise FieldError("fixed", f"{clash[0]} is both a column and fixed")
        if self.folder_pattern is not None:
            pattern_regex(self.folder_pattern)
        return self

    def columns(self) -> dict[str, str]:
        """What each mapped column is read as (`hparams.lr`, `seeds.init`, `score`, ...) -> column."""
        named = {k: getattr(self, k) for k in ("score", "size", "seed", "outcome", "error", "attempt")}
        out = {k: v for k, v in named.items() if v}
        if self.seeds is not None:
            out |= {f"seeds.{k}": v for k, v in self.seeds.model_dump().items() if v}
        return out | {f"hparams.{k}": v for k, v in self.hparams.items()}

    def identity(self) -> str:
        """The mapping as one canonical string: part of an imported study's identity."""
        return json.dumps(self.model_dump(mode="json"), sort_keys=True)


def pattern_regex(pattern: str) -> re.Pattern[str]:
    """A folder-name pattern as a regular expression matched against the whole name: `{name}`
    placeholders match any text without a path separator; a pattern with named groups is used as
    written. One line naming the pattern where it is not a valid one."""
    text = pattern if "(?P<" in pattern else _from_placeholders(pattern)
    try:
        return re.compile(text)
    except re.error as err:
        raise FieldError("folder_pattern", f"{pattern!r} is not a valid pattern ({err})") from None


def _from_placeholders(pattern: str) -> str:
    parts, at = [], 0
    for found in _PLACEHOLDER.finditer(pattern):
        parts += [re.escape(pattern[at : found.start()]), f"(?P<{found.group(1)}>[^/]+?)"]
        at = found.end()
    return "".join([*parts, re.escape(pattern[at:])])


def read_map(path: Path) -> RunsMap:
    """A mapping YAML, every error one line naming the file and field."""
    return validate(RunsMap, read_yaml(path), path)


def map_from_flags(flags: dict[str, Any], hparams: list[str], fixed: list[str]) -> RunsMap | None:
    """A mapping from the command's flags (`--score COL`, `--hparam lr=COL`, `--fixed size=500`);
    None where none was given (the suite's own spelling is read)."""
    given = {k: v for k, v in flags.items() if v is not None}
    raw: dict[str, Any] = {**given, "hparams": _pairs("--hparam", hparams), "fixed": _pairs("--fixed", fixed)}
    raw["fixed"] = {k: scalar(v) for k, v in raw["fixed"].items()}
    if not given and not hparams and not fixed:
        return None
    return validate(RunsMap, raw, Path("flags"))


def _pairs(flag: str, items: list[str]) -> dict[str, str]:
    out = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not name.strip() or not value.strip():
            raise SpecError(f"{flag}: expected NAME=VALUE, got {item!r}")
        out[name.strip()] = value.strip()
    return out


def scalar(text: str) -> Scalar:
    """A flag's value, or a CSV cell's text, as YAML would read it: 500, 2e-5, true, full."""
    try:
        return int(text)
    except ValueError:
        pass
    try:
        return float(text)
    except ValueError:
        return {"true": True, "false": False}.get(text.lower(), text)


MAX_FILE_BYTES = 512 * 2**20  # one input file: a 100,000-run CSV is ~10 MB; an export of 10,000
# trials with their per-example outcomes ~50 MB; past this, parsing alone takes gigabytes


@dataclass(frozen=True)
class ImportRequest:
    """`suite import FILE... --task TASK --model MODEL`: what to read, how, and what it describes."""

    files: tuple[Path, ...]
    task: str
    model: str
    out: Path = Path("runs")
    mapping: RunsMap | None = None  # None: the suite's own spelling (`suite export`'s columns)
    scale: float = 1.0  # scores are divided by it: 100 for scores written on 0-100
    baseline: float | None = None  # the failure rule's baseline where the task's data is not reachable
    head: str | None = None  # the classifier kind the runs trained (`auto`, `pooler`, `cls`)
    max_length: int | None = None
    eval_split: str = "validation"
    data_dir: Path | None = None
    max_bytes: int = MAX_FILE_BYTES

    def __post_init__(self) -> None:
        if problem := model_problem(self.model):
            raise SpecError(f"--model {self.model!r}: {problem}")
        if self.max_length is not None and self.max_length < 1:
            raise SpecError(f"--max-length: expected a positive integer, got {self.max_length}")
        if not self.scale > 0:
            raise SpecError(f"--scale: expected a positive number, got {self.scale}")
        if not self.files:
            raise SpecError("import: give at least one file or Trainer output folder")
