"""A study's identity: the software stack names every library the pinned code imports, a study
made under another version of one is refused naming it (one stored before the library joined the
stack resumes and records it), and the feature cache misses when the code or the tokenizer
libraries change."""

from __future__ import annotations

import sys
from importlib import metadata
from pathlib import Path

import optuna
import pytest

import suite.identity as identity
from suite.config.sweep import SweepSpec, load_sweep
from suite.config.task import load_task
from suite.data.cache import cached
from suite.heads.registry import prepare_task
from suite.identity import NOT_IN_STACK, STACK, STACK_DISTRIBUTIONS, SUITE, imports_of, pinned_modules
from suite.study.setup import stack_uses
from tests.conftest import REPO, run_tiny


def _third_party() -> dict[str, set[str]]:
    """Distribution -> the pinned modules that import it (stdlib and the suite aside)."""
    owners = metadata.packages_distributions()
    found: dict[str, set[str]] = {}
    for module in pinned_modules():
        for name in imports_of(SUITE / module)[1] - set(sys.stdlib_module_names) - {"__future__"}:
            assert name in owners, f"{module} imports {name!r}, which no installed distribution provides"
            for distribution in owners[name]:
                found.setdefault(distribution, set()).add(module)
    return found


def test_the_stack_lists_every_library_the_pinned_code_imports() -> None:
    found = _third_party()
    unlisted = {
        d: sorted(m) for d, m in found.items() if d not in STACK_DISTRIBUTIONS and d not in NOT_IN_STACK
    }
    assert not unlisted, f"add to STACK_DISTRIBUTIONS in suite/identity.py: {unlisted}"
    assert set(NOT_IN_STACK) <= set(found), "a library left out of the stack that nothing imports"
    assert {"scikit-learn", "seqeval", "scipy", "pytorch-crf", "optuna"} <= set(STACK_DISTRIBUTIONS)
    stack = identity.software_stack({}, None, identity.USED_WITH.values())
    assert all(stack[d] == metadata.version(d) for d in STACK_DISTRIBUTIONS)
    plain = identity.software_stack({}, None)  # a head's or recipe's own library only where used
    assert set(STACK_DISTRIBUTIONS) - set(plain) == set(identity.USED_WITH)


def _sweep(tmp_path: Path, text: str) -> SweepSpec:
    path = tmp_path / "s.yaml"
    path.write_text("name: s\nhparams: {lr: 1.0e-4, batch_size: 8, epochs: 1}\n" + text)
    return load_sweep(path, None)


def test_a_study_holds_the_libraries_its_trials_can_use(tmp_path: Path) -> None:
    """seqeval with the tagging head, pytorch-crf with the CRF, peft where a trial can run LoRA:
    fixed, one recipe of several, or a TPE space that can propose it."""
    rte, ner, crf = (load_task(REPO / f"tasks/{n}.yaml", None) for n in ("rte", "ner", "ner-crf"))
    plain = _sweep(tmp_path, "")
    assert stack_uses(rte, plain) == set()
    assert stack_uses(ner, plain) == {"tagging"}
    assert stack_uses(crf, plain) == {"tagging", "crf"}
    assert stack_uses(rte, load_sweep(REPO / "sweeps/adapters.yaml", None)) == {"lora"}
    space = "space: {adapter: {type: categorical, choices: [none, %s]}}"
    assert not stack_uses(rte, _sweep(tmp_path, space % "bitfit"))  # BitFit runs without peft
    assert stack_uses(rte, _sweep(tmp_path, space % "lora")) == {"lora"}
    assert stack_uses(rte, _sweep(tmp_path, "sampler: {type: tpe}\nbudget: 4\n" + space % "lora")) == {"lora"}


def _stored(folder: Path) -> optuna.Study:
    storage = f"sqlite:///{folder / 'study.db'}"
    (name,) = optuna.study.get_all_study_names(storage)
    return optuna.load_study(study_name=name, storage=storage)


def test_another_library_version_is_refused_and_one_the_study_predates_is_adopted(
    tiny_study: tuple[Path, Path], tiny_models: dict, capsys: pytest.CaptureFixture
) -> None:
    model = tiny_models["bert"]
    tiny_task, folder = tiny_study
    study = _stored(folder)
    made = study.user_attrs["fingerprint"]
    trials = len(study.trials)
    assert not {f"{STACK}{n}" for n in identity.USED_WITH} & made.keys()  # a classification study
    for library in ("scikit-learn", "optuna"):
        now = made[f"{STACK}{library}"]
        assert now == metadata.version(library)
        study.set_user_attr("fingerprint", {**made, f"{STACK}{library}": "0.0.1"})  # made under another
        capsys.readouterr()
        run_tiny(tiny_task, model, "--threads", "1", expect=2)
        err = capsys.readouterr().err
        assert f"{STACK}{library} 0.0.1 -> {now}" in err and "--allow-stack-change" in err, err
        assert len(err.strip().splitlines()) == 1
    # Stored when every library was in every study's stack: not refused for ones its trials never ran.
    others = {f"{STACK}{n}": "0.0.1" for n in identity.USED_WITH}
    study.set_user_attr("fingerprint", {**made, **others})
    run_tiny(tiny_task, model, "--threads", "1")
    assert study.user_attrs["fingerprint"] == {**made, **others} and len(study.trials) == trials
    # Stored before these libraries joined the stack: resumed, and from now on they are checked too.
    added = ("scikit-learn", "scipy", "optuna")
    study.set_user_attr("fingerprint", {k: v for k, v in made.items() if k.removeprefix(STACK) not in added})
    run_tiny(tiny_task, model, "--threads", "1")
    assert study.user_attrs["fingerprint"] == made
    assert len(study.trials) == trials  # nothing trained twice
    kept = {k: v for k, v in made.items() if k.removeprefix(STACK) not in added}
    study.set_user_attr("fingerprint", {**kept, f"{STACK}torch": "0.0.1"})  # an entry it stored differs
    capsys.readouterr()
    run_tiny(tiny_task, model, "--threads", "1", expect=2)
    assert f"{STACK}torch 0.0.1 -> {made[STACK + 'torch']}" in capsys.readouterr().err


def test_the_feature_cache_misses_after_the_code_or_a_tokenizer_library_changes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    builds = []

    def build() -> list[int]:
        builds.append(1)
        return [len(builds)]

    key = {"kind": "test", "fields": [1, 2, 3]}
    assert cached(key, build) == [1] and cached(key, build) == [1]  # built once, then loaded
    monkeypatch.setattr(identity, "code_digest", lambda: "another code")
    assert cached(key, build) == [2]
    monkeypatch.setattr(identity, "version", lambda name: "0.0.1" if name == "tokenizers" else None)
    assert cached(key, build) == [3]
    assert cached(key, build) == [3] and len(builds) == 3


def test_tagging_features_are_rebuilt_for_other_code(
    tiny_ner: Path, tiny_tokenizers: dict, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The reader whose key once carried no version at all: its features follow the code digest."""
    data = prepare_task(load_task(tiny_ner), tiny_ner.parent / "data", tiny_tokenizers["wordpiece"]).data
    made = []
    featurize = type(data)._featurize
    monkeypatch.setattr(type(data), "_featurize", lambda self, *a: made.append(1) or featurize(self, *a))
    indices = data.dev_indices()
    first = data.features("dev", indices)
    assert data.features("dev", indices) == first
    before = len(made)
    monkeypatch.setattr(identity, "code_digest", lambda: "another code")
    assert data.features("dev", indices) == first and len(made) == before + 1


def test_a_tokenizer_names_one_cache_key_before_and_after_it_truncates() -> None:
    """transformers leaves truncation and padding on a fast tokenizer's backend at its first call
    with `truncation=True`: the fingerprint must not move with them (each process would tokenise
    again under a second key), but does with what changes the features (the maximum length)."""
    from suite.model.encoders import load_tokenizer

    tokenizer = load_tokenizer("minilm-l6")
    before = identity.tokenizer_fingerprint(tokenizer)
    tokenizer(["a sentence", "another"], truncation=True, max_length=8, padding=True)
    assert tokenizer.backend_tokenizer.truncation is not None  # the call did leave its state
    assert identity.tokenizer_fingerprint(tokenizer) == before
    tokenizer.model_max_length = 64
    assert identity.tokenizer_fingerprint(tokenizer) != before
