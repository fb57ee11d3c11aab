"""Stabilisers on tiny random encoders of every family: re-init touches exactly the top k layers,
LLRD and the head multiplier reach every optimizer group, a frozen encoder does not move, and
ALBERT (one shared layer) refuses per-layer stabilisers before any training."""

import json
import re
from pathlib import Path

import pytest
import torch

from suite.config.sweep import HParams, load_sweep
from suite.config.task import load_task
from suite.errors import SpecError
from suite.heads.registry import prepare_task
from suite.model import stabilisers
from suite.model.encoders import load_encoder, load_tokenizer
from suite.training.trial import _fit
from suite.training.trial_plan import Seeds, TrialPlan
from tests.conftest import ARCHITECTURES, run_tiny

LAYERED = [a for a in ARCHITECTURES if a != "albert"]
LAYER = re.compile(r"^(?:encoder\.layer|transformer\.layer|layers)\.(\d+)\.")


def _hp(**kw) -> HParams:  # noqa: ANN003
    return HParams(**{"lr": 1e-3, "batch_size": 8, "epochs": 1, **kw})


def _pretend_trained(encoder: torch.nn.Module, seed: int = 7) -> dict[str, torch.Tensor]:
    """Move every weight off its initial value (LayerNorm 1/0 included), so that a re-drawn tensor
    always differs from the 'pretrained' one; returns the copy to compare with."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in encoder.parameters():
            p.add_(torch.randn(p.shape, generator=gen) * 0.05)
    return {k: v.clone() for k, v in encoder.state_dict().items()}


@pytest.mark.parametrize("arch", LAYERED)
def test_reinit_changes_exactly_the_top_layers_reproducibly(arch: str, tiny_models: dict[str, Path]) -> None:
    drawn = []
    for seed in (11, 11, 12):
        encoder = load_encoder(str(tiny_models[arch]))
        before = _pretend_trained(encoder)
        torch.manual_seed(seed)
        stabilisers.reinit_top_layers(encoder, 1, pooler=False)
        after = encoder.state_dict()
        top = [k for k in after if (m := LAYER.match(k)) and int(m.group(1)) == 1]  # 2 layers: top = 1
        params = {k for k, _ in encoder.named_parameters()}
        assert top and all(not torch.equal(after[k], before[k]) for k in top if k in params), arch
        assert all(torch.equal(after[k], before[k]) for k in after if k not in top), arch
        drawn.append(torch.cat([after[k].flatten().float() for k in top]))
    assert torch.equal(drawn[0], drawn[1]) and not torch.equal(drawn[0], drawn[2])


@pytest.mark.parametrize(("arch", "pooled"), [("bert", True), ("roberta", False)])
def test_pooler_is_redrawn_only_when_the_head_reads_it(
    arch: str, pooled: bool, tiny_models: dict[str, Path], tiny_task: Path
) -> None:
    model = str(tiny_models[arch])
    prepared = prepare_task(load_task(tiny_task), tiny_task.parent.parent / "data", load_tokenizer(model))
    encoder = load_encoder(model)
    before = _pretend_trained(encoder)
    torch.manual_seed(3)
    module = prepared.build_module(encoder, _hp(reinit_layers=1))  # the `auto` head
    after = module.encoder.state_dict()
    if pooled:
        assert not torch.equal(after["pooler.dense.weight"], before["pooler.dense.weight"])
    else:  # a head that does not read the pooler drops it: nothing to re-draw
        assert "pooler.dense.weight" not in after
    words = "embeddings.word_embeddings.weight"
    assert torch.equal(after[words], before[words])


def _expected_multiplier(name: str, n_layers: int, f: float, head: float) -> float:
    """Written from the definition, independently of suite.model.stabilisers: the top layer at the base
    rate, x f per layer down, the embedding level at f^L, pooler/final norm at the base rate."""
    if not name.startswith("encoder."):
        return head * (100.0 if name.startswith("crf.") else 1.0)
    inner = name.removeprefix("encoder.")
    if m := LAYER.match(inner):
        return f ** (n_layers - 1 - int(m.group(1)))
    if inner.startswith(("pooler.", "final_norm.")):
        return 1.0
    return f**n_layers


def _group_rates(module: torch.nn.Module) -> dict[str, float]:
    names = {id(p): n for n, p in module.named_parameters()}
    rates: dict[str, float] = {}
    for group in module.make_optimizer().param_groups:
        for p in group["params"]:
            assert names[id(p)] not in rates, "a parameter in two groups"
            rates[names[id(p)]] = group["lr"]
    return rates


@pytest.mark.parametrize("arch", LAYERED)
def test_llrd_and_head_multiplier_reach_every_optimizer_group(
    arch: str, tiny_models: dict[str, Path], tiny_task: Path
) -> None:
    model = str(tiny_models[arch])
    prepared = prepare_task(load_task(tiny_task), tiny_task.parent.parent / "data", load_tokenizer(model))
    hp = _hp(lr=2e-3, llrd=0.5, head_lr_mult=4.0)
    module = prepared.build_module(load_encoder(model), hp)
    rates = _group_rates(module)
    assert set(rates) == {n for n, p in module.named_parameters() if p.requires_grad}
    for name, lr in rates.items():
        assert lr == pytest.approx(2e-3 * _expected_multiplier(name, 2, 0.5, 4.0)), (arch, name)
    assert min(rates.values()) == pytest.approx(2e-3 * 0.25)  # embeddings: f^L with L = 2


def test_head_multiplier_composes_with_a_crf_rate(tiny_models: dict[str, Path]) -> None:
    from suite.heads.tagging import TaggingModule

    tags = ["O", "B-PER", "I-PER"]
    encoder = load_encoder(str(tiny_models["bert"]))
    module = TaggingModule(encoder, _hp(head_lr_mult=3.0), tags, None, crf=True)
    for name, lr in _group_rates(module).items():
        assert lr == pytest.approx(1e-3 * _expected_multiplier(name, 2, 1.0, 3.0)), name


@pytest.mark.parametrize("arch", ARCHITECTURES)
@pytest.mark.parametrize("freeze", ["encoder", "embeddings"])
def test_frozen_weights_are_bit_identical_after_training(
    arch: str, freeze: str, tiny_models: dict[str, Path], tiny_task: Path
) -> None:
    model = str(tiny_models[arch])
    prepared = prepare_task(load_task(tiny_task), tiny_task.parent.parent / "data", load_tokenizer(model))
    plan = TrialPlan(32, _hp(freeze=freeze, epochs=2), Seeds(1, 2, 3))
    torch.manual_seed(plan.seeds.init)
    start = prepared.build_module(load_encoder(model), plan.hparams).state_dict()
    trained = _fit(prepared, model, plan, False, {}, {}, None)
    end = trained.state_dict()
    frozen = {n for n, p in trained.named_parameters() if not p.requires_grad}
    layout = stabilisers.encoder_layout(trained.encoder)
    if freeze == "encoder":
        assert frozen == {n for n, _ in trained.named_parameters() if n.startswith("encoder.")}
        assert not trained.encoder.training and trained.training  # no dropout noise in the features
    else:
        assert frozen and all(layout.level(n.removeprefix("encoder.")) == 0 for n in frozen)
    assert all(torch.equal(end[n], start[n]) for n in frozen), arch
    trainable = [n for n, p in trained.named_parameters() if p.requires_grad]
    moved = [n for n in trainable if not torch.equal(end[n], start[n])]
    head = [n for n in moved if not n.startswith("encoder.")]
    assert head, "the head did not train"
    if freeze == "embeddings":
        assert any(n.startswith("encoder.") for n in moved), "the layers did not train"


def _recipe_sweep(tmp: Path, recipes: str) -> Path:
    path = tmp / "sweeps" / "recipes.yaml"
    path.write_text(
        "name: recipes\nhparams: {lr: 1.0e-3, batch_size: 8, epochs: 1}\n"
        f"recipes:\n{recipes}seeds: {{repeats: 2}}\n"
    )
    return path


def test_albert_refuses_reinit_and_llrd_before_training(
    tiny_models: dict[str, Path], tiny_task: Path, capsys: pytest.CaptureFixture
) -> None:
    root = tiny_task.parent.parent
    sweep = _recipe_sweep(root, "  base: {}\n  deep: {llrd: 0.8}\n")
    run_tiny(tiny_task, tiny_models["albert"], "--sweep", str(sweep), expect=2)
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "recipes.yaml: field 'recipes.deep.llrd'" in err[0] and "albert" in err[0]
    assert not list((root / "runs").rglob("trials.jsonl"))
    encoder = load_encoder(str(tiny_models["albert"]))
    with pytest.raises(SpecError, match="field 'hparams.reinit_layers'"):
        sweep.write_text(sweep.read_text().replace("epochs: 1}", "epochs: 1, reinit_layers: 1}"))
        stabilisers.check_sweep(encoder, load_sweep(sweep), sweep)
    freeze_only = _recipe_sweep(root, "  frozen: {freeze: encoder}\n")
    stabilisers.check_sweep(encoder, load_sweep(freeze_only), freeze_only)  # freezing needs no layers
    deep = _recipe_sweep(root, "  base: {}\n  probe: {features: last4, classifier: cls}\n")
    with pytest.raises(SpecError, match="field 'recipes.probe.features'.*4 layers"):
        stabilisers.check_sweep(load_encoder(str(tiny_models["bert"])), load_sweep(deep), deep)
    with pytest.raises(SpecError, match="field 'recipes.probe.classifier'.*tagging"):
        stabilisers.check_sweep(
            encoder, load_sweep(_recipe_sweep(root, "  probe: {classifier: cls}\n")), "x", "tagging"
        )


def test_reinit_beyond_the_depth_and_meaningless_combinations_are_refused(
    tiny_models: dict[str, Path], tiny_task: Path
) -> None:
    root = tiny_task.parent.parent
    sweep = _recipe_sweep(root, "  deep: {reinit_layers: 3}\n")
    with pytest.raises(SpecError, match="field 'recipes.deep.reinit_layers'.*3 exceeds the 2 layers"):
        stabilisers.check_sweep(load_encoder(str(tiny_models["bert"])), load_sweep(sweep), sweep)
    bad = _recipe_sweep(root, "  odd: {freeze: encoder, reinit_layers: 1}\n")
    with pytest.raises(SpecError, match="field 'recipes.odd.reinit_layers'.*frozen encoder"):
        load_sweep(bad)
    unknown = _recipe_sweep(root, "  odd: {llrd: 1.5}\n")
    with pytest.raises(SpecError, match="field 'recipes.odd.llrd'"):
        load_sweep(unknown)


def test_settings_without_stabilisers_keep_their_keys_and_fingerprint(tiny_task: Path) -> None:
    from suite.identity import study_fingerprint

    plan = TrialPlan(32, _hp(), Seeds(1, 2, 3))
    assert plan.key == (  # the key studies were made with before stabilisers existed
        "size=32|batch_size=8,bias_correction=True,epochs=1,group_by_length=False,lr=0.001,"
        "max_grad_norm=1.0,min_steps=0,warmup_ratio=0.1,weight_decay=0.01|init=1,order=2,subsample=3"
    )
    assert "freeze=encoder" in TrialPlan(32, _hp(freeze="encoder"), Seeds(1, 2, 3)).key
    sweep = load_sweep(Path(__file__).resolve().parent.parent / "sweeps" / "seeds.yaml")
    fingerprint = study_fingerprint({}, sweep.model_dump(mode="json"), {}, {}, 1, {})
    assert not any(k.startswith("sweep.recipes") for k in fingerprint)


def test_a_recipe_reference_is_a_label_not_a_hyperparameter(tmp_path: Path) -> None:
    """`reference:` inside a recipe names what its table row is tested against: it leaves the
    recipe's hyperparameters and the study's fingerprint alone, and must name another recipe."""
    (tmp_path / "sweeps").mkdir()
    from suite.identity import study_fingerprint

    sweep = load_sweep(_recipe_sweep(tmp_path, "  base: {}\n  deep: {llrd: 0.9, reference: base}\n"))
    assert sweep.references == {"deep": "base"} and sweep.recipes["deep"] == {"llrd": 0.9}
    assert "reference" not in sweep.merged({"recipe": "deep"})
    plain = load_sweep(_recipe_sweep(tmp_path, "  base: {}\n  deep: {llrd: 0.9}\n"))
    dump = plain.model_dump(mode="json"), sweep.model_dump(mode="json")
    assert study_fingerprint({}, dump[0], {}, {}, 1, {}) == study_fingerprint({}, dump[1], {}, {}, 1, {})
    for bad in ("deep", "nope"):
        path = _recipe_sweep(tmp_path, f"  base: {{}}\n  deep: {{llrd: 0.9, reference: {bad}}}\n")
        with pytest.raises(SpecError, match="field 'recipes.deep.reference'"):
            load_sweep(path)


def test_recipe_and_stabilisers_are_recorded_per_trial(tiny_models: dict[str, Path], tiny_task: Path) -> None:
    root = tiny_task.parent.parent
    recipes = (
        "  base: {}\n  top: {reinit_layers: 1, llrd: 0.9, head_lr_mult: 2.0}\n  mean: {classifier: mean}\n"
    )
    folder = run_tiny(tiny_task, tiny_models["bert"], "--sweep", str(_recipe_sweep(root, recipes)))
    records = [json.loads(line) for line in (folder / "trials.jsonl").read_text().splitlines()]
    by_recipe = {r["hparams"]["recipe"]: r for r in records}
    assert len(records) == 6 and set(by_recipe) == {"base", "top", "mean"}
    assert (
        "reinit_layers" not in by_recipe["base"]["hparams"]
        and "classifier" not in by_recipe["base"]["hparams"]
    )
    assert by_recipe["mean"]["head"] == "mean" and by_recipe["base"]["head"].startswith("auto")
    assert {k: by_recipe["top"]["hparams"][k] for k in ("reinit_layers", "llrd", "head_lr_mult")} == {
        "reinit_layers": 1,
        "llrd": 0.9,
        "head_lr_mult": 2.0,
    }
    fingerprint = json.loads((folder / "run.json").read_text())["fingerprint"]
    assert fingerprint["sweep.recipes.top.reinit_layers"] == 1
