"""The code that decides a trial's numbers is pinned to TRAINING_CODE_VERSION: editing it fails
here until the version is bumped (old studies are then refused, not resumed as if nothing
changed) or the pin is updated for a change that provably keeps every number (issue 20)."""

from __future__ import annotations

import ast

from suite.study.fingerprint import TRAINING_MODULES, code_versions, training_code_digest
from tests.conftest import REPO

# code_versions() (TRAINING_CODE_VERSION + HEAD_CODE_VERSIONS) -> digest of TRAINING_MODULES' syntax
# trees (docstrings and comments aside).
# 3+auto2 re-pinned for the GPU path (issue 22): losses read back in batches on a GPU, pieces cut on
# the CPU, fp32 output layers, Viterbi on a CPU copy; and for the progress callbacks a trial takes
# (they watch, never change it). On the CPU every record stays bit-identical.
PINS = {"3+auto2": "988f83e495fe7d0c"}


def test_the_training_code_matches_its_version_pin() -> None:
    assert all(
        ast.parse((REPO / "suite" / m).read_text()) for m in TRAINING_MODULES
    )  # each pinned file exists
    found = training_code_digest()
    assert PINS.get(code_versions()) == found, (
        f"the modules that decide a trial's result changed (digest {found}): bump TRAINING_CODE_VERSION "
        "(or the head's HEAD_CODE_VERSIONS entry) in suite/study/fingerprint.py and pin the new "
        f"code_versions() to {found!r} here, or, if every number provably stays the same (the "
        "determinism tests), update the pin"
    )


def test_the_digest_ignores_docstrings_and_comments_but_not_code(tmp_path, monkeypatch) -> None:  # noqa: ANN001
    import suite.study.fingerprint as fp

    root = tmp_path / "suite"
    (root / "m").mkdir(parents=True)
    (root / "study").mkdir()
    (root / "study" / "fingerprint.py").write_text("")
    module = root / "m" / "x.py"
    monkeypatch.setattr(fp, "TRAINING_MODULES", ("m/x.py",))
    monkeypatch.setattr(fp, "__file__", str(root / "study" / "fingerprint.py"))
    module.write_text('"""Doc."""\n\ndef f(x):\n    """Doc."""\n    return x + 1  # one\n')
    first = fp.training_code_digest()
    module.write_text('"""Other doc."""\n\n\ndef f(x):  # comment\n    return x + 1\n')
    assert fp.training_code_digest() == first
    module.write_text("def f(x):\n    return x + 2\n")
    assert fp.training_code_digest() != first


def test_a_head_version_is_part_of_only_the_studies_that_train_that_head(tiny_task) -> None:  # noqa: ANN001
    """A study of `auto` heads made before the head changed is refused (`head_code.auto (absent) -> 2`);
    a `mean` or `cls` study of the same task still resumes."""
    from suite.config.sweep import SweepSpec
    from suite.config.task import load_task
    from suite.study.fingerprint import HEAD_CODE_VERSIONS, differences, study_fingerprint
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
