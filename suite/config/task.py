"""The task schema: data source, labels, metric, failure rule, sizes, QA windows, cited results.

Profiles (`smoke`, `default`, `full`, ...) are partial overrides kept in the YAML itself;
`load_task` deep-merges the chosen profile before validation, so a profile can never smuggle
in a field the schema does not know.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field, PlainValidator, field_validator, model_validator
from pydantic import Strict as StrictType

from suite.config.fields import Bool, FieldError, Float, Int, Strict, kind
from suite.config.hub import HubSource, hub_labels_problem
from suite.config.overrides import apply_sets, describe_sets
from suite.config.reading import load_checked, profile_label, validate
from suite.config.request import model_problem, segment_problem

# The metric names each head computes (suite/model/metrics.py implements them): a spec is
# checked against these without importing the heads or their libraries.
METRICS_BY_HEAD: dict[str, set[str]] = {
    "classification": {"accuracy", "matthews", "f1", "pearson", "spearman"},
    "tagging": {"entity_f1", "entity_f1_strict", "precision", "recall"},
    "span": {"exact_match", "f1"},
}
# The metrics where a lower value is better (a loss, an error rate). Every metric a head computes
# today is a score or a correlation, so none is; the direction of a metric is never the user's to
# choose: the failure rule, the leaderboard order and every comparison read it from here.
LOWER_IS_BETTER: set[str] = set()


def higher_is_better(metric: str | None) -> bool:
    """The direction of a metric by its name (an unnamed or unknown one is a score)."""
    return metric not in LOWER_IS_BETTER


CORRELATIONS = {"matthews", "pearson", "spearman"}  # in [-1, 1]; every other metric a share in [0, 1]


def metric_range(metric: str) -> tuple[float, float]:
    """The values a metric takes on its natural scale (suite/model/metrics.py): what an imported
    score must lie in, so that a score written on 0-100 is caught rather than read as 100x."""
    return (-1.0, 1.0) if metric in CORRELATIONS else (0.0, 1.0)


PER_CLASS = "/class"  # a K-shot size: `16/class` draws 16 examples of every class


def per_class_k(size: Any) -> int | None:
    """K of a K-shot size (`16/class` -> 16); None for a total size or `full`."""
    if isinstance(size, str) and size.endswith(PER_CLASS):
        k = size.removesuffix(PER_CLASS)
        if k.isascii() and k.isdigit() and not k.startswith("0"):
            return int(k)
    return None


def size_order(size: Any) -> tuple[int, int, str]:
    """Sizes in a stable display order: totals by number, then K-shot sizes by K, then `full`
    (a size may come as text, e.g. from a trial key)."""
    if k := per_class_k(size):
        return (1, k, "")
    try:
        return (0, int(size), "")
    except (TypeError, ValueError):
        return (2, 0, str(size))


def _size(value: Any) -> int | str:
    # One check and one message, instead of pydantic's two union branches.
    if value == "full" or (type(value) is int and value >= 2) or per_class_k(value):
        return value
    raise ValueError(f"a size is an integer >= 2, K per class (e.g. '16/class') or 'full', got {value!r}")


def _sizes(value: Any) -> list[int | str]:
    # Checked as one field, so an error names `sizes` whichever item is wrong.
    if not isinstance(value, list) or not value:
        got = "an empty list" if value == [] else kind(value)
        raise ValueError(f"expected a non-empty list of sizes, got {got}")
    _no_duplicates(value, "size")
    return [_size(v) for v in value]


Size = Annotated[int | str, PlainValidator(_size)]
Sizes = Annotated[list[int | str], PlainValidator(_sizes)]

# Dev examples (sentences, questions) each epoch's curve evaluation covers by default: the standard
# error of an accuracy on 500 examples is at most 0.022 (sqrt(0.25 / 500)); CoNLL entity F1 on 500
# of its 3,250 dev sentences, 0.018 (benchmarks/RESULTS.md); smaller dev sets are evaluated whole.
DEFAULT_CURVE_SAMPLE = 500


def _curve_sample(value: Any) -> int | str:
    if value == "full" or (type(value) is int and value >= 1):
        return value
    raise ValueError(f"expected a number of dev examples >= 1 or 'full', got {value!r}")


CurveSample = Annotated[int | Literal["full"], PlainValidator(_curve_sample)]


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
    higher_is_better: Bool = Field(True, description="the main metric's own direction (filled in)")

    @model_validator(mode="before")
    @classmethod
    def _direction(cls, raw: Any) -> Any:
        """The direction is the metric's: filled in from `main`; a value given must agree (specs
        written when it was a choice carry it, and their fingerprints keep it)."""
        if not isinstance(raw, dict) or not isinstance(raw.get("main"), str):
            return raw
        own = higher_is_better(raw["main"])
        given = raw.get("higher_is_better", own)
        if isinstance(given, bool) and given != own:
            better = "higher" if own else "lower"
            raise FieldError(
                "higher_is_better",
                f"{str(given).lower()} disagrees with {raw['main']}, where {better} is better: the "
                "direction is the metric's (leave the field out)",
            )
        return raw if "higher_is_better" in raw else {**raw, "higher_is_better": own}


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
    curve_sample: CurveSample = Field(
        DEFAULT_CURVE_SAMPLE,
        description="dev examples each epoch's evaluation (the curve, pruning) covers: a fixed seeded "
        "sample, stratified by label for classification; 'full': the whole set. The score is always "
        "the whole evaluation set's, evaluated after the last epoch",
    )
    reported: list[Reported] = []

    @field_validator("name")
    @classmethod
    def _one_folder(cls, name: str) -> str:
        """The name is a folder under --out (`<out>/<name>/<model>`): it cannot nest or climb out."""
        if problem := segment_problem(name):
            raise ValueError(problem)
        return name

    @field_validator("model")
    @classmethod
    def _model_folder(cls, model: str) -> str:
        if problem := model_problem(model):
            raise ValueError(f"{model!r}: {problem}")
        return model

    @field_validator("labels")
    @classmethod
    def _distinct(cls, labels: list[str] | None) -> list[str] | None:
        _no_duplicates(labels, "label")
        return labels

    @model_validator(mode="after")
    def _labels_and_metrics(self) -> TaskSpec:
        self._check_labels()
        self._check_per_class()  # before the QA checks, which would call it a missing split file
        self._check_head()
        if self.head != "span" and getattr(self.data, self.eval_split) is None and self.data.hub is None:
            raise FieldError("eval_split", f"{self.eval_split!r} needs a `data.{self.eval_split}` file")
        known = METRICS_BY_HEAD[self.head]
        for field, names in (("metric.main", [self.metric.main]), ("metric.extra", self.metric.extra)):
            for name in names:
                if name not in known:
                    raise FieldError(field, f"unknown metric {name!r} (known: {', '.join(sorted(known))})")
        return self

    def _check_per_class(self) -> None:
        """A K-shot size needs classes to count: a classification task with labels."""
        shot = next((s for s in self.sizes if per_class_k(s)), None)
        if shot is None:
            return
        if self.head != "classification":
            raise FieldError(
                "sizes", f"size {shot} draws K examples per class: for a classification task, not {self.head}"
            )
        if self.regression:
            raise FieldError("sizes", f"size {shot} draws K examples per class: a regression task has none")

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


def load_task(path: str | Path, profile: str | None = "default", sets: dict | None = None) -> TaskSpec:
    """A task profile sets data-side sizes (sizes, max_length, eval_limit); absent = the base.
    `sets` ({field path: value}, from `--set`) apply after the profile, before validation."""
    path = Path(path)
    raw = apply_sets(load_checked(TaskSpec, path, profile, required=False), sets)
    return validate(TaskSpec, raw, path, profile_label(profile) + describe_sets(sets))


def spec_hash(spec: BaseModel) -> str:
    """Stable hash of a validated spec (provenance, cache keys)."""
    blob = json.dumps(spec.model_dump(mode="json"), sort_keys=True).encode()
    return hashlib.sha256(blob).hexdigest()[:16]
