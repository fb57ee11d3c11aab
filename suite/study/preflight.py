"""Pre-flight: every planned trial's inputs checked before the first trial trains.

A user error found here is one line naming the file and field, exit 2, with nothing trained
and nothing written; found inside a trial it would have become a row of "failed runs".
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any

from suite.config.sweep import SweepSpec
from suite.data.hub import source_sha256
from suite.data.subsample import ClassTooSmall
from suite.errors import DataError, ModelError, SpecError, SuiteError
from suite.heads.registry import PreparedTask


def check_planned_inputs(
    task: PreparedTask, sweep: SweepSpec, spec_path: str | Path, new: bool = True
) -> None:
    """Every (size, subsample seed) of the plan has its training examples (a split file for
    QA, enough examples for a subsample), tokenizes, and the evaluation set is non-empty.
    Subsample seeds at the whole training set are refused for a `new` study only: a stored one
    that holds such runs resumes as it is (they are read once).

    Features built here land in the feature cache, so the trials reuse them.
    """
    from suite.study.plan import replicate_seeds

    data, spec = task.data, task.spec
    if new:
        check_whole_set(task, sweep, spec_path)
    check_budget(sweep)
    for size in spec.sizes:
        for seed in sorted({seeds[2] for seeds in replicate_seeds(sweep, size)}):
            try:
                indices = data.train_indices(size, seed)
            except ClassTooSmall as err:  # a K-shot size (`16/class`) larger than a class
                raise SpecError(
                    f"{spec_path}: field 'sizes': size {size} needs {err.k} examples of every class; "
                    f"class {err.name!r} has {err.count} in {data.sources.get('train', 'the training data')}"
                ) from None
            if isinstance(size, int) and len(indices) < size:
                raise SpecError(
                    f"{spec_path}: field 'sizes': size {size} exceeds the {len(indices)} training "
                    f"examples of {data.sources.get('train', 'the training data')}"
                )
            if len(data.features("train", indices)) == 0:
                raise DataError(f"task {spec.name}: the training subsample (size {size}) has no examples")
    # Once, after every split is loaded: QA's evaluation set is the pool minus all of them.
    if len(data.features("dev", data.dev_indices())) == 0:
        raise DataError(f"task {spec.name}: the {spec.eval_split} set has no examples")


def check_whole_set(task: PreparedTask, sweep: SweepSpec, spec_path: str | Path) -> None:
    """Size `full` trains on every example whatever the subsample seed, so it is planned with
    one; explicit subsample seeds there would be ignored, and a number that is the whole training
    set with several subsample seeds would train each run again: both refused."""
    seeds, sizes = sweep.seeds, task.spec.sizes
    if "full" in sizes and seeds.subsample_seeds:
        raise SpecError(
            f"{spec_path}: field 'sizes': size full trains on every example, where the sweep's "
            f"seeds.subsample_seeds {seeds.subsample_seeds} would draw nothing; plan full in a study "
            "without explicit subsample seeds"
        )
    drawn = len(seeds.subsample_seeds or range(seeds.subsample))
    whole = _whole_set(task.data) if drawn > 1 else None
    if whole is not None and whole in sizes:
        raise SpecError(
            f"{spec_path}: field 'sizes': size {whole} is every training example of "
            f"{task.data.sources.get('train', 'the training data')}, so each of the {drawn} subsample "
            "seeds would train the same runs; write `full` (planned once)"
        )


def check_budget(sweep: SweepSpec) -> None:
    """A model-based search over a space of finitely many settings cannot propose more distinct
    ones than it holds: a larger budget would end in proposals that repeat a setting."""
    values = [p.values() for p in sweep.space.values()]
    if not sweep.adaptive or not values or any(v is None for v in values):
        return
    size = math.prod(len(v) for v in values)
    if sweep.budget is not None and sweep.budget > size:
        raise SpecError(
            f"sweep {sweep.name}: field 'budget': {sweep.budget} settings, but its space holds only {size}"
        )


def _whole_set(data: Any) -> int | None:
    """How many examples size `full` trains on; None where there is no such size (few-shot
    split files: each size and seed is its own file, refused as `full` by the data itself)."""
    try:
        return len(data.train_indices("full", 0))
    except DataError:
        return None


def data_hashes(task: PreparedTask) -> dict[str, str | None]:
    """Content hash of every data file the plan reads (call after `check_planned_inputs`,
    which loads every split); a hub split by its datasets fingerprint, else its source string."""
    return {label: source_sha256(source) or source for label, source in sorted(task.data.sources.items())}


def check_weights(name: str) -> None:
    """A local model folder's safetensors files, read by their headers without loading a tensor:
    a torn or truncated file is one line naming it before any trial (transformers would raise the
    Rust reader's error from deep inside `from_pretrained`); a hub checkpoint is its hub's to serve.
    Here, not in the pinned encoders module: it decides no number."""
    from safetensors import SafetensorError, safe_open

    from suite.model.names import resolve

    folder = Path(resolve(name))
    for path in sorted(folder.glob("*.safetensors")) if folder.is_dir() else []:
        try:
            with safe_open(str(path), "pt"):
                pass
        except SafetensorError as err:
            raise ModelError(
                f"model {name!r}: {path} does not load ({err}); restore the folder's weights (a copy "
                "that did not finish?)"
            ) from None


def check_writable(folder: Path) -> None:
    """The run folder can be created and written (nothing is left behind by the check)."""
    existing = next((p for p in [folder, *folder.parents] if p.exists()), None)
    if existing is None or not existing.is_dir():
        raise SuiteError(f"--out {folder}: {existing} is not a folder")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise SuiteError(f"--out {folder}: {existing} is not writable")


def make_run_folder(folder: Path) -> None:
    try:
        folder.mkdir(parents=True, exist_ok=True)
        probe = folder / f".write-probe.{os.getpid()}"
        probe.write_text("")
        probe.unlink()
    except OSError as err:
        raise SuiteError(f"--out {folder}: cannot write here ({err.strerror or err})") from None
    for stale in folder.glob("*.tmp"):  # left by a process killed mid-write; never a result
        stale.unlink(missing_ok=True)
