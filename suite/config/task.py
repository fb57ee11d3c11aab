"""Task and sweep specs: YAML read with `yaml.safe_load` into one validated schema.

Profiles (`smoke`, `default`, `full`, ...) are partial overrides kept in the YAML itself;
`load_task` / `load_sweep` deep-merge the chosen profile before validation, so a profile
can never smuggle in a field the schema does not know.
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal

import yaml
from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PlainValidator,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic import Strict as StrictType

from suite.errors import SpecError
from suite.metrics import METRICS_BY_HEAD
from suite.spec_hub import HubSource, hub_labels_problem

if TYPE_CHECKING:  # suite.sweep builds on this module's Strict base
    from suite.sweep import SweepSpec


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


def kind(value: Any) -> str:
    """What a YAML value is, in words ("a list", "an integer")."""
    names = {bool: "a boolean", int: "an integer", float: "a number", str: "a string", list: "a list"}
    if value is None:
        return "null"
    return names.get(type(value), "a mapping" if isinstance(value, dict) else f"a {type(value).__name__}")


def _size(value: Any) -> int | str:
    # One check and one message, instead of pydantic's two union branches.
    if value == "full" or (type(value) is int and value >= 2):
        return value
    raise ValueError(f"a size is an integer >= 2 or 'full', got {value!r}")


def _sizes(value: Any) -> list[int | str]:
    # Checked as one field, so an error names `sizes` whichever item is wrong.
    if not isinstance(value, list) or not value:
        got = "an empty list" if value == [] else kind(value)
        raise ValueError(f"expected a non-empty list of sizes, got {got}")
    _no_duplicates(value, "size")
    return [_size(v) for v in value]


Size = Annotated[int | Literal["full"], PlainValidator(_size)]
Sizes = Annotated[list[int | Literal["full"]], PlainValidator(_sizes)]


class FieldError(ValueError):
    """A cross-field check's failure, with the field (relative to the model raising it) to name."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


def _no_duplicates(values: list[Any] | None, what: str, field: str = "") -> None:
    seen: set[str] = set()
    for value in values or []:
        if (key := repr(value)) in seen:
            raise FieldError(field, f"{what} {value!r} is listed twice")
        seen.add(key)


class DataSpec(Strict):
    local: str | None = Field(None, description="folder under the data directory")
    format: Literal["tsv", "csv", "jsonl", "conll", "mrqa", "squad"] = "tsv"
    train: str | None = None
    validation: str | None = None
    test: str | None = None
    header: Bool = True
    columns: list[str] | None = Field(None, min_length=1, description="column names for header-less files")
    text: list[str] | None = Field(None, min_length=1, max_length=2)
    label: str | None = None
    token_column: Int = Field(0, description="conll: column index of the word")
    tag_column: Int = Field(-1, description="conll: column index of the tag (-1 = last)")
    tag_scheme: Literal["iob1", "iob2", "iobes"] = Field("iob2", description="conll: tags in the file")
    hub: HubSource | None = None

    @model_validator(mode="after")
    def _has_a_source(self) -> DataSpec:
        if self.local is None and self.hub is None:
            raise FieldError("local", "give `local` (a folder under the data directory) or `hub`")
        qa = self.format in ("mrqa", "squad")  # QA evaluates on a held-out pool (qa.eval_pool)
        if self.local is not None and self.train is None:
            raise FieldError("train", "a local source needs `train` and `validation` file names")
        if self.local is not None and self.validation is None and not qa:
            raise FieldError("validation", "a local source needs `train` and `validation` file names")
        if not self.header and not self.columns:
            raise FieldError("columns", "`header: false` needs `columns` naming each column")
        _no_duplicates(self.columns, "column", "columns")
        if self.format in ("tsv", "csv", "jsonl") and (self.text is None or self.label is None):
            raise FieldError(
                "text" if self.text is None else "label",
                f"format {self.format} needs `text` and `label` columns",
            )
        self._columns_listed()
        if self.format == "conll" and self.token_column == self.tag_column:
            raise FieldError("tag_column", "the tag column cannot be the token column")
        if qa and self.train is not None:
            _check_pattern(self.train)
        return self

    def _columns_listed(self) -> None:
        """With explicit `columns`, the text and label columns must be among them."""
        if not self.columns or self.format not in ("tsv", "csv"):
            return
        for field, names in (("text", self.text or []), ("label", [self.label] if self.label else [])):
            if missing := [n for n in names if n not in self.columns]:
                raise FieldError(field, f"column {missing[0]!r} is not in `columns` {self.columns}")


def _check_pattern(pattern: str) -> None:
    """A QA training file pattern takes only `{seed}` and `{size}` (formatted per split)."""
    try:
        pattern.format(seed=0, size=0)
    except (KeyError, IndexError, ValueError) as err:
        raise FieldError(
            "train", f"pattern {pattern!r} takes only {{seed}} and {{size}} ({type(err).__name__}: {err})"
        ) from None


class MetricSpec(Strict):
    main: str
    extra: list[str] = []
    higher_is_better: Bool = True


class FailureSpec(Strict):
    rule: Literal["trivial_baseline", "threshold"] = "trivial_baseline"
    margin: Float = 0.0
    threshold: Float | None = None

    @model_validator(mode="after")
    def _threshold_given(self) -> FailureSpec:
        if self.rule == "threshold" and self.threshold is None:
            raise FieldError("threshold", "rule `threshold` needs a `threshold` value")
        return self


class TaggingSpec(Strict):
    crf: Bool = Field(False, description="a CRF layer with Viterbi decoding over the linear scores")
    label_all_subtokens: Bool = Field(False, description="label every sub-token (B- continues as I-)")


PositiveInt = Annotated[int, StrictType(), Field(ge=1)]


class QASpec(Strict):
    """Extractive QA: few-shot split files, the held-out evaluation pool, windows, decoding."""

    # The split files and the pool are a local source's; a hub source subsamples its train split
    # and evaluates on its validation split.
    train_sizes: list[PositiveInt] = Field([], description="sizes that have split files (data.train pattern)")
    split_seeds: list[Int] = Field([], description="seeds that have split files; subsample seeds pick them")
    eval_pool: list[str] = Field([], description="files whose questions form the held-out pool")
    eval_seed: Int = 0
    doc_stride: Int = Field(128, ge=8)
    n_best: Int = Field(20, ge=1)
    max_answer_length: Int = Field(30, ge=1)

    @model_validator(mode="after")
    def _distinct(self) -> QASpec:
        for field, what in (("train_sizes", "size"), ("split_seeds", "seed"), ("eval_pool", "file")):
            _no_duplicates(getattr(self, field), what, field)
        return self


class Reported(Strict):
    model: str
    value: Float
    metric: str
    statistic: Literal["median", "mean", "max", "single", "test_server"]
    n_runs: PositiveInt | None = None
    split: str
    source: str = Field(description="paper and table/figure")
    arxiv: str | None = None
    size: Size | None = Field(None, description="training size it applies to (None: the full training set)")
    same_as: list[str] | None = Field(None, description="other names of the same checkpoint")
    head: Literal["auto", "pooler", "cls", "mean", "crf"] = Field(
        "auto", description="the head the paper used"
    )
    note: str | None = None


class TaskSpec(Strict):
    name: str
    version: Int
    head: Literal["classification", "tagging", "span"]
    data: DataSpec
    labels: list[str] | None = Field(None, min_length=1, description="classes, or entity types for tagging")
    regression: Bool = False
    classifier: Literal["model", "auto", "pooler", "cls", "mean"] = Field(
        "model",
        description="classification head: the model's declared head (else auto), the family's reference "
        "head, pretrained pooler, raw [CLS], masked mean of the last layer",
    )
    tagging: TaggingSpec = TaggingSpec()
    qa: QASpec | None = None
    eval_split: Literal["validation", "test"] = "validation"
    metric: MetricSpec
    max_length: Int = Field(128, ge=8, le=8192)
    sizes: Sizes
    model: str = "minilm-l6"
    sweep: str = "sweeps/seeds.yaml"
    failure: FailureSpec = FailureSpec()
    eval_limit: Int | None = Field(None, ge=1, description="seeded dev subsample (cheap CPU runs)")
    reported: list[Reported] = []

    @field_validator("labels")
    @classmethod
    def _distinct(cls, labels: list[str] | None) -> list[str] | None:
        _no_duplicates(labels, "label")
        return labels

    @model_validator(mode="after")
    def _labels_and_metrics(self) -> TaskSpec:
        self._check_labels()
        self._check_head()
        if self.head != "span" and getattr(self.data, self.eval_split) is None and self.data.hub is None:
            raise FieldError("eval_split", f"{self.eval_split!r} needs a `data.{self.eval_split}` file")
        known = METRICS_BY_HEAD[self.head]
        for field, names in (("metric.main", [self.metric.main]), ("metric.extra", self.metric.extra)):
            for name in names:
                if name not in known:
                    raise FieldError(field, f"unknown metric {name!r} (known: {', '.join(sorted(known))})")
        return self

    def _check_labels(self) -> None:
        if self.head == "classification" and not self.regression and not self.labels:
            raise FieldError("labels", "a classification task needs `labels` (or `regression: true`)")
        if self.regression and self.labels:
            raise FieldError("labels", "a regression task takes no `labels`")
        if self.head == "classification" and self.labels and len(self.labels) < 2:
            raise FieldError("labels", "a classification task needs at least two labels")
        if self.head == "tagging" and self.labels:
            # Entity types: the B-/I- prefixes and O are added by the suite.
            if bad := [t for t in self.labels if t == "O" or t[:2] in ("B-", "I-", "E-", "S-")]:
                raise FieldError("labels", f"{bad[0]!r} is a tag; list entity types (e.g. PER) instead")
        if self.data.hub and (
            problem := hub_labels_problem(self.data.hub, self.head, self.labels, self.regression)
        ):
            raise FieldError("data.hub.labels", problem)

    def _check_head(self) -> None:
        if self.head == "tagging" and self.data.format != "conll":
            raise FieldError("data.format", "a tagging task needs `data.format: conll`")
        if self.head == "tagging" and not self.labels:
            raise FieldError("labels", "a tagging task needs `labels` (entity types)")
        if self.head != "tagging" and self.data.format == "conll":
            raise FieldError("data.format", f"format conll is for a tagging task, not {self.head}")
        if self.head != "span" and self.data.format in ("mrqa", "squad"):
            raise FieldError("data.format", f"format {self.data.format} is for a span task, not {self.head}")
        if self.head != "span":
            return
        if self.data.format not in ("mrqa", "squad"):
            raise FieldError("data.format", "a span task needs `data.format: mrqa` or `squad`")
        if self.qa is None:
            raise FieldError("qa", "a span task needs a `qa` block")
        if self.data.local is not None:
            for field in ("train_sizes", "split_seeds", "eval_pool"):
                if not getattr(self.qa, field):
                    raise FieldError(f"qa.{field}", "a local QA source needs a non-empty list")
        if self.data.local is not None and (bad := [s for s in self.sizes if s not in self.qa.train_sizes]):
            raise FieldError(
                "sizes", f"size {bad[0]} has no few-shot split file (qa.train_sizes {self.qa.train_sizes})"
            )
        if self.qa.doc_stride >= self.max_length // 2:
            raise FieldError(
                "qa.doc_stride",
                f"{self.qa.doc_stride} leaves no room for the question in windows of "
                f"max_length {self.max_length} (use less than half of it)",
            )


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


class _Loader(yaml.SafeLoader):
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


def read_yaml(path: Path) -> dict[str, Any]:
    if not path.is_file():
        raise SpecError(one_line(f"{path}: spec file not found"))
    data = path.read_bytes()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as err:
        line = data[: err.start].count(b"\n") + 1
        raise SpecError(one_line(f"{path}:{line}: not UTF-8 text (byte {data[err.start]:#04x})")) from None
    try:
        raw = yaml.load(text, Loader=_Loader)  # a SafeLoader: plain data only, no Python tags
    except yaml.YAMLError as err:
        raise _yaml_error(path, err) from None
    if not isinstance(raw, dict):
        got = "an empty file" if raw is None else kind(raw)
        raise SpecError(one_line(f"{path}: expected a mapping at the top level, got {got}"))
    return raw


def _validate(model: type[BaseModel], raw: dict, path: Path, where: str = "") -> Any:
    try:
        return model.model_validate(raw)
    except ValidationError as err:
        raise SpecError(one_line(f"{path}{where}: {describe(err)}")) from None


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


def _apply_profile(raw: dict, profile: str | None, path: Path, required: bool) -> dict:
    profiles = _profiles(raw, path)
    raw = {k: v for k, v in raw.items() if k != "profiles"}
    if profile is None or (profile not in profiles and (profile == "default" or not required)):
        return raw
    if profile not in profiles:
        known = ", ".join(sorted(profiles)) or "none"
        raise SpecError(one_line(f"{path}: field 'profiles': no profile {profile!r} (known: {known})"))
    return _deep_merge(raw, profiles[profile])


def profile_names(path: str | Path) -> list[str]:
    path = Path(path)
    return sorted(_profiles(read_yaml(path), path))


def load_task(path: str | Path, profile: str | None = "default", sets: dict | None = None) -> TaskSpec:
    """A task profile sets data-side sizes (sizes, max_length, eval_limit); absent = the base.
    `sets` ({field path: value}, from `--set`) apply after the profile, before validation."""
    from suite.overrides import apply_sets, describe_sets

    path = Path(path)
    raw = apply_sets(_apply_profile(read_yaml(path), profile, path, required=False), sets)
    return _validate(TaskSpec, raw, path, _where(profile) + describe_sets(sets))


def load_sweep(path: str | Path, profile: str | None = "default", sets: dict | None = None) -> SweepSpec:
    """A sweep profile sets the training side (hparams, space, seeds); it must exist in the sweep."""
    from suite.overrides import SWEEP_PREFIX, apply_sets, describe_sets
    from suite.sweep import SweepSpec

    path = Path(path)
    raw = apply_sets(_apply_profile(read_yaml(path), profile, path, required=True), sets, SWEEP_PREFIX)
    return _validate(SweepSpec, raw, path, _where(profile) + describe_sets(sets, SWEEP_PREFIX))


def _where(profile: str | None) -> str:
    return f" (profile {profile})" if profile and profile != "default" else ""


def spec_hash(spec: BaseModel) -> str:
    """Stable hash of a validated spec (provenance, cache keys)."""
    blob = json.dumps(spec.model_dump(mode="json"), sort_keys=True).encode()
    return hashlib.sha256(blob).hexdigest()[:16]
