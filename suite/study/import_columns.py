"""How `suite import` reads a table's rows: which column is what (`Columns`: a mapping's, or the
default spelling for the table's kind), and the rule every row is read and judged by (`Rule`: the
task's metric and range, its failure rule and baseline, what every record states).

Which column is what: a mapping (`RunsMap`, from `--map` or flags), else the suite's own spelling
(`score`, `size`, `seed` or `seeds.*`, a hyperparameter by its name or as `hparams.*`, and every
field of the suite's records, so that `suite export`'s files read back), else, for Trainer output
folders, what `run_glue.py` writes (`eval_<metric>`, `train_samples`, `train_batch_size`, ...)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from suite.config.runs_map import RunsMap
from suite.config.sweep import HParams
from suite.errors import SuiteError
from suite.study.import_files import Table

ROLES = ("score", "size", "seed", "outcome", "error", "attempt")
# The fields of the suite's trial records (docs/outputs.md, Trial records): read as they are.
RECORD_FIELDS = frozenset(
    "key study task model sweep profile trial_number attempt worker outcome failure failed reason trace "
    "size n_train n_dev hparams seeds head metric baseline eval_split eval_set score scores last_score "
    "epochs epochs_run eval_every evaluated_on loss_curve tokens per_example threads trainer piece_cost "
    "stack optimizer drawn_weights trainable_params total_params wall_time_s overhead_s peak_rss_mb "
    "allocator peak_gpu_mb time_s replicate_group training_code method imported".split()
)


@dataclass(frozen=True)
class Rule:
    """How the rows are read and judged: the task's metric and its range, its failure rule with the
    baseline (None: unknown), and what every record of the import states."""

    task: str
    metric: str
    metrics: tuple[str, ...]
    low: float
    high: float
    higher: bool
    failure: str  # trivial_baseline | threshold
    margin: float
    threshold: float | None
    baseline: float | None
    train_size: int | None  # the task's training set, where its data was read (a Trainer's `full`)
    head: str
    eval_split: str
    model: str
    study: str
    scale: float = 1.0


@dataclass
class Columns:
    """What each read value is (`score`, `seeds.init`, `hparams.lr`, `scores.f1`, `n_dev`) -> its
    column; `fixed` values no column holds; `kept`: the suite's record fields read as they are."""

    roles: dict[str, str]
    fixed: dict[str, Any]
    kept: list[str]


def columns_of(table: Table, mapping: RunsMap | None, rule: Rule) -> Columns:
    """The table's columns as the mapping (or the default spelling for its kind) reads them; a
    mapped column the table lacks, or a column the default spelling does not know, is one line."""
    if mapping is not None and not mapping.columns() and not mapping.fixed:
        mapping = None  # a folder pattern alone: the columns in the default spelling
    if table.kind == "trainer":
        return _trainer_columns(table, mapping, rule)
    if mapping is not None:
        for role, column in mapping.columns().items():
            if column not in table.columns and column.split(".")[0] not in table.columns:
                raise SuiteError(f"{table.source}: no column {column!r} (mapped as {role})")
        return Columns(mapping.columns(), dict(mapping.fixed), [])
    roles: dict[str, str] = {}
    kept = []
    for column in table.columns:
        head = column.split(".")[0]
        if column in ROLES:
            roles[column] = column
        elif column == "hparams" or column == "seeds":  # a JSON line's objects: their keys, per row
            roles[column] = column
        elif head in ("hparams", "seeds") and "." in column:
            roles[column] = column
        elif column in HParams.model_fields:
            roles[f"hparams.{column}"] = column
        elif head in RECORD_FIELDS:
            kept.append(column)
        else:
            raise SuiteError(
                f"{table.source}: unknown column {column!r} (not a hyperparameter or a field of the suite's "
                "records); map the columns (--map FILE, or --score, --seed, --size, --hparam NAME=COLUMN)"
            )
    return Columns(roles, {}, kept)


def _trainer_columns(table: Table, mapping: RunsMap | None, rule: Rule) -> Columns:
    """run_glue.py's outputs: the main metric as `eval_<metric>`, the others beside it; the size
    from the folder's name or `train_samples`; the setting from the name, else the state's per-device
    batch and epochs, or the searched `trial_params`."""
    have = set(table.columns)
    extra = {f"scores.{m}": f"eval_{m}" for m in rule.metrics if f"eval_{m}" in have}
    extra |= {k: c for k, c in (("n_dev", "eval_samples"), ("n_train", "train_samples")) if c in have}
    if mapping is not None:
        return Columns({**extra, **mapping.columns()}, dict(mapping.fixed), [])

    def first(*names: str) -> str | None:
        return next((n for n in names if n in have), None)

    roles = {
        "score": f"eval_{rule.metric}",
        "size": first("folder.size", "train_samples"),
        "seed": first("folder.seed", "trial_params.seed"),
        "hparams.lr": first("folder.lr", "trial_params.learning_rate"),
        "hparams.batch_size": first(
            "folder.batch_size", "trial_params.per_device_train_batch_size", "train_batch_size"
        ),
        "hparams.epochs": first("folder.epochs", "trial_params.num_train_epochs", "num_train_epochs"),
    }
    named = {c.removeprefix("folder."): c for c in table.columns if c.startswith("folder.")}
    roles |= {
        f"hparams.{k}": c for k, c in named.items() if k not in ("size", "seed", "lr", "batch_size", "epochs")
    }
    return Columns({**extra, **{k: v for k, v in roles.items() if v}}, {}, [])
