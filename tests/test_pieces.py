"""`split_batches`: a random batch computed as length-sorted pieces has the whole batch's loss and
gradient (each piece weighted by its share of what the loss averages over), with less padding."""

from __future__ import annotations

import itertools
import random
from pathlib import Path

import pytest
import torch

from suite.config.sweep import HParams
from suite.config.task import load_task
from suite.data.pieces import cut_points, split_batch
from suite.heads.registry import PreparedTask, prepare_task
from suite.model.encoders import load_encoder, load_tokenizer

REPO = Path(__file__).resolve().parent.parent


def _cost(lengths: list[int], ends: list[int], piece_cost: int) -> int:
    starts = [0, *ends[:-1]]
    return sum((e - s) * lengths[e - 1] + piece_cost for s, e in zip(starts, ends, strict=True))


def test_cut_points_are_the_cheapest_of_all_partitions() -> None:
    rng = random.Random(0)
    for _ in range(200):
        n = rng.randint(1, 9)
        lengths = sorted(rng.randint(3, 128) for _ in range(n))
        piece_cost = rng.choice([0, 16, 64, 500])
        best = min(
            _cost(lengths, [*cuts, n], piece_cost)
            for k in range(n)
            for cuts in itertools.combinations(range(1, n), k)
        )
        ends = cut_points(lengths, piece_cost)
        assert ends[-1] == n and ends == sorted(set(ends))
        assert _cost(lengths, ends, piece_cost) == best
    assert cut_points([5, 5, 5, 5], 64) == [4]  # equal lengths: one piece, nothing to save
    assert cut_points([10, 10, 120, 120], 0) == [2, 4]


def _prepared(task_path: Path, data: Path, model: str) -> PreparedTask:
    return prepare_task(load_task(task_path), data, load_tokenizer(model))


def _batch(task: PreparedTask, size: int = 32, seed: int = 0) -> dict[str, torch.Tensor]:
    """16 training examples drawn at random, as a random batch is."""
    data = task.data
    features = data.features("train", data.train_indices(size, seed))
    return task.collate(random.Random(1).sample(features, 16))


def _loss_and_grads(module: torch.nn.Module, batch: dict, split: bool) -> tuple[float, list[torch.Tensor]]:
    module.zero_grad()
    module.train_hparams = module.train_hparams.model_copy(update={"split_batches": split})
    loss = module.batch_loss(batch)
    loss.backward()
    grads = [p.grad.clone() for p in module.parameters() if p.grad is not None]
    return loss.item(), grads


def _check_same_loss_and_gradient(task: PreparedTask, model: str, size: int = 32, seed: int = 0) -> None:
    batch = _batch(task, size, seed)  # first: a QA task's evaluation set follows its training split
    torch.manual_seed(0)
    module = task.build_module(load_encoder(model), HParams(lr=1e-3, batch_size=16, epochs=1))
    module.eval()  # no dropout: the pieces draw their masks in another order
    assert len(split_batch(batch)) >= 2  # the batch's lengths vary: it really is split
    whole, whole_grads = _loss_and_grads(module, batch, split=False)
    padded_whole = module.tokens["padded"]
    split, split_grads = _loss_and_grads(module, batch, split=True)
    assert split == pytest.approx(whole, rel=1e-5)
    assert len(split_grads) == len(whole_grads)
    for a, b in zip(split_grads, whole_grads, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-6)
    real = module.tokens["real"] // 2  # counted once per way
    assert real < module.tokens["padded"] - padded_whole < padded_whole


def test_classification_pieces_match_the_whole_batch(shared_data: Path, tiny_models) -> None:  # noqa: ANN001
    task = _prepared(REPO / "tasks/rte.yaml", shared_data, str(tiny_models["bert"]))
    _check_same_loss_and_gradient(task, str(tiny_models["bert"]))


@pytest.mark.parametrize(
    "tagging",
    [
        "{crf: false, label_all_subtokens: false}",
        "{crf: false, label_all_subtokens: true}",
        "{crf: true, label_all_subtokens: false}",
    ],
    ids=["linear", "all-subtokens", "crf"],
)
def test_tagging_pieces_match_the_whole_batch(tagging: str, tiny_ner: Path, tiny_models) -> None:  # noqa: ANN001
    # The CRF averages over words, the linear head over labelled sub-tokens (all of a word's
    # with label_all_subtokens): a wrong denominator shows in one of the three.
    text = tiny_ner.read_text().replace("{crf: false, label_all_subtokens: false}", tagging)
    assert tagging in text
    tiny_ner.write_text(text)
    task = _prepared(tiny_ner, tiny_ner.parent / "data", str(tiny_models["roberta"]))
    _check_same_loss_and_gradient(task, str(tiny_models["roberta"]))


def test_span_pieces_match_the_whole_batch(shared_data: Path, tiny_models) -> None:  # noqa: ANN001
    task = _prepared(REPO / "tasks/squad.yaml", shared_data, str(tiny_models["bert"]))
    _check_same_loss_and_gradient(task, str(tiny_models["bert"]), size=128, seed=42)


def test_pieces_keep_every_row_and_every_real_token(tiny_ner: Path, tiny_models) -> None:  # noqa: ANN001
    task = _prepared(tiny_ner, tiny_ner.parent / "data", str(tiny_models["bert"]))
    batch = _batch(task)
    pieces = split_batch(batch)
    assert sorted(torch.cat([p["sentence"] for p in pieces]).tolist()) == sorted(batch["sentence"].tolist())
    assert sum(int(p["attention_mask"].sum()) for p in pieces) == int(batch["attention_mask"].sum())
    for p in pieces:  # each piece as wide as its longest row, labels still aligned with tokens
        assert p["attention_mask"][:, -1].any() and p["labels"].shape == p["input_ids"].shape
        assert p["word_starts"].max() < p["input_ids"].shape[1] and (p["word_starts"][:, -1] >= -1).any()
    words = sum(int((p["word_starts"] >= -1).sum()) for p in pieces)
    assert words == int((batch["word_starts"] >= -1).sum())


def test_a_left_padded_batch_is_left_whole() -> None:
    mask = torch.tensor([[0, 0, 1, 1], [1, 1, 1, 1]])
    batch = {"input_ids": torch.ones(2, 4, dtype=torch.long), "attention_mask": mask}
    assert split_batch(batch, piece_cost=0) == [batch]
    right = {"input_ids": batch["input_ids"], "attention_mask": mask.flip(-1)}
    assert [p["input_ids"].shape[1] for p in split_batch(right, piece_cost=0)] == [2, 4]
