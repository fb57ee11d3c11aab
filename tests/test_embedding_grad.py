"""The input embedding's gradient kept in place (`suite.model.embedding_grad`): every gradient is
bit-identical to torch's own embedding backward, for every architecture, for a batch computed in
several pieces, across steps and with gradients accumulated; frozen and evaluating embeddings are
torch's own."""

from __future__ import annotations

import copy
import random

import pytest
import torch
from transformers import AutoModel

from suite.model.embedding_grad import KeptGradEmbedding, keep_embedding_grad
from tests.conftest import ARCHITECTURES, WORDS, tiny_config

VOCAB = 200


def _pieces(seed: int) -> list[torch.Tensor]:
    """Four right-padded pieces of a split batch (longer and longer), drawn from a few ids so that
    rows repeat within and across pieces: their gradients are sums of many terms."""
    generator = torch.Generator().manual_seed(seed)
    pieces = []
    for rows, width in [(4, 7), (3, 12), (5, 20), (2, 31)]:
        ids = torch.randint(1, 30, (rows, width), generator=generator)
        ids[0, -2:] = 0  # padding (pad_token_id 0): no gradient
        pieces.append(ids)
    return pieces


def _step(encoder: torch.nn.Module, pieces: list[torch.Tensor], seed: int) -> None:
    """One step's backward as `EncoderModule.work_loss` builds it: each piece's loss times its
    share, summed, one backward; dropout drawn from the same seed on both sides."""
    torch.manual_seed(seed)
    loss = 0.0
    for ids in pieces:
        hidden = encoder(input_ids=ids, attention_mask=(ids != 0).long()).last_hidden_state
        loss = loss + hidden.pow(2).mean() * (ids.shape[0] / 14)
    loss.backward()


def _grads(encoder: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {n: p.grad.clone() for n, p in encoder.named_parameters() if p.grad is not None}


def _unequal(expected: dict[str, torch.Tensor], found: dict[str, torch.Tensor]) -> list[str]:
    """The names whose tensors differ in any bit (a name missing from `found` fails loudly)."""
    return [n for n in expected if not torch.equal(expected[n], found[n])]


def _pair(arch: str) -> tuple[torch.nn.Module, torch.nn.Module]:
    torch.manual_seed(0)
    stock = AutoModel.from_config(tiny_config(arch, VOCAB)).train()
    kept = copy.deepcopy(stock)
    keep_embedding_grad(kept)
    return stock, kept


@pytest.mark.parametrize("arch", ARCHITECTURES)
def test_gradients_are_bit_identical_to_torch_s_over_steps(arch: str) -> None:
    stock, kept = _pair(arch)
    assert type(kept.get_input_embeddings()) is KeptGradEmbedding
    assert kept.state_dict().keys() == stock.state_dict().keys()  # the same parameters and names
    for step in range(3):  # zero_grad(set_to_none=True) between steps, as Lightning does
        for encoder in (stock, kept):
            encoder.zero_grad(set_to_none=True)
            _step(encoder, _pieces(step), seed=step)
        expected, found = _grads(stock), _grads(kept)
        assert found.keys() == expected.keys()
        assert _unequal(expected, found) == []
    # One buffer for every step: no vocabulary-sized block per call.
    embedding = kept.get_input_embeddings()
    assert any(embedding.weight.grad is b for b in embedding._buffers_kept)


def test_the_comparison_sees_the_order_of_the_pieces() -> None:
    """The pieces' sums added in another order than autograd's differ in some bit: so equality
    above means the same additions in the same order, not only the same rows."""
    stock, _ = _pair("bert")
    sums = []
    for ids in _pieces(0):
        stock.zero_grad(set_to_none=True)
        _step(stock, [ids], seed=0)
        sums.append(stock.get_input_embeddings().weight.grad.clone())
    forward = ((sums[0] + sums[1]) + sums[2]) + sums[3]
    backward = ((sums[3] + sums[2]) + sums[1]) + sums[0]
    assert not torch.equal(forward, backward)


def test_accumulated_gradients_and_kept_grad_tensors_are_torch_s() -> None:
    """Two backward calls into one `.grad` (gradient accumulation, or `zero_grad(set_to_none=False)`)."""
    stock, kept = _pair("bert")
    for encoder in (stock, kept):
        _step(encoder, _pieces(0), seed=0)
        _step(encoder, _pieces(1), seed=1)
    expected, found = _grads(stock), _grads(kept)
    assert _unequal(expected, found) == []
    for encoder in (stock, kept):
        encoder.zero_grad(set_to_none=False)
        _step(encoder, _pieces(2), seed=2)
    expected, found = _grads(stock), _grads(kept)
    assert _unequal(expected, found) == []


def test_frozen_or_evaluating_embeddings_take_torch_s_own_path() -> None:
    _, kept = _pair("bert")
    embedding = kept.get_input_embeddings()
    ids = _pieces(0)[0]
    with torch.no_grad():
        assert embedding(ids).grad_fn is None
    assert type(embedding(ids).grad_fn).__name__ == "_RowsBackwardBackward"  # the kept path's node
    embedding.weight.requires_grad_(False)
    assert embedding(ids).grad_fn is None
    embedding.weight.requires_grad_(True)
    embedding.max_norm = 1.0  # renormalising lookups change the weights: torch's own
    assert type(embedding(ids).grad_fn).__name__ == "EmbeddingBackward0"


def test_an_encoder_without_a_plain_input_embedding_is_left_alone() -> None:
    class Wrapped(torch.nn.Embedding):
        pass

    _, encoder = _pair("bert")
    encoder.embeddings.word_embeddings = Wrapped(VOCAB, 32)
    keep_embedding_grad(encoder)
    assert type(encoder.get_input_embeddings()) is Wrapped
    keep_embedding_grad(torch.nn.Linear(2, 2))  # no input embeddings at all: nothing to do


def test_one_buffer_unless_gradients_accumulate() -> None:
    _, kept = _pair("bert")
    embedding = kept.get_input_embeddings()
    for step in range(2):
        kept.zero_grad(set_to_none=True)
        _step(kept, _pieces(step), seed=step)
    assert len(embedding._buffers_kept) == 1 and embedding.weight.grad is embedding._buffers_kept[0]
    _step(kept, _pieces(2), seed=2)  # a second pass into the same .grad: a second buffer, kept
    assert len(embedding._buffers_kept) == 2 and embedding.weight.grad is embedding._buffers_kept[0]


def test_a_large_vocabulary_on_two_threads_and_under_autocast() -> None:
    """Rows spread over a vocabulary of several of the stock kernel's 1,000-row chunks, summed on
    2 threads, and a step under CPU bf16 autocast (the embedding computes in fp32 there)."""
    config = tiny_config("bert", 5000)
    torch.manual_seed(0)
    stock = AutoModel.from_config(config).train()
    kept = copy.deepcopy(stock)
    keep_embedding_grad(kept)
    generator = torch.Generator().manual_seed(3)
    pieces = [
        torch.randint(1, 5000, (rows, width), generator=generator)
        for rows, width in [(6, 9), (4, 17), (3, 40)]
    ]
    pieces = [torch.cat([p, p[:, :5]], 1) for p in pieces]  # every id twice or more
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        for autocast in (False, True):
            for encoder in (stock, kept):
                encoder.zero_grad(set_to_none=True)
                with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
                    _step(encoder, pieces, seed=4)
            expected, found = _grads(stock), _grads(kept)
            assert _unequal(expected, found) == [], autocast
    finally:
        torch.set_num_threads(threads)


def test_a_tied_embedding_is_left_to_torch() -> None:
    _, encoder = _pair("bert")
    encoder.embeddings.word_embeddings.__class__ = torch.nn.Embedding
    encoder.tied = torch.nn.Linear(32, VOCAB, bias=False)
    encoder.tied.weight = encoder.embeddings.word_embeddings.weight  # used twice: another order
    keep_embedding_grad(encoder)
    assert type(encoder.get_input_embeddings()) is torch.nn.Embedding


def test_a_cast_module_makes_its_buffers_again() -> None:
    _, kept = _pair("bert")
    _step(kept, _pieces(0), seed=0)
    kept.zero_grad(set_to_none=True)
    kept.double()
    _step(kept, _pieces(1), seed=1)
    assert kept.get_input_embeddings().weight.grad.dtype == torch.float64


def test_a_trial_ends_on_the_same_weights_and_record_with_torch_s_backward(
    tiny_models, tiny_task, monkeypatch
) -> None:  # noqa: ANN001
    """A whole trial (Lightning's loop: clipping, fused AdamW, zero_grad; split batches) on the tiny
    task, with and without the kept gradient: every final weight and the record are equal."""
    import lightning as L

    import suite.heads.base
    from suite.config.sweep import HParams
    from suite.config.task import load_task
    from suite.data.pieces import DEVICE_PIECE_COST
    from suite.heads.registry import prepare_task
    from suite.model.encoders import load_tokenizer
    from suite.training.trial import run_trial
    from suite.training.trial_plan import Seeds, TrialPlan

    class Weights(L.Callback):
        def on_train_end(self, trainer: L.Trainer, module: torch.nn.Module) -> None:
            self.found = {k: v.clone() for k, v in module.state_dict().items()}

    rng = random.Random(0)  # ragged pairs (the tiny task's are all 4 + 4 words): batches in pieces
    pairs = ["\t".join(" ".join(rng.choices(WORDS, k=rng.randint(1, 12))) for _ in "ab") for _ in range(48)]
    rows = [f"{pair}\t{rng.choice(['yes', 'no'])}" for pair in pairs]
    (tiny_task.parent.parent / "data" / "tiny" / "train.tsv").write_text(
        "s1\ts2\tlabel\n" + "\n".join(rows) + "\n"
    )
    model = str(tiny_models["bert"])
    task = prepare_task(load_task(tiny_task), tiny_task.parent.parent / "data", load_tokenizer(model))
    plan = TrialPlan(32, HParams(lr=1e-3, batch_size=16, epochs=2, split_batches=True), Seeds(1, 2, 3))
    monkeypatch.setitem(DEVICE_PIECE_COST, "cpu", 8)  # pieces wherever they save 8 padded tokens
    calls = []
    add_rows = KeptGradEmbedding.add_rows
    monkeypatch.setattr(KeptGradEmbedding, "add_rows", lambda *a: calls.append(1) or add_rows(*a))
    runs = {}
    for kept in (True, False):
        if not kept:
            monkeypatch.setattr(suite.heads.base, "keep_embedding_grad", lambda encoder: None)
        weights = Weights()
        record = run_trial(task, model, plan, callbacks=[weights])
        assert record["outcome"] != "errored", record["reason"]
        runs[kept] = (record, weights.found)
    assert len(calls) > 4  # more calls than the 4 steps: pieces took the kept path
    (record, weights), (stock_record, stock_weights) = runs[True], runs[False]
    assert _unequal(stock_weights, weights) == []
    for field in ("loss_curve", "tokens", "epochs", "per_example", "score"):
        assert record[field] == stock_record[field], field
