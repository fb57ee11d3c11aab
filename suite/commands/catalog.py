"""`suite list` and `suite validate`: the tasks and sweeps a user can name, and checking them."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from suite.config.reading import profile_names, read_yaml
from suite.config.resources import Kind, local_dir, resolve, resolve_sweep_path, shipped_dir, yaml_files
from suite.config.sweep import SweepSpec, load_sweep
from suite.config.task import DataSpec, load_task
from suite.errors import SpecError, SuiteError, report


def _is_task(path: Path) -> bool:
    raw = read_yaml(path)
    return "head" in raw or "data" in raw


def validation_targets(refs: list[str]) -> list[Path]:
    """Files, every YAML of a folder, or task / sweep names. Default: the `tasks` and `sweeps`
    folders of the working directory, or the shipped ones where it has none."""
    if not refs:
        return [p for kind in ("tasks", "sweeps") for p in yaml_files(local_dir(kind) or shipped_dir(kind))]
    out: list[Path] = []
    for ref in refs:
        path = Path(ref)
        if path.is_dir():
            if not (found := yaml_files(path)):
                raise SuiteError(f"{path}: no .yaml files in this folder")
            out += found
            continue
        out.append(_by_name(ref))
    return out


def _by_name(ref: str) -> Path:
    for kind in ("tasks", "sweeps"):
        try:
            return resolve(ref, kind, "validate")
        except SpecError:
            pass
    raise SpecError(
        f"validate {ref!r}: no such file or folder, and no task or sweep by that name (suite list)"
    )


def validate(refs: list[str], sets: tuple[dict[str, Any], dict[str, Any]] = ({}, {})) -> int:
    """Every file in every profile, with `--set` overrides (task ones on tasks, `sweep.` ones on
    sweeps, and on a task's own sweep when given). Returns 2 when any file is bad."""
    task_sets, sweep_sets = sets
    bad = 0
    for path in validation_targets(refs):
        methods: dict[str, Any] = {}
        try:
            if _is_task(path):
                for profile in [None, *profile_names(path)]:
                    task = load_task(path, profile, task_sets)
                    sweep_path = resolve_sweep_path(path, task.sweep) if sweep_sets else None
                    if sweep_path and (profile is None or profile in profile_names(sweep_path)):
                        sweep = load_sweep(
                            sweep_path, profile, sweep_sets
                        )  # the overrides fit the task's sweep
                        methods.update(_methods(sweep, sweep_path))
            else:
                for profile in [None, *profile_names(path)]:
                    methods.update(_methods(load_sweep(path, profile, sweep_sets), path))
            print(f"ok    {path}")
            for line in method_lines(methods):  # the code a sweep naming a method runs
                print(f"      {line}")
        except SuiteError as err:
            report(err)
            bad += 1
    return 2 if bad else 0


def _methods(sweep: SweepSpec, path: Path) -> dict[str, Any]:
    """The methods a sweep names, each imported, built and checked against its settings (the
    checks `run` makes before any trial), by path; only a sweep naming one imports anything."""
    if not any("method" in block for block in (sweep.hparams, sweep.space, *sweep.recipes.values())):
        return {}
    from suite.model.method_checks import check_methods

    return check_methods(sweep, path)


def method_lines(methods: dict[str, Any]) -> list[str]:
    return [code.line() for code in methods.values()]


def list_all() -> None:
    """Shipped tasks and sweeps (run by name), local ones (./tasks, ./sweeps), model aliases; for
    each task, where its data comes from (`$SUITE_DATA_DIR`, or the hub)."""
    from suite.model.names import ALIASES

    for kind in ("tasks", "sweeps"):
        _list_kind(kind, shipped_dir(kind), "shipped: run by name")
        if (local := local_dir(kind)) is not None:
            _list_kind(kind, local, f"local, ./{kind}: run by name or path; shadows a shipped name")
    print("models:")
    for alias, target in ALIASES.items():
        print(f"  {alias}  {'bundled offline model' if callable(target) else target}")


def _list_kind(kind: Kind, folder: Path, note: str) -> None:
    print(f"{kind} ({note}):")
    for path in yaml_files(folder):
        try:
            line = _task_line(path) if kind == "tasks" else _sweep_line(path)
        except SuiteError as err:
            line = f"invalid: {err}"
        print(f"  {path.stem:12s}  {line}")


def _task_line(path: Path) -> str:
    from suite.data.paths import data_dir

    t = load_task(path, None)
    line = f"{t.head}  {t.metric.main}  sizes [{', '.join(map(str, t.sizes))}]  sweep {Path(t.sweep).stem}"
    return f"{line}\n  {'':12s}  data: {origin_line(t.data, data_dir())}"


OFFLINE_VARS = ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE")  # what datasets itself reads
# datasets' packaged loaders: `path` names one of these and `data_files` the files it reads.
PACKAGED_LOADERS = ("json", "csv", "parquet", "text", "arrow")


def origin_line(data: DataSpec, root: Path | None) -> str:
    """Where a task's examples would come from: files under the data directory (present or
    missing), files a packaged loader reads, or a hub repository and its revision."""
    from suite.data.hub import use_hub

    if not use_hub(data, root):
        state = "present" if (Path(root or ".") / (data.local or "")).is_dir() else "missing"
        return f"files {data.local} ({state} under {root})"
    hub = data.hub
    files = [f for v in (hub.data_files or {}).values() for f in ([v] if isinstance(v, str) else v)]
    if hub.path in PACKAGED_LOADERS:
        return f"{hub.path} files {', '.join(files)}"
    config = f" {hub.name}" if hub.name else ""
    # A parquet branch keeps each configuration in its own folder: name it, not every file.
    folders = f" ({', '.join(sorted({f.split('/')[0] for f in files if '/' in f}))})" if files else ""
    offline = any(os.environ.get(v, "").lower() in ("1", "true", "yes") for v in OFFLINE_VARS)
    where = "offline now: only from the datasets cache" if offline else "needs the network or a cache"
    local = f"; files {data.local} once a data directory is set" if data.local else ""
    return f"hub {hub.path}{config}@{hub.revision or 'main'}{folders}: {where}{local}"


def _sweep_line(path: Path) -> str:
    s = load_sweep(path, None)
    searched = ", ".join(s.space) or (f"recipes {', '.join(s.recipes)}" if s.recipes else "one setting")
    seeds = s.seeds
    design = (
        f"{seeds.init}x{seeds.order} crossed" if seeds.design == "crossed" else f"{seeds.repeats} repeats"
    )
    return f"{s.sampler.type}: {searched}; seeds {design}"
