"""The [CLS] head trains on a tiny random encoder of every supported family."""

import math
from pathlib import Path

import pytest

from suite.config.sweep import HParams
from suite.config.task import load_task
from suite.heads.registry import prepare_task
from suite.model.encoders import load_tokenizer
from suite.training.trial import run_trial
from suite.training.trial_plan import Seeds, TrialPlan
from tests.conftest import ARCHITECTURES

HP = HParams(lr=1e-3, batch_size=8, epochs=1)


@pytest.mark.parametrize("arch", ARCHITECTURES)
def test_classification_head_trains_on_each_family(arch: str, tiny_models, tiny_task: Path) -> None:
    model = str(tiny_models[arch])
    prepared = prepare_task(load_task(tiny_task), tiny_task.parent.parent / "data", load_tokenizer(model))
    record = run_trial(prepared, model, TrialPlan(16, HP, Seeds(1, 2, 3)))
    assert record.get("reason") is None or not record["reason"].startswith("error"), record["reason"]
    assert len(record["loss_curve"]) == 2 and all(math.isfinite(v) for v in record["loss_curve"])
    assert 0.0 <= record["score"] <= 1.0
    assert record["tokens"]["real"] <= record["tokens"]["padded"]


@pytest.mark.parametrize("arch", ["bert", "roberta", "electra", "distilbert"])
def test_auto_head_is_the_familys_reference_head(arch: str, tiny_models) -> None:  # noqa: ANN001
    """`classifier: auto` computes exactly what AutoModelForSequenceClassification computes from
    the same checkpoint and head weights (BERT: through the pretrained pooler)."""
    import torch
    from transformers import AutoModelForSequenceClassification

    from suite.config.sweep import HParams
    from suite.heads.classification import ClassificationModule
    from suite.model.encoders import load_encoder

    folder = str(tiny_models[arch])
    module = ClassificationModule(
        load_encoder(folder), HParams(lr=1e-3, batch_size=8, epochs=1), 3, ["accuracy"]
    )
    reference = AutoModelForSequenceClassification.from_pretrained(folder, num_labels=3)
    head = {
        k: v
        for k, v in module.reference.state_dict().items()
        if not k.startswith(reference.base_model_prefix)
    }
    reference.load_state_dict(head, strict=False)
    batch = {
        "input_ids": torch.tensor([[101, 2023, 2003, 102, 0]]),
        "attention_mask": torch.tensor([[1, 1, 1, 1, 0]]),
    }
    module.eval(), reference.eval()
    with torch.no_grad():
        assert torch.allclose(module(batch), reference(**batch).logits, atol=1e-5)
    assert module.head_name == f"auto: {type(reference).__name__}"


def test_pooler_head_needs_a_pretrained_pooler(tiny_models) -> None:  # noqa: ANN001
    from suite.config.sweep import HParams
    from suite.errors import SpecError
    from suite.heads.classification import ClassificationModule
    from suite.model.encoders import load_encoder

    hp = HParams(lr=1e-3, batch_size=8, epochs=1)
    bert = ClassificationModule(
        load_encoder(str(tiny_models["bert"])), hp, 2, ["accuracy"], classifier="pooler"
    )
    assert bert.head_name == "pooler"
    with pytest.raises(SpecError, match="classifier.*pooler"):
        ClassificationModule(
            load_encoder(str(tiny_models["electra"])), hp, 2, ["accuracy"], classifier="pooler"
        )


def test_classifier_field_reaches_every_trial(tiny_models, tiny_task: Path) -> None:  # noqa: ANN001
    from suite.errors import SpecError

    tiny_task.write_text(tiny_task.read_text() + "classifier: cls\n")
    model = str(tiny_models["bert"])
    prepared = prepare_task(load_task(tiny_task), tiny_task.parent.parent / "data", load_tokenizer(model))
    assert run_trial(prepared, model, TrialPlan(16, HP, Seeds(1, 2, 3)))["head"] == "cls"
    tiny_task.write_text(tiny_task.read_text().replace("classifier: cls", "classifier: mlp"))
    with pytest.raises(SpecError, match="field 'classifier'"):
        load_task(tiny_task)


@pytest.mark.parametrize("arch", ARCHITECTURES)
@pytest.mark.parametrize("classifier", ["auto", "cls", "mean"])
def test_every_trained_parameter_gets_a_gradient(arch: str, classifier: str, tiny_models) -> None:  # noqa: ANN001
    """Nothing is computed or optimised that the loss does not read: a pretrained pooler the
    head ignores (RoBERTa's and ELECTRA's reference heads, the `cls` head) is dropped."""
    import torch

    from suite.heads.classification import ClassificationModule
    from suite.model.encoders import load_encoder

    encoder = load_encoder(str(tiny_models[arch]))
    module = ClassificationModule(encoder, HP, 2, ["accuracy"], classifier=classifier)
    batch = {
        "input_ids": torch.tensor([[5, 6, 7, 8, 0], [5, 9, 10, 11, 12]]),
        "attention_mask": torch.tensor([[1, 1, 1, 1, 0], [1, 1, 1, 1, 1]]),
        "labels": torch.tensor([0, 1]),
    }
    module.loss(batch).backward()
    idle = [name for name, p in module.named_parameters() if p.requires_grad and p.grad is None]
    assert idle == []
    uses_pooler = classifier == "auto" and arch in ("bert", "albert")
    assert (getattr(module.encoder, "pooler", None) is not None) == uses_pooler


def test_mean_head_pools_only_the_unmasked_states(tiny_models) -> None:  # noqa: ANN001
    """`classifier: mean` averages the last layer over the attention mask: padding an example
    changes nothing, and the pooled vector is the plain mean of its real tokens' states."""
    import torch

    from suite.heads.classification import ClassificationModule, mean_pool
    from suite.model.encoders import load_encoder

    module = ClassificationModule(
        load_encoder(str(tiny_models["bert"])), HP, 3, ["accuracy"], classifier="mean"
    )
    module.eval()
    padded = {"input_ids": torch.tensor([[5, 6, 7, 0, 0]]), "attention_mask": torch.tensor([[1, 1, 1, 0, 0]])}
    bare = {"input_ids": torch.tensor([[5, 6, 7]]), "attention_mask": torch.tensor([[1, 1, 1]])}
    with torch.no_grad():
        assert torch.allclose(module(padded), module(bare), atol=1e-5)
        hidden = module.encode(bare)
        assert torch.allclose(mean_pool(hidden, bare["attention_mask"]), hidden.mean(1))
    assert module.head_name == "mean" and getattr(module.encoder, "pooler", None) is None


@pytest.mark.parametrize("arch", ["bert", "roberta"])
def test_feature_based_heads_read_the_last_four_layers_of_a_frozen_encoder(arch: str, tmp_path: Path) -> None:
    """`features: last4` (Devlin et al. 2019 s5.3): the head's input is the last four layers
    concatenated; classification puts a small MLP on it, tagging a 2-layer BiLSTM, and under a
    frozen encoder only the head learns. A padded tagging batch scores its sentence as alone."""
    import torch

    from suite.heads.classification import ClassificationModule
    from suite.heads.tagging import TaggingModule
    from suite.model import stabilisers
    from suite.model.encoders import load_encoder
    from tests.conftest import save_tiny_models

    def four_layers(config) -> None:  # noqa: ANN001
        config.num_hidden_layers = 4

    folder = save_tiny_models(tmp_path, [arch], four_layers)[arch]
    hp = HP.model_copy(update={"features": "last4", "freeze": "encoder"})
    batch = {
        "input_ids": torch.tensor([[5, 6, 7, 8, 0], [5, 9, 10, 11, 12]]),
        "attention_mask": torch.tensor([[1, 1, 1, 1, 0], [1, 1, 1, 1, 1]]),
        "labels": torch.tensor([0, 1]),
    }
    classify = ClassificationModule(load_encoder(str(folder)), hp, 2, ["accuracy"], classifier="mean")
    stabilisers.apply(classify, hp)
    assert classify.encode(batch).shape == (2, 5, 4 * classify.hidden_size)
    classify.loss(batch).backward()
    learning = {n for n, p in classify.named_parameters() if p.grad is not None}
    assert learning == {f"classifier.{i}.{w}" for i in (0, 3) for w in ("weight", "bias")}
    tagger = TaggingModule(load_encoder(str(folder)), hp, ["O", "B-X", "I-X"], lambda w: ({}, {}))
    tagger.eval()
    with torch.no_grad():
        both = tagger({k: batch[k] for k in ("input_ids", "attention_mask")})
        alone = tagger(
            {"input_ids": batch["input_ids"][:1, :4], "attention_mask": batch["attention_mask"][:1, :4]}
        )
    assert tagger.lstm.num_layers == 2 and tagger.lstm.bidirectional
    assert torch.allclose(both[0, :4], alone[0], atol=1e-5)


def test_a_setting_chooses_its_head_and_is_refused_where_it_cannot_apply() -> None:
    from suite.model.stabilisers import head_refusal

    assert head_refusal({"classifier": "mean"}, "classification", "auto") is None
    assert head_refusal({"classifier": "mean"}, "tagging", "auto")[0] == "classifier"
    assert head_refusal({"features": "last4"}, "classification", "auto")[0] == "features"
    assert head_refusal({"features": "last4", "classifier": "cls"}, "classification", "auto") is None
    assert head_refusal({"features": "last4"}, "tagging", "auto") is None
