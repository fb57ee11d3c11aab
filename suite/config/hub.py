"""The `data.hub` block of a task spec (how it is loaded: suite/data/hub.py)."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, field_validator


def _label_keys(value: Any) -> Any:
    # YAML reads `{0: entailment}` with integer keys; hub label ids and names compare as text.
    if isinstance(value, dict):
        if bad := [k for k in value if isinstance(k, bool) or not isinstance(k, int | str)]:
            raise ValueError(f"a hub label is an id or a name, got {bad[0]!r}")
        return {str(k): v for k, v in value.items()}
    return value


class HubSource(BaseModel):
    """`datasets.load_dataset(path, name, revision=..., data_files=...)`, its splits, and how its
    columns and labels map onto the spec's."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    path: str = Field(description="hub repository, or a packaged loader (json, csv, parquet)")
    name: str | None = Field(None, description="configuration, e.g. rte")
    revision: str | None = Field(None, description="commit, tag or branch of the hub repository")
    data_files: dict[str, str | list[str]] | None = Field(None, description="split -> files (loaders)")
    train_split: str = "train"
    validation_split: str = "validation"
    test_split: str | None = None
    columns: dict[str, str] = Field({}, description="hub column -> the column name the spec uses")
    labels: Annotated[dict[str, str] | None, BeforeValidator(_label_keys)] = Field(
        None, description="hub label (ClassLabel name or id, or value) -> the spec's label"
    )

    @field_validator("columns")
    @classmethod
    def _distinct_targets(cls, columns: dict[str, str]) -> dict[str, str]:
        targets = list(columns.values())
        if dup := next((t for t in targets if targets.count(t) > 1), None):
            raise ValueError(f"two hub columns map to {dup!r}")
        return columns


def hub_labels_problem(hub: HubSource, head: str, labels: list[str] | None, regression: bool) -> str | None:
    """Why `data.hub.labels` does not map onto the spec's labels (classes, or tags of its
    entity types); None when it does."""
    if not hub.labels:
        return None
    if regression or head == "span":
        return f"a {'regression' if regression else head} task has no labels to map"
    known = labels or []
    if head == "tagging":
        known = ["O"] + [f"{p}{t}" for t in known for p in ("B-", "I-", "E-", "S-")]
    if bad := [v for v in hub.labels.values() if v not in known]:
        return f"{bad[0]!r} is not one of the spec's labels {labels}"
    return None
