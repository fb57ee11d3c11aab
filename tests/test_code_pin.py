"""The code that decides a trial's numbers is pinned to TRAINING_CODE_VERSION: editing it fails
here until the version is bumped (old studies are then refused, not resumed as if nothing
changed) or the pin is updated for a change that provably keeps every number. Which modules are
pinned is derived from the trial's imports (`suite.identity.pinned_modules`), never listed here."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from suite.identity import SUITE, code_digest, code_versions, digest_of, pinned_modules
from tests.conftest import REPO

# code_versions() (TRAINING_CODE_VERSION + HEAD_CODE_VERSIONS) -> digest of the pinned modules' syntax
# trees (docstrings and comments aside).
# 3+auto2 re-pinned for the GPU path: losses read back in batches on a GPU, pieces cut on the CPU,
# fp32 output layers, Viterbi on a CPU copy; and for the progress callbacks a trial takes (they watch,
# never change it). On the CPU every record stays bit-identical.
# Re-pinned when the pin grew to every module a trial imports (the data readers' paths, hub and cache,
# the config it reads), for right padding forced at load and in the collations, the metric's own
# direction, and the curve sample (each epoch but the last on a fixed sample; the score still from the
# whole set): RTE and NER smoke records of the same seeds kept every score and loss curve.
# Re-pinned for the whole-set score on its own Trainer, stops raised again at every stop point, the
# encoder read from disk per trial (its load on a fork of torch's RNG) and scikit-learn imported at
# first use: RTE and NER smoke records kept every score, loss curve and per-example prediction.
# Re-pinned for adapters (LoRA, BitFit: off by default, out of the key when off), K-shot sizes (a
# path of their own; totals draw as before), the tracker field of a request (read by no training
# code) and the stack's fields read by one function: the same RTE and NER smoke records held.
# Re-pinned for LoRA targets in one spelling, drawn weights found by object under LoRA and a
# searched adapter refused with LoRA values (adapter settings only): the same smoke records held.
# Re-pinned for imports moved, not code: the head modules imported where built (planning imports no
# Lightning), Seeds and TrialPlan in a module of their own, scipy.stats at first use, the cache
# folder read by identity: the same RTE and NER smoke records held (every score, loss curve and
# per-example outcome).
# Re-pinned for the model names (aliases, default heads, resolve) moved, unchanged, to a module
# without torch (suite.model.names: `suite list` no longer loads transformers).
# Re-pinned for the input embedding's gradient summed in kept buffers on the CPU
# (suite.model.embedding_grad): the same additions in the same order, every gradient bit-identical for
# every architecture (tests/test_embedding_grad.py); NER default trials kept every score, loss curve
# and per-sentence outcome (benchmarks/headline.py).
# Re-pinned for AdamW unfused under mixed precision only (suite.model.optim.adamw_implementation; the
# fingerprint holds it, GPU_CODE_VERSION 3) and the errored record's trace: at 32-true the optimizer is
# the fused one as before, and RTE smoke records of the same seeds kept every score, loss curve and
# per-example outcome. Then for the record's GPU memory peak (peak_gpu_mb, suite.model.gpu_memory),
# read only where CUDA is initialised: no CPU number moves.
# Re-pinned for a spec's base and every profile validated as written before the chosen one is merged
# (suite.config.reading.load_checked): a spec that loaded before loads to the same values; only
# files `validate` refuses are now refused by run too, so no trial's number can move.
# Then for the record's optimizer read off the optimizer built, and Lightning's precision aliases
# named as Lightning runs them (`bf16` -> `bf16-mixed`): the same optimizer and kernels as before.
# Then for fine-tuning methods from the user's code (suite/model/methods.py: `method` and
# `method_args` out of the key and record when absent, hooks that run only when a method is set, the
# optimizer's groups and its build in two steps, a method's optimizer named by its class): RTE smoke
# records of the adapters sweep (full, LoRA, BitFit; split batches) and NER smoke records kept every
# score, loss curve and per-example outcome.
# Then for the hub loader's error line, which now says where local data would come from instead
# (suite/data/hub.py): a message only, no data or number read differently.
PINS = {"3+auto2": "f9c1cc03f68c5b15"}


def test_the_training_code_matches_its_version_pin() -> None:
    found = code_digest()
    assert PINS.get(code_versions()) == found, (
        f"the modules that decide a trial's result changed (digest {found}): bump TRAINING_CODE_VERSION "
        "(or the head's HEAD_CODE_VERSIONS entry) in suite/identity.py and pin the new "
        f"code_versions() to {found!r} here, or, if every number provably stays the same (the "
        "determinism tests), update the pin"
    )


def test_every_module_a_trial_imports_is_pinned() -> None:
    """Independently of the static walk: what a fresh interpreter holds after importing the trial
    and every head's data and model (the registry), each a stage module, is pinned."""
    code = (
        "import json, sys; import suite.training.trial, suite.heads.registry; "
        "print(json.dumps(sorted(m for m in sys.modules if m.startswith('suite.'))))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=REPO)
    loaded = json.loads(done.stdout)
    cross_cutting = {f"suite.{p.stem}" for p in SUITE.glob("*.py")}
    paths = {_relative(m) for m in loaded if m not in cross_cutting}
    missing = paths - set(pinned_modules())
    assert not missing, f"on the trial's path but not pinned: {sorted(missing)}"
    # The holes the hand-kept list had are covered.
    assert {"data/hub.py", "data/paths.py", "data/cache.py"} <= set(pinned_modules())


def _relative(module: str) -> str:
    path = SUITE.joinpath(*module.split(".")[1:])
    return str((path / "__init__.py" if path.is_dir() else path.with_suffix(".py")).relative_to(SUITE))


def _tree(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


def test_a_module_imported_inside_a_function_on_the_trial_path_is_pinned(tmp_path: Path) -> None:
    """A new reader imported lazily by a pinned module is pinned the day it is imported; a module
    nothing on the path imports, and the cross-cutting ones, are not."""
    root = _tree(
        tmp_path / "suite",
        {
            "training/trial.py": "from suite.data import reader\nfrom suite.errors import E\n",
            "data/__init__.py": "",
            "data/reader.py": "def f():\n    from suite.data.new import g\n    return g()\n",
            "data/new.py": "import numpy\n\ndef g():\n    return 1\n",
            "data/unused.py": "",
            "errors.py": "class E(Exception): ...\n",
        },
    )
    assert pinned_modules(root) == ("data/__init__.py", "data/new.py", "data/reader.py", "training/trial.py")


def test_the_digest_ignores_docstrings_and_comments_but_not_code(tmp_path: Path) -> None:
    module = tmp_path / "x.py"
    module.write_text('"""Doc."""\n\ndef f(x):\n    """Doc."""\n    return x + 1  # one\n')
    first = digest_of(tmp_path, ["x.py"])
    module.write_text('"""Other doc."""\n\n\ndef f(x):  # comment\n    return x + 1\n')
    assert digest_of(tmp_path, ["x.py"]) == first
    module.write_text("def f(x):\n    return x + 2\n")
    assert digest_of(tmp_path, ["x.py"]) != first


def test_a_head_version_is_part_of_only_the_studies_that_train_that_head(tiny_task) -> None:  # noqa: ANN001
    """A study of `auto` heads made before the head changed is refused (`head_code.auto (absent) -> 2`);
    a `mean` or `cls` study of the same task still resumes."""
    from suite.config.sweep import SweepSpec
    from suite.config.task import load_task
    from suite.identity import HEAD_CODE_VERSIONS, differences, study_fingerprint
    from suite.study.setup import classifiers_used

    task = load_task(tiny_task).model_copy(update={"classifier": "mean"})
    one = SweepSpec.model_validate({"name": "s", "hparams": {"lr": 1e-3, "batch_size": 8, "epochs": 1}})
    recipes = SweepSpec.model_validate(
        {
            "name": "r",
            "hparams": {"lr": 1e-3, "batch_size": 8, "epochs": 1},
            "recipes": {"base": {}, "auto": {"classifier": "auto"}},
        }
    )
    assert classifiers_used(task, one) == {"mean"}
    assert classifiers_used(task, recipes) == {"mean", "auto"}
    base = ({}, {}, {}, {}, 1, {})
    before = study_fingerprint(*base)
    assert study_fingerprint(*base, heads={"mean"}) == before
    changed = differences(before, study_fingerprint(*base, heads={"auto", "mean"}))
    assert changed == [f"head_code.auto (absent) -> {HEAD_CODE_VERSIONS['auto']}"]


def test_the_code_digest_is_kept_under_the_sources_stamp(tmp_path: Path, monkeypatch) -> None:  # noqa: ANN001
    """Kept in the cache, read back while no suite module changed; an edited module (another size
    or modification time) is another stamp, so the digest is parsed afresh."""
    import os
    import shutil

    from suite import identity

    monkeypatch.setenv("SUITE_CACHE_DIR", str(tmp_path / "cache"))
    parsed = identity.code_digest.__wrapped__()
    kept = tmp_path / "cache" / "code" / f"digest-{identity.source_stamp(SUITE)}"
    assert kept.read_text() == parsed == digest_of(SUITE, pinned_modules())
    kept.write_text("what the cache holds")
    assert identity.code_digest.__wrapped__() == "what the cache holds"  # read, not parsed

    root = tmp_path / "suite"
    shutil.copytree(SUITE, root, ignore=shutil.ignore_patterns("__pycache__"))
    module = root / "training" / "trial.py"
    before = identity.source_stamp(root)
    stat = module.stat()
    os.utime(module, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1))
    touched = identity.source_stamp(root)
    module.write_text(module.read_text() + "\n")
    os.utime(module, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1))
    assert len({before, touched, identity.source_stamp(root)}) == 3
