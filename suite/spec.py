"""Task and sweep specs: YAML read with `yaml.safe_load` into one validated schema.

Profiles (`smoke`, `default`, `full`, ...) are partial overrides kept in the YAML itself;
`load_task` / `load_sweep` deep-merge the chosen profile before validation, so a profile
can never smuggle in a field the schema does not know.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from suite.errors import SpecError
from suite.metrics import METRICS_BY_HEAD

if TYPE_CHECKING:  # suite.sweep builds on this module's Strict base
    from suite.sweep import SweepSpec

Size = int | Literal["full"]


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class HubSource(Strict):
    path: str
    name: str | None = None
    revision: str | None = None
    train_split: str = "train"
    validation_split: str = "validation"
    test_split: str | None = None


class DataSpec(Strict):
    local: str | None = Field(None, description="folder under the data directory")
    format: Literal["tsv", "csv", "jsonl", "conll", "mrqa", "squad"] = "tsv"
    train: str | None = None
    validation: str | None = None
    test: str | None = None
    header: bool = True
    columns: list[str] | None = Field(None, description="column names for header-less files")
    text: list[str] | None = Field(None, min_length=1, max_length=2)
    label: str | None = None
    token_column: int = Field(0, description="conll: column index of the word")
    tag_column: int = Field(-1, description="conll: column index of the tag (-1 = last)")
    tag_scheme: Literal["iob1", "iob2", "iobes"] = Field("iob2", description="conll: tags in the file")
    hub: HubSource | None = None

    @model_validator(mode="after")
    def _has_a_source(self) -> DataSpec:
        if self.local is None and self.hub is None:
            raise ValueError("give `local` (a folder under the data directory) or `hub`")
        qa = self.format in ("mrqa", "squad")  # QA evaluates on a held-out pool (qa.eval_pool)
        if self.local is not None and (self.train is None or (self.validation is None and not qa)):
            raise ValueError("a local source needs `train` and `validation` file names")
        if not self.header and not self.columns:
            raise ValueError("`header: false` needs `columns` naming each column")
        if self.format in ("tsv", "csv", "jsonl") and (self.text is None or self.label is None):
            raise ValueError(f"format {self.format} needs `text` and `label` columns")
        return self


class MetricSpec(Strict):
    main: str
    extra: list[str] = []
    higher_is_better: bool = True


class FailureSpec(Strict):
    rule: Literal["trivial_baseline", "threshold"] = "trivial_baseline"
    margin: float = 0.0
    threshold: float | None = None

    @model_validator(mode="after")
    def _threshold_given(self) -> FailureSpec:
        if self.rule == "threshold" and self.threshold is None:
            raise ValueError("rule `threshold` needs a `threshold` value")
        return self


class TaggingSpec(Strict):
    crf: bool = Field(False, description="a CRF layer with Viterbi decoding over the linear scores")
    label_all_subtokens: bool = Field(False, description="label every sub-token (B- continues as I-)")


class QASpec(Strict):
    """Extractive QA: few-shot split files, the held-out evaluation pool, windows, decoding."""

    train_sizes: list[int] = Field(description="sizes that have split files (data.train pattern)")
    split_seeds: list[int] = Field(description="seeds that have split files; subsample seeds pick them")
    eval_pool: list[str] = Field(min_length=1, description="files whose questions form the held-out pool")
    eval_seed: int = 0
    doc_stride: int = Field(128, ge=8)
    n_best: int = Field(20, ge=1)
    max_answer_length: int = Field(30, ge=1)


class Reported(Strict):
    model: str
    value: float
    metric: str
    statistic: Literal["median", "mean", "max", "single", "test_server"]
    n_runs: int | None = None
    split: str
    source: str = Field(description="paper and table/figure")
    arxiv: str | None = None
    size: int | Literal["full"] | None = Field(None, description="training size it applies to (None: any)")
    note: str | None = None


class TaskSpec(Strict):
    name: str
    version: int
    head: Literal["classification", "tagging", "span"]
    data: DataSpec
    labels: list[str] | None = Field(None, description="classes, or entity types for tagging")
    regression: bool = False
    tagging: TaggingSpec = TaggingSpec()
    qa: QASpec | None = None
    eval_split: Literal["validation", "test"] = "validation"
    metric: MetricSpec
    max_length: int = Field(128, ge=8, le=8192)
    sizes: list[Size] = Field(min_length=1)
    model: str = "minilm-l6"
    sweep: str = "sweeps/seeds.yaml"
    failure: FailureSpec = FailureSpec()
    eval_limit: int | None = Field(None, ge=1, description="seeded dev subsample (cheap CPU runs)")
    reported: list[Reported] = []

    @field_validator("sizes")
    @classmethod
    def _positive_sizes(cls, sizes: list[Size]) -> list[Size]:
        if any(isinstance(s, int) and s < 2 for s in sizes):
            raise ValueError("sizes must be integers >= 2 or 'full'")
        return sizes

    @model_validator(mode="after")
    def _labels_and_metrics(self) -> TaskSpec:
        if self.head == "classification" and not self.regression and not self.labels:
            raise ValueError("a classification task needs `labels` (or `regression: true`)")
        if self.regression and self.labels:
            raise ValueError("a regression task takes no `labels`")
        if self.head == "tagging" and (self.data.format != "conll" or not self.labels):
            raise ValueError("a tagging task needs `data.format: conll` and `labels` (entity types)")
        if self.head == "span" and (self.qa is None or self.data.format not in ("mrqa", "squad")):
            raise ValueError("a span task needs a `qa` block and `data.format: mrqa` or `squad`")
        if self.head == "span" and (bad := [s for s in self.sizes if s not in self.qa.train_sizes]):
            raise ValueError(
                f"size {bad[0]} has no few-shot split file (qa.train_sizes {self.qa.train_sizes})"
            )
        if self.head != "span" and getattr(self.data, self.eval_split) is None and self.data.hub is None:
            raise ValueError(f"eval_split {self.eval_split!r} needs a `data.{self.eval_split}` file")
        known = METRICS_BY_HEAD[self.head]
        for name in [self.metric.main, *self.metric.extra]:
            if name not in known:
                raise ValueError(f"unknown metric {name!r} (known: {', '.join(sorted(known))})")
        return self


def _deep_merge(base: dict, override: dict) -> dict:
    out = dict(base)
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _deep_merge(out[key], value)
        else:
            out[key] = value
    return out


def read_yaml(path: Path) -> dict[str, Any]:
    if not path.is_file():
        raise SpecError(f"{path}: spec file not found")
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as err:
        raise SpecError(f"{path}: not valid YAML ({str(err).splitlines()[0]})") from None
    if not isinstance(raw, dict):
        raise SpecError(f"{path}: expected a mapping at the top level")
    return raw


def _validate(model: type[BaseModel], raw: dict, path: Path, where: str = "") -> Any:
    try:
        return model.model_validate(raw)
    except ValidationError as err:
        first = err.errors()[0]
        field = ".".join(str(p) for p in first["loc"]) or "(top level)"
        more = f" (+{err.error_count() - 1} more)" if err.error_count() > 1 else ""
        msg = first["msg"].removeprefix("Value error, ")
        raise SpecError(f"{path}{where}: field '{field}': {msg}{more}") from None


def _apply_profile(raw: dict, profile: str | None, path: Path, required: bool) -> dict:
    profiles = raw.pop("profiles", None) or {}
    if not isinstance(profiles, dict):
        raise SpecError(f"{path}: field 'profiles': expected a mapping of profile name to overrides")
    if profile is None or (profile not in profiles and (profile == "default" or not required)):
        return raw
    if profile not in profiles:
        known = ", ".join(sorted(profiles)) or "none"
        raise SpecError(f"{path}: field 'profiles': no profile {profile!r} (known: {known})")
    return _deep_merge(raw, profiles[profile] or {})


def profile_names(path: str | Path) -> list[str]:
    return sorted((read_yaml(Path(path)).get("profiles") or {}).keys())


def load_task(path: str | Path, profile: str | None = "default") -> TaskSpec:
    """A task profile sets data-side sizes (sizes, max_length, eval_limit); absent = the base."""
    path = Path(path)
    raw = _apply_profile(read_yaml(path), profile, path, required=False)
    return _validate(TaskSpec, raw, path, _where(profile))


def load_sweep(path: str | Path, profile: str | None = "default") -> SweepSpec:
    """A sweep profile sets the training side (hparams, space, seeds); it must exist in the sweep."""
    from suite.sweep import SweepSpec

    path = Path(path)
    raw = _apply_profile(read_yaml(path), profile, path, required=True)
    return _validate(SweepSpec, raw, path, _where(profile))


def _where(profile: str | None) -> str:
    return f" (profile {profile})" if profile and profile != "default" else ""


def spec_hash(spec: BaseModel) -> str:
    """Stable hash of a validated spec (provenance, cache keys)."""
    blob = json.dumps(spec.model_dump(mode="json"), sort_keys=True).encode()
    return hashlib.sha256(blob).hexdigest()[:16]
