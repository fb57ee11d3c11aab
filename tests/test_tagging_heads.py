"""The token-tagging head (linear and CRF) trains on a tiny encoder of every family."""

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


def _train(task_path: Path, model: str, tokenizer=None) -> dict:  # noqa: ANN001
    tokenizer = tokenizer or load_tokenizer(model)
    prepared = prepare_task(load_task(task_path), task_path.parent / "data", tokenizer)
    return run_trial(prepared, model, TrialPlan(32, HP, Seeds(1, 2, 3)))


@pytest.mark.parametrize("arch", ARCHITECTURES)
@pytest.mark.parametrize("crf", [False, True], ids=["linear", "crf"])
def test_tagging_head_trains(arch: str, crf: bool, tiny_models, tiny_ner: Path) -> None:
    if crf:
        tiny_ner.write_text(tiny_ner.read_text().replace("crf: false", "crf: true"))
    record = _train(tiny_ner, str(tiny_models[arch]))
    assert not (record["reason"] or "").startswith("error"), record["reason"]
    assert len(record["loss_curve"]) == 4 and all(math.isfinite(v) for v in record["loss_curve"])
    assert 0.0 <= record["score"] <= 1.0 and "entity_f1_strict" in record["scores"]


def test_roberta_with_byte_level_bpe_and_deberta_with_unigram(tiny_models, tiny_tokenizers, tiny_ner) -> None:  # noqa: ANN001
    for arch, family in (("roberta", "bpe"), ("deberta-v2", "unigram")):
        record = _train(tiny_ner, str(tiny_models[arch]), tiny_tokenizers[family])
        assert record["reason"] is None or "threshold" in record["reason"], record["reason"]


def _crf_module(tiny_models) -> "TaggingModule":  # noqa: ANN001, F821
    from suite.data.tagging import tag_vocabulary
    from suite.heads.tagging import TaggingModule
    from suite.model.encoders import load_encoder

    tags = tag_vocabulary(["PER", "LOC"])
    return TaggingModule(load_encoder(str(tiny_models["bert"])), HP, tags, lambda w: {}, crf=True)


def test_crf_never_decodes_an_impossible_iob2_transition(tiny_models) -> None:  # noqa: ANN001
    import torch

    from suite.data.tagging import tag_vocabulary

    tags = tag_vocabulary(["PER", "LOC"])  # O, B-PER, I-PER, B-LOC, I-LOC
    crf = _crf_module(tiny_models).crf
    torch.manual_seed(0)
    emissions = torch.randn(200, 12, len(tags)) * 5  # strong random scores favour every tag
    paths = crf.decode(emissions)
    for path in paths:
        names = [tags[t] for t in path]
        assert not names[0].startswith("I-")
        for previous, tag in zip(names[:-1], names[1:], strict=True):
            assert not tag.startswith("I-") or previous in (f"B-{tag[2:]}", tag), (previous, tag)
    assert any(t.startswith("I-") for p in paths for t in (tags[i] for i in p))  # I- still used


def test_crf_loss_is_per_word_and_trains_in_its_own_group(tiny_models) -> None:  # noqa: ANN001
    import torch

    module = _crf_module(tiny_models)
    crf = module.crf
    torch.manual_seed(1)
    emissions, tags = torch.randn(3, 7, 5), torch.zeros(3, 7, dtype=torch.long)
    mask = torch.ones(3, 7, dtype=torch.bool)
    total = -crf(emissions, tags, mask=mask, reduction="sum")
    assert torch.allclose(-crf(emissions, tags, mask=mask, reduction="token_mean"), total / 21)

    from suite.heads.tagging import CRF_LR_MULT
    from suite.model.optim import make_optimizer

    optimizer = make_optimizer(module, 2e-5, 0.01, True, module.lr_multipliers())
    crf_params = {id(p) for p in crf.parameters()}
    for group in optimizer.param_groups:
        in_crf = {id(p) in crf_params for p in group["params"]}
        assert len(in_crf) == 1  # no group mixes CRF and other parameters
        assert group["lr"] == (2e-5 * CRF_LR_MULT if in_crf == {True} else 2e-5)
        if in_crf == {True}:
            assert group["weight_decay"] == 0.0
    assert sum(len(g["params"]) for g in optimizer.param_groups) == len(list(module.parameters()))


@pytest.mark.parametrize("ties", [False, True], ids=["random", "integer-scores"])
def test_crf_decode_is_pytorch_crfs_viterbi(ties: bool) -> None:
    """The decode that runs on a CPU copy (one transfer on a GPU, not one sync per word) returns
    pytorch-crf's own paths: ragged masks, one-word windows, and ties (integer scores) included."""
    import torch
    from torchcrf import CRF

    from suite.data.tagging import tag_vocabulary
    from suite.heads.tagging import ConstrainedCRF

    tags = tag_vocabulary(["PER", "LOC", "ORG"])
    crf = ConstrainedCRF(tags)
    generator = torch.Generator().manual_seed(7)
    with torch.no_grad():
        for p in crf.parameters():
            p.copy_(torch.randint(-2, 3, p.shape, generator=generator) if ties else torch.randn(p.shape))
    for _ in range(40):
        rows, words = (int(torch.randint(1, n, (), generator=generator)) for n in (9, 25))
        lengths = torch.randint(1, words + 1, (rows,), generator=generator)
        mask = torch.arange(words) < lengths.unsqueeze(1)
        emissions = torch.randn(rows, words, len(tags), generator=generator) * 3
        if ties:
            emissions = emissions.round()
        paths = crf.decode(emissions, mask=mask)
        assert paths == CRF.decode(crf, emissions, mask=mask.to(torch.uint8))
        assert [len(p) for p in paths] == lengths.tolist()
    assert crf.decode(emissions) == CRF.decode(crf, emissions)  # no mask: every word
