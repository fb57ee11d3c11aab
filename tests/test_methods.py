"""A fine-tuning method from the user's own code (suite/model/methods.py, docs/methods.md), on tiny
encoders: the two examples change training as their papers say (R-Drop's loss holds its KL term,
NoisyTune's weights move by its noise scale) and rerun exactly; every hook reaches training; the
method's code is in the study's identity (an edited method refuses its stored study, a worker with
other code takes no trial); each bad input is one line naming the sweep file and field, before any
trial, and after the early checks."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from torch.nn import functional as F

from suite.commands.cli import main
from suite.config.request import Request
from suite.config.sweep import HParams, SweepSpec
from suite.config.task import load_task
from suite.errors import SuiteError
from suite.heads.registry import PreparedTask, prepare_task
from suite.model.encoders import load_encoder, load_tokenizer
from suite.model.method_code import method_code
from suite.training.replicas import check_group
from suite.training.trial import run_trial
from suite.training.trial_plan import Seeds, TrialPlan
from tests.conftest import REPO, run_tiny

EXAMPLES = REPO / "examples"
HOOKS = "setup, param_groups, optimizer, loss, callbacks"

# A user's own package, beside the command (the current directory): what the tests name.
USER_CODE = {
    "__init__.py": "",
    "plain.py": '''
import torch
from lightning import Callback
from suite.model.methods import Method

SEEN = []


class Plain:  # no hook at all
    def __init__(self, scale=1.0):
        self.scale = scale


class NoLora(Method):
    incompatible = {"adapter": {"lora"}}

    def loss(self, batch, outputs, base_loss, module):
        return base_loss


class Seen(Callback):
    def on_train_epoch_end(self, trainer, module):
        SEEN.append(trainer.current_epoch)


class Hooks(Method):
    """param_groups (the head at 10x), optimizer (plain SGD) and callbacks."""

    def param_groups(self, module, groups):
        head = {id(p) for n, p in module.named_parameters() if not n.startswith("encoder.")}
        out = []
        for g in groups:
            for at_head in (False, True):
                if params := [p for p in g["params"] if (id(p) in head) == at_head]:
                    out.append({**g, "params": params, "lr": g["lr"] * (10 if at_head else 1)})
        return out

    def optimizer(self, module, groups):
        return torch.optim.SGD(groups, lr=module.train_hparams.lr)

    def callbacks(self):
        return [Seen()]


class Boom(Method):
    def loss(self, batch, outputs, base_loss, module):
        raise RuntimeError("the method's own bug")
''',
    "marker.py": """
from pathlib import Path

Path("imported").write_text("the method's module ran")  # in the current directory


class Marked:
    def loss(self, batch, outputs, base_loss, module):
        return base_loss
""",
}


@pytest.fixture(autouse=True)
def _one_thread() -> Iterator[None]:
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture
def user_code(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """`mymethods` (the two examples and USER_CODE) in tmp_path, the current directory; what it
    imports and the import path are put back afterwards."""
    package = tmp_path / "mymethods"
    shutil.copytree(EXAMPLES / "methods", package, ignore=shutil.ignore_patterns("*.yaml", "__pycache__"))
    for name, text in USER_CODE.items():
        (package / name).write_text(text)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))
    yield package
    for name in [m for m in sys.modules if m == "mymethods" or m.startswith("mymethods.")]:
        del sys.modules[name]


@pytest.fixture
def examples(monkeypatch: pytest.MonkeyPatch) -> None:
    """The shipped examples importable as a user runs them (from examples/)."""
    monkeypatch.syspath_prepend(str(EXAMPLES))


@pytest.fixture
def bert(tiny_models: dict[str, Path]) -> str:
    return str(tiny_models["bert"])


@pytest.fixture
def tiny(bert: str, tiny_task: Path) -> PreparedTask:
    return prepare_task(load_task(tiny_task), tiny_task.parent.parent / "data", load_tokenizer(bert))


def _hp(**kw: object) -> HParams:
    return HParams(**{"lr": 1e-3, "batch_size": 8, "epochs": 1, **kw})


def _sweep(root: Path, recipes: str, name: str = "m") -> Path:
    path = root / "sweeps" / f"{name}.yaml"
    path.parent.mkdir(exist_ok=True)
    path.write_text(
        f"name: {name}\nhparams: {{lr: 1.0e-3, batch_size: 8, epochs: 1}}\nseeds: {{repeats: 1}}\n"
        f"recipes:\n{recipes}"
    )
    return path


def _error_lines(capsys: pytest.CaptureFixture) -> list[str]:
    return [line for line in capsys.readouterr().err.splitlines() if line.strip()]


# --------------------------------------------------------------------------------------------
# The key: method and method_args are hyperparameters, out of it when absent


def test_a_method_is_part_of_the_key_and_its_arguments_enter_it_canonically() -> None:
    plain = _hp()
    assert not {"method", "method_args"} & set(plain.as_record())  # every existing key unchanged
    seeds = Seeds(1, 2, 3)
    key = TrialPlan(32, plain, seeds).key
    assert key == (  # as before methods existed
        "size=32|batch_size=8,bias_correction=True,epochs=1,group_by_length=False,lr=0.001,"
        "max_grad_norm=1.0,min_steps=0,warmup_ratio=0.1,weight_decay=0.01|init=1,order=2,subsample=3"
    )
    spellings = [{"b": 2, "alpha": "1e0"}, {"alpha": 1.0, "b": 2.0}, {"b": 2, "alpha": 1}]
    keys = {TrialPlan(32, _hp(method="p.m:M", method_args=a), seeds).key for a in spellings}
    assert len(keys) == 1 and 'method_args={"alpha": 1, "b": 2}' in keys.pop()  # JSON: one value
    assert TrialPlan(32, _hp(method="p.m:M"), seeds).key != key  # a method is not plain `full`
    assert _hp(method="p.m:M", method_args={}) == _hp(method="p.m:M")  # no arguments: one setting
    with pytest.raises(ValueError, match="method_args are the arguments of a `method`"):
        _hp(method_args={"alpha": 1})
    with pytest.raises(ValueError, match="expected an import path package.module:Object"):
        _hp(method="mypkg.rdrop")
    sweep = SweepSpec.model_validate(
        {
            "name": "s",
            "hparams": {"lr": 1e-3, "batch_size": 8, "epochs": 1},
            "recipes": {"r": {"method": "p.m:M", "method_args": {"a": "1e-4"}}},
        }
    )
    assert sweep.recipes["r"]["method_args"] == {"a": 0.0001}  # as the key reads it


# --------------------------------------------------------------------------------------------
# The examples change training as their papers say, and rerun exactly


def test_rdrop_loss_holds_its_kl_term(tiny: PreparedTask, bert: str, examples: None) -> None:
    """R-Drop's step loss = mean of two passes' cross-entropies + alpha x their symmetric KL,
    recomputed here from two forward passes drawn in the same order from the same seed."""
    alpha = 2.5
    module = tiny.build_trial_module(
        load_encoder(bert), _hp(method="methods.rdrop:RDrop", method_args={"alpha": alpha}), 1
    )
    module.train()
    train = tiny.data.features("train", tiny.data.train_indices(32, 3))
    batch = tiny.collate([{k: v for k, v in f.items() if k != "example"} for f in train[:8]])
    torch.manual_seed(5)
    loss = module.step_loss(batch)
    torch.manual_seed(5)
    with torch.no_grad():
        first, second = module(batch), module(batch)
    ce = (F.cross_entropy(first, batch["labels"]) + F.cross_entropy(second, batch["labels"])) / 2
    p, q = first.log_softmax(-1), second.log_softmax(-1)
    kl = (
        F.kl_div(q, p, log_target=True, reduction="batchmean")
        + F.kl_div(p, q, log_target=True, reduction="batchmean")
    ) / 2
    assert kl > 1e-6  # dropout made the two passes differ: there is a term to hold
    assert torch.allclose(loss.detach(), ce + alpha * kl, rtol=1e-5, atol=1e-7)


def test_noisytune_moves_each_pretrained_matrix_by_its_stated_noise_scale(
    tiny: PreparedTask, bert: str, examples: None
) -> None:
    """Each pretrained tensor moves by U(-lambda/2, lambda/2) x its own std: no element beyond
    lambda/2 stds, the large ones filling that range with a uniform's spread (lambda / sqrt 12); the
    head is the one plain fine-tuning draws from the same init seed; the noise is the init seed's."""
    lam = 0.15
    hp = _hp(method="methods.noisytune:NoisyTune", method_args={"noise_lambda": lam})
    before = {n: p.detach().clone() for n, p in load_encoder(bert).named_parameters()}
    torch.manual_seed(4)
    noisy = tiny.build_trial_module(load_encoder(bert), hp, 4)
    torch.manual_seed(4)
    plain = tiny.build_module(load_encoder(bert), _hp())
    moved = 0
    for name, param in noisy.encoder.named_parameters():
        old = before[name]
        if old.numel() < 2 or old.std() == 0:  # no spread (a fresh LayerNorm's 1s): no noise
            assert torch.equal(param, old), name
            continue
        ratio = (param.detach() - old) / old.std()
        assert ratio.abs().max() <= lam / 2 * (1 + 1e-4), name
        if old.numel() >= 1024:
            assert ratio.abs().max() >= 0.95 * lam / 2, name
            assert abs(ratio.std().item() - lam / 12**0.5) < 0.05 * lam / 12**0.5, name
            assert abs(ratio.mean().item()) < 0.05 * lam, name
            moved += 1
    assert moved >= 10  # the embeddings and every attention and feed-forward matrix
    head = {n: p for n, p in plain.named_parameters() if not n.startswith("encoder.")}
    assert head and all(torch.equal(p, head[n]) for n, p in noisy.named_parameters() if n in head)
    torch.manual_seed(4)
    again = tiny.build_trial_module(load_encoder(bert), hp, 4).state_dict()
    other = tiny.build_trial_module(load_encoder(bert), hp, 5).state_dict()
    words = "encoder.embeddings.word_embeddings.weight"
    assert torch.equal(again[words], noisy.state_dict()[words])
    assert not torch.equal(other[words], again[words])


def test_a_rerun_of_a_trial_of_each_example_gives_an_identical_score(
    tiny: PreparedTask, bert: str, examples: None
) -> None:
    plain = run_trial(tiny, bert, TrialPlan(32, _hp(), Seeds(1, 2, 3)))
    for path, args in (("methods.rdrop:RDrop", {"alpha": 1.0}), ("methods.noisytune:NoisyTune", {})):
        plan = TrialPlan(32, _hp(method=path, method_args=args), Seeds(1, 2, 3))
        first, second = run_trial(tiny, bert, plan), run_trial(tiny, bert, plan)
        assert first["outcome"] != "errored", first.get("reason")
        assert first["score"] == second["score"] and first["loss_curve"] == second["loss_curve"]
        assert first["per_example"] == second["per_example"]
        assert first["method"] == {"path": path, "hash": method_code(path).hash}
        assert first["loss_curve"] != plain["loss_curve"]  # the method changed training


def test_every_hook_reaches_training_and_a_hook_that_raises_errors_its_trial(
    tiny: PreparedTask, bert: str, user_code: Path
) -> None:
    """param_groups (the head's rate), optimizer (SGD, recorded by its class) and callbacks run in a
    trial; an exception in a hook is an errored trial with its reason, not a stopped study."""
    module = tiny.build_trial_module(load_encoder(bert), _hp(method="mymethods.plain:Hooks"), 1)
    from mymethods.plain import SEEN  # imported from the current directory, as the suite imported it

    optimizer = module.make_optimizer()
    rate = {id(p): g["lr"] for g in optimizer.param_groups for p in g["params"]}
    expected = {id(p): 1e-3 if n.startswith("encoder.") else 1e-2 for n, p in module.named_parameters()}
    assert isinstance(optimizer, torch.optim.SGD) and rate == expected
    record = run_trial(
        tiny, bert, TrialPlan(32, _hp(method="mymethods.plain:Hooks", epochs=2), Seeds(1, 2, 3))
    )
    assert record["outcome"] != "errored" and record["optimizer"] == "torch.optim.sgd.SGD"
    assert SEEN == [0, 1]
    boom = run_trial(tiny, bert, TrialPlan(32, _hp(method="mymethods.plain:Boom"), Seeds(1, 2, 3)))
    assert boom["outcome"] == "errored"
    assert boom["reason"].startswith("error: RuntimeError: the method's own bug (plain.py:")


# --------------------------------------------------------------------------------------------
# The method's code is in the identity


def test_an_edited_method_refuses_its_stored_study_in_one_line_naming_it(
    tiny_task: Path, bert: str, user_code: Path, capsys: pytest.CaptureFixture
) -> None:
    """Every record names its method and hash; a comment appended to the method's file is another
    method: `run` refuses the stored study, `plan` says so too, printing the method's path, file
    and hash and timing its steps with it."""
    sweep = _sweep(
        tiny_task.parent.parent, "  rdrop: {method: 'mymethods.rdrop:RDrop', method_args: {alpha: 0.5}}\n"
    )
    folder = run_tiny(tiny_task, Path(bert), "--sweep", str(sweep), "--threads", "1")
    [record] = [json.loads(line) for line in (folder / "trials.jsonl").read_text().splitlines()]
    old = method_code("mymethods.rdrop:RDrop").hash
    assert record["hparams"]["method"] == "mymethods.rdrop:RDrop" and record["method"]["hash"] == old
    capsys.readouterr()
    with (user_code / "rdrop.py").open("a") as file:
        file.write("# a comment\n")
    new = method_code("mymethods.rdrop:RDrop").hash
    assert new != old
    run_tiny(tiny_task, Path(bert), "--sweep", str(sweep), "--threads", "1", expect=2)
    name = f"tiny|{bert}|m|default"
    assert _error_lines(capsys) == [
        f"error: study {name!r} in {folder} ran method mymethods.rdrop:RDrop at code {old}; its code "
        f"here is {new} (edited since): a fixed method is a new study: add --study NAME or use another --out"
    ]
    root = tiny_task.parent.parent
    args = ["plan", str(tiny_task), "--model", bert, "--sweep", str(sweep), "--out", str(root / "runs")]
    assert main([*args, "--data-dir", str(root / "data"), "--quiet", "--threads", "1"]) == 2
    out = capsys.readouterr().out
    assert f"method mymethods.rdrop:RDrop: mymethods/rdrop.py, code {new}" in out.splitlines()


def test_a_recipe_with_a_new_method_grows_the_study_and_an_edited_one_is_refused(tiny_task: Path) -> None:
    """From the stored and current fingerprints alone: a recipe added with its method grows the plan
    by its trials; the same method at another code hash is refused in its own line."""
    from suite.identity import study_fingerprint
    from suite.study.resume import resumption

    task = load_task(tiny_task)
    base = {"name": "s", "hparams": {"lr": 1e-3, "batch_size": 8, "epochs": 1}, "seeds": {"repeats": 2}}
    before = SweepSpec.model_validate({**base, "recipes": {"full": {}}})
    after = SweepSpec.model_validate({**base, "recipes": {"full": {}, "r": {"method": "p.m:M"}}})

    def fingerprint(sweep: SweepSpec, methods: dict[str, str]) -> dict:
        return study_fingerprint(
            task.model_dump(mode="json"), sweep.model_dump(mode="json"), {}, {}, 1, {}, methods=methods
        )

    info = {"task": task.model_dump(mode="json"), "sweep": before.model_dump(mode="json")}
    stored = fingerprint(before, {})
    grown = resumption(stored, fingerprint(after, {"p.m:M": "aaaa"}), info, task, after, "s", "here")
    assert grown.added == 2 and grown.stored == 2 and "method.p.m:M (absent) -> aaaa" in grown.grown
    stored = fingerprint(after, {"p.m:M": "aaaa"})
    with pytest.raises(SuiteError) as refused:
        resumption(stored, fingerprint(after, {"p.m:M": "bbbb"}), info, task, after, "s", "here")
    assert str(refused.value) == (
        "study 's' in here ran method p.m:M at code aaaa; its code here is bbbb (edited since): a fixed "
        "method is a new study: add --study NAME or use another --out"
    )


def test_a_worker_whose_method_hashes_otherwise_takes_no_trial(
    tiny_task: Path, bert: str, user_code: Path, capsys: pytest.CaptureFixture
) -> None:
    import optuna

    from suite.study.planning import plan_study

    root = tiny_task.parent.parent
    sweep = _sweep(root, "  rdrop: {method: 'mymethods.rdrop:RDrop'}\n")
    request = Request(
        task=str(tiny_task),
        sweep=str(sweep),
        model=bert,
        data_dir=root / "data",
        out=root / "runs",
        threads=1,
        quiet=True,
    )
    s, study = plan_study(request)
    old = method_code("mymethods.rdrop:RDrop").hash
    with (user_code / "rdrop.py").open("a") as file:
        file.write("# this node's checkout differs\n")
    capsys.readouterr()
    code = main(
        [
            "worker",
            "--storage",
            s.url,
            "--study",
            s.name,
            "--data-dir",
            str(root / "data"),
            "--quiet",
            "--threads",
            "1",
        ]
    )
    assert code == 2
    new = method_code("mymethods.rdrop:RDrop").hash
    assert _error_lines(capsys) == [
        f"error: worker: method mymethods.rdrop:RDrop as imported here (mymethods/rdrop.py) is code "
        f"{new}; study {s.name!r} ran code {old}: this worker takes no trial (give it the study's "
        "method code: the same checkout on PYTHONPATH, or the same installed package)"
    ]
    states = [t.state for t in optuna.load_study(study_name=s.name, storage=s.url).get_trials()]
    assert states == [optuna.trial.TrialState.WAITING]


# --------------------------------------------------------------------------------------------
# Bad input: one line naming the sweep file and field, exit 2, before any trial


BAD = [
    (
        "{method: 'mymethods.absent:X'}",
        "method",
        "cannot import 'mymethods.absent' (ModuleNotFoundError: No module named 'mymethods.absent')",
    ),
    ("{method: 'mymethods.rdrop:RDropp'}", "method", "module 'mymethods.rdrop' has no object 'RDropp'"),
    ("{method: 'mymethods.plain:Plain'}", "method", f"mymethods.plain:Plain has none of the hooks {HOOKS}"),
    (
        "{method: 'mymethods.rdrop:RDrop', method_args: {beta: 2}}",
        "method_args",
        "mymethods.rdrop:RDrop refused its arguments (beta=2): TypeError: "
        "RDrop.__init__() got an unexpected keyword argument 'beta'",
    ),
    (
        "{method: 'mymethods.rdrop:RDrop', method_args: {alpha: -1}}",
        "method_args",
        "mymethods.rdrop:RDrop refused its arguments (alpha=-1): ValueError: alpha is a weight >= 0, got -1",
    ),
    (
        "{method: 'mymethods.plain:NoLora', adapter: lora}",
        "method",
        "mymethods.plain:NoLora cannot be combined with adapter lora (its `incompatible`; adapter set by "
        "'recipes.bad.adapter')",
    ),
]


@pytest.mark.parametrize(("recipe", "field", "why"), BAD)
def test_each_bad_method_is_one_line_naming_the_sweep_file_and_field(
    recipe: str, field: str, why: str, tmp_path: Path, user_code: Path, capsys: pytest.CaptureFixture
) -> None:
    sweep = _sweep(tmp_path, f"  full: {{}}\n  bad: {recipe}\n")
    assert main(["validate", str(sweep)]) == 2
    assert _error_lines(capsys) == [f"error: {sweep}: field 'recipes.bad.{field}': {why}"]


def test_a_bad_method_stops_run_before_any_trial(
    tiny_task: Path, bert: str, user_code: Path, capsys: pytest.CaptureFixture
) -> None:
    root = tiny_task.parent.parent
    sweep = _sweep(root, "  bad: {method: 'mymethods.rdrop:RDropp'}\n")
    run_tiny(tiny_task, Path(bert), "--sweep", str(sweep), expect=2)
    assert _error_lines(capsys) == [
        f"error: {sweep}: field 'recipes.bad.method': module 'mymethods.rdrop' has no object 'RDropp'"
    ]
    assert not list((root / "runs").rglob("study.db"))


def test_the_early_checks_come_before_any_method_is_imported(
    tiny_task: Path, bert: str, user_code: Path, capsys: pytest.CaptureFixture
) -> None:
    """An unwritable --out and an oversized spec are refused without running the method's code."""
    root = tiny_task.parent.parent
    sweep = _sweep(root, "  marked: {method: 'mymethods.marker:Marked'}\n")
    (root / "afile").write_text("")
    args = ["run", str(tiny_task), "--model", bert, "--sweep", str(sweep), "--data-dir", str(root / "data")]
    assert main([*args, "--out", str(root / "afile" / "runs"), "--quiet"]) == 2
    [line] = _error_lines(capsys)  # the early check's own line (its wording is the check's)
    assert line.startswith(f"error: --out {root / 'afile' / 'runs'}: ") and line.endswith(
        "give another --out"
    )
    with sweep.open("a") as file:
        file.write("#" * (256 * 1024) + "\n")
    assert main([*args, "--out", str(root / "runs"), "--quiet"]) == 2
    assert "a task or sweep spec may hold" in _error_lines(capsys)[0]
    assert not (root / "imported").exists()
    sweep.write_text(sweep.read_text()[: -(256 * 1024 + 1)])
    assert main(["validate", str(sweep)]) == 0
    assert (root / "imported").exists()  # the same sweep, checked: its method's module ran


def test_replicate_groups_refuse_methods(tiny: PreparedTask) -> None:
    """Replicate-parallel training stacks modules: a method's hooks act on one, so it trains alone."""
    plans = [TrialPlan(32, _hp(method="p.m:M"), Seeds(i, i, 3)) for i in (1, 2)]
    with pytest.raises(SuiteError) as refused:
        check_group(tiny, plans)
    assert str(refused.value) == (
        "replicate group: method p.m:M is not supported (a setting with a method trains one trial at "
        "a time: run_trial)"
    )


# --------------------------------------------------------------------------------------------
# The example sweep end to end (the acceptance command), on the bundled model and real RTE


@pytest.mark.slow
def test_the_example_sweep_trains_full_and_both_methods_on_paired_seeds(
    shared_data: Path, tmp_path: Path
) -> None:
    env = {**os.environ, "SUITE_DATA_DIR": str(shared_data), "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(REPO)}
    command = [
        sys.executable,
        "-m",
        "suite",
        "run",
        "rte",
        "--sweep",
        "methods/methods.yaml",
        "--profile",
        "smoke",
    ]
    # The acceptance command; only the dev set is cut to 64 examples (evaluating RTE's 277 takes
    # most of its 3 minutes on 2 cores).
    command += [
        "--size",
        "32",
        "--set",
        "eval_limit=64",
        "--out",
        str(tmp_path / "runs"),
        "--quiet",
        "--threads",
        "1",
    ]
    done = subprocess.run(command, cwd=EXAMPLES, env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode in (0, 1), done.stderr[-3000:]
    table = done.stdout[done.stdout.index("recipes at size 32") :].splitlines()
    assert [line.split()[0] for line in table[2:5]] == ["full", "rdrop", "noisytune"]
    records = [
        json.loads(line) for line in next(tmp_path.glob("runs/rte/*/trials.jsonl")).read_text().splitlines()
    ]
    by_recipe: dict[str, list[dict]] = {}
    for r in records:
        by_recipe.setdefault(r["hparams"]["recipe"], []).append(r)
    seeds = {name: sorted(json.dumps(r["seeds"]) for r in runs) for name, runs in by_recipe.items()}
    assert (
        len(seeds) == 3 and seeds["full"] == seeds["rdrop"] == seeds["noisytune"] and len(seeds["full"]) == 2
    )
    assert "method" not in by_recipe["full"][0]
    for name, path in (("rdrop", "methods.rdrop:RDrop"), ("noisytune", "methods.noisytune:NoisyTune")):
        hashes = {r["method"]["hash"] for r in by_recipe[name]}
        assert {r["method"]["path"] for r in by_recipe[name]} == {path} and len(hashes) == 1
