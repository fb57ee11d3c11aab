"""Hugging Face datasets as a task's data: `data.hub` loaded with `datasets.load_dataset`.

One code path for every head and every loader: a hub repository (`path: nyu-mll/glue`) and
the packaged loaders on local files (`path: json` or `parquet` with `data_files`) are read the
same way. Hub columns are renamed to the names the spec uses (`columns`), and label ids are
mapped to the spec's labels: a ClassLabel's ids become its names automatically, and `labels`
maps hub names or values to the spec's. `local` wins when both are given and a data directory
is set; which one was used is recorded (`data_origin`) in run.json.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from suite.config.task import DataSpec, HubSource
from suite.data.paths import ENV_VAR
from suite.errors import DataError
from suite.provenance import file_sha256

HUB_PREFIX = "hub:"

# Columns each head reads, as the spec names them (classification: data.text and data.label).
TAGGING_COLUMNS = ("tokens", "tags")
SPAN_COLUMNS = ("id", "question", "context", "answers")

_LOADED: dict[str, Any] = {}  # load key -> DatasetDict: every split comes from one load
_FINGERPRINTS: dict[str, str | None] = {}  # source -> datasets' content fingerprint


def use_hub(data: DataSpec, root: Path | None) -> bool:
    """The hub source is used when there is no local source, or no data directory to read it from."""
    return data.hub is not None and (data.local is None or root is None)


def data_origin(data: DataSpec, root: Path | None) -> dict[str, Any]:
    """What run.json records about where the examples came from."""
    if use_hub(data, root):
        hub = data.hub
        return {"kind": "hub", "path": hub.path, "name": hub.name, "revision": hub.revision,
                "data_files": hub.data_files}  # fmt: skip
    return {"kind": "local", "folder": str(Path(root or ".") / (data.local or ""))}


def source_sha256(source: str) -> str | None:
    """Content hash of a source: a local file's sha256, or a hub split's datasets fingerprint."""
    if source.startswith(HUB_PREFIX):
        return _FINGERPRINTS.get(source)
    return file_sha256(source)


def _source(hub: HubSource, split: str) -> str:
    name = f"/{hub.name}" if hub.name else ""
    revision = f"@{hub.revision}" if hub.revision else ""
    return f"{HUB_PREFIX}{hub.path}{name}{revision}:{split}"


def _load_all(hub: HubSource, task: str) -> Any:
    import datasets

    datasets.disable_progress_bars()  # as for model downloads: a study shows its own progress
    key = json.dumps([hub.path, hub.name, hub.revision, hub.data_files], sort_keys=True)
    if key not in _LOADED:
        try:
            _LOADED[key] = datasets.load_dataset(
                hub.path, hub.name, revision=hub.revision, data_files=hub.data_files
            )
        except Exception as err:  # noqa: BLE001 - network, missing repo, bad files: all "not available"
            first = str(err).splitlines()[0] if str(err) else type(err).__name__
            where = f"{hub.path}" + (f"/{hub.name}" if hub.name else "")
            raise DataError(  # where the data would come from instead: a clone without the shared data
                f"task {task}: field 'data.hub': dataset {where} is not available ({first}); a task "
                f"with a local folder reads it from --data-dir or {ENV_VAR} instead (README, Install)"
            ) from None
    return _LOADED[key]


def load_split(
    hub: HubSource, split: str, needed: list[str], label: str | None, task: str
) -> tuple[list, str]:
    """One split's rows with the spec's column names (only `needed`), labels mapped; and the
    source string that names it. `split` is train, validation or test (the spec's field)."""
    field = f"data.hub.{split}_split"
    name = getattr(hub, f"{split}_split")
    if name is None:
        raise DataError(f"task {task}: field '{field}': no {split} split is named")
    every = _load_all(hub, task)
    if name not in every:
        raise DataError(f"task {task}: field '{field}': no split {name!r} (splits: {', '.join(every)})")
    data, source = every[name], _source(hub, name)
    found = ", ".join(data.column_names)
    if unknown := [c for c in hub.columns if c not in data.column_names]:
        raise DataError(
            f"task {task}: field 'data.hub.columns': no column {unknown[0]!r} in {source} ({found})"
        )
    renamed = {spec: col for col, spec in hub.columns.items()}
    # spec column -> hub column; a hub column renamed to another name is no longer its own
    origin = {c: renamed.get(c, None if c in hub.columns else c) for c in needed}
    for spec_name, col in origin.items():
        if col not in data.column_names:
            raise DataError(
                f"task {task}: field 'data.hub.columns': {source} has no column {spec_name!r}; "
                f"map one of its columns ({found}) to it"
            )
    if len(data) == 0:
        raise DataError(f"task {task}: {source}: no examples")
    table = data.select_columns(sorted(set(origin.values()))).to_dict()
    columns = {spec_name: table[col] for spec_name, col in origin.items()}
    if label is not None:
        columns[label] = _map_labels(hub, data.features[origin[label]], columns[label], source, task)
    _FINGERPRINTS[source] = getattr(data, "_fingerprint", None)
    return [dict(zip(columns, values, strict=True)) for values in zip(*columns.values(), strict=True)], source


def _class_names(feature: Any) -> list[str] | None:
    """A ClassLabel's names, also inside a sequence (per-token tags)."""
    import datasets

    inner = getattr(feature, "feature", None)
    for candidate in (feature, inner):
        if isinstance(candidate, datasets.ClassLabel):
            return list(candidate.names)
    return None


def _map_labels(hub: HubSource, feature: Any, values: list, source: str, task: str) -> list:
    """Label ids -> ClassLabel names -> the spec's labels (`data.hub.labels`); per token for tags."""
    names = _class_names(feature)
    mapping = hub.labels or {}
    present = set(names) if names is not None else {_text(v) for v in _flat(values)}
    if names is not None:
        present |= {str(i) for i in range(len(names))}
    if missing := [k for k in mapping if k not in present]:
        shown = names if names is not None else sorted(present)[:20]
        raise DataError(
            f"task {task}: field 'data.hub.labels': label {missing[0]!r} is not in {source} ({shown})"
        )

    def one(value: Any) -> Any:
        if value is None:
            return None
        text = _text(value)
        if text in mapping:
            return mapping[text]
        if names is not None:
            if not 0 <= value < len(names):  # GLUE test splits hold -1: no label
                raise DataError(
                    f"task {task}: {source}: label id {value} has no class (an unlabelled split?)"
                )
            text = names[value]
        return mapping.get(text, text)

    return [[one(v) for v in row] if isinstance(row, list) else one(row) for row in values]


def _flat(values: list) -> list:
    return [v for row in values for v in (row if isinstance(row, list) else [row])]


def _text(value: Any) -> str:
    # Labels compare as text, as a TSV holds them; a float target keeps its digits.
    return str(value)
