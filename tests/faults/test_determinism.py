"""Determinism of a trial (docs/design.md, Seeds): one master seed reproduces a study across
processes, and each of the three seeds moves its own factor and nothing else.

- init_seed: the new head's initial weights (never a pretrained encoder tensor);
- order_seed: the training example order of every epoch and the dropout masks;
- subsample_seed: which training examples a small-data size draws.
"""

from __future__ import annotations

import ctypes.util
import json
import os
import random
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from suite.config.sweep import HParams
from suite.config.task import load_task
from suite.data.module import FeatureDataModule
from suite.data.subsample import subsample_indices
from suite.heads.registry import PreparedTask, prepare_task
from suite.model.encoders import load_encoder, load_tokenizer
from suite.training.trial import run_trial
from suite.training.trial_plan import Seeds, TrialPlan

REPO = Path(__file__).resolve().parents[2]
HP = HParams(lr=1e-3, batch_size=8, epochs=2)
# Fields of a trial record that legitimately differ between two runs of one study: rss and overhead
# are measured, the allocator served the worker's memory (suite/study/memory.py) and decides no number.
VOLATILE = ("time", "date", "worker", "host", "pid", "overhead", "rss", "allocator")


def _volatile(key: str) -> bool:
    return any(word in key for word in VOLATILE)


def _scramble_global_rngs(seed: int) -> None:
    """What an earlier trial in the same process leaves behind: every global RNG moved on."""
    torch.manual_seed(seed)
    torch.rand(1000)
    np.random.seed(seed)
    random.seed(seed)


# --------------------------------------------------------------------------------------------
# fixtures


@pytest.fixture(autouse=True)
def _one_thread() -> Any:
    """Identical seeds give identical numbers for a fixed thread count (docs/design.md, Seeds);
    one thread is also far faster than contended ones for these tiny models."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture
def bert(tiny_models: dict[str, Path]) -> str:
    return str(tiny_models["bert"])


@pytest.fixture
def tiny(bert: str, tiny_task: Path) -> PreparedTask:
    """The learnable sentence-pair fixture task (48 balanced training pairs, equal lengths)."""
    return prepare_task(load_task(tiny_task), tiny_task.parent.parent / "data", load_tokenizer(bert))


@pytest.fixture
def rte(bert: str, shared_data: Path) -> PreparedTask:
    """Real RTE pairs: lengths vary, so group_by_length has something to group."""
    return prepare_task(load_task(REPO / "tasks/rte.yaml"), shared_data, load_tokenizer(bert))


def _train_dev(task: PreparedTask, size: int, subsample_seed: int) -> tuple[list, list]:
    data = task.data
    return (
        data.features("train", data.train_indices(size, subsample_seed)),
        data.features("dev", data.dev_indices()),
    )


# --------------------------------------------------------------------------------------------
# 1. one spec + one master seed -> identical records in two fresh processes


def _run_in_fresh_process(
    task: Path, model: str, out: Path, cache: Path, hash_seed: str, allocator: str = "auto"
) -> list[dict]:
    root = task.parent.parent
    env = {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "TOKENIZERS_PARALLELISM": "false",
        "SUITE_DATA_DIR": os.environ.get("SUITE_DATA_DIR", str(REPO.parent / "shared" / "data")),
        "SUITE_CACHE_DIR": str(cache),  # no feature cache shared between the two runs
        "PYTHONHASHSEED": hash_seed,  # set/dict order of strings must not matter either
        "SUITE_ALLOCATOR": allocator,
    }
    command = [sys.executable, "-m", "suite", "run", str(task), "--model", model, "--out", str(out)]
    command += ["--data-dir", str(root / "data"), "--quiet", "--threads", "1"]
    done = subprocess.run(command, cwd=root, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    [trials] = list(out.glob("*/*/trials.jsonl"))
    return [json.loads(line) for line in trials.read_text().splitlines() if line.strip()]


@pytest.mark.slow
def test_same_spec_and_master_seed_give_identical_records_in_two_processes(
    tiny_task: Path, bert: str, tmp_path: Path
) -> None:
    """The first run allocates with the C library's malloc, the second with jemalloc where installed
    (`run` typed at the command line: suite/study/memory.py): the allocator moves no number."""
    first = _run_in_fresh_process(
        tiny_task, bert, tmp_path / "out-a", tmp_path / "cache-a", "1", allocator="system"
    )
    second = _run_in_fresh_process(tiny_task, bert, tmp_path / "out-b", tmp_path / "cache-b", "2")
    expected = "jemalloc" if ctypes.util.find_library("jemalloc") else "glibc"
    assert {r["allocator"] for r in first} == {"glibc"} and {r["allocator"] for r in second} == {expected}
    # each process tokenized into its own cache, under the same (deterministic) keys
    cached = [sorted(p.name for p in (tmp_path / c).rglob("*.pt")) for c in ("cache-a", "cache-b")]
    assert cached[0] and cached[0] == cached[1]

    # The fixture sweep: 1 setting x 3 seed repeats, 2 epochs of 32 examples in batches of 8.
    assert len(first) == len(second) == 3
    a = {r["key"]: r for r in first}
    b = {r["key"]: r for r in second}
    assert a.keys() == b.keys() and len(a) == 3  # the same planned trials (seeds from the master)
    for key, ra in a.items():
        rb = b[key]
        assert "reason" not in ra or not str(ra["reason"]).startswith("error"), ra["reason"]
        assert ra["threads"] == rb["threads"] == 1
        assert len(ra["epochs"]) == 2 and len(ra["loss_curve"]) == 8, ra
        # the three things a study is judged on, named so a failure says which one moved
        assert ra["score"] == rb["score"], key
        assert ra["epochs"] == rb["epochs"], key
        assert ra["loss_curve"] == rb["loss_curve"], key
        # ... and every other field, bar wall time / worker / dates
        stable_a = {k: v for k, v in ra.items() if not _volatile(k)}
        stable_b = {k: v for k, v in rb.items() if not _volatile(k)}
        assert stable_a == stable_b, key

    # not vacuous: the three seed repeats really are different runs
    curves = [tuple(r["loss_curve"]) for r in first]
    assert len(set(curves)) == 3
    assert len({json.dumps(r["seeds"], sort_keys=True) for r in first}) == 3


# --------------------------------------------------------------------------------------------
# 2a. order_seed -> the sequence of training examples, per epoch


def _epoch_sequences(
    train: list[dict], dev: list[dict], order_seed: int, group_by_length: bool, epochs: int = 2
) -> list[list[int]]:
    """The example indices train_dataloader() yields, epoch after epoch (one loader re-iterated,
    as Lightning does with a loader built once per fit)."""
    tagged = [{**f, "_idx": i} for i, f in enumerate(train)]
    module = FeatureDataModule(
        tagged,
        dev,
        batch_size=8,
        order_seed=order_seed,
        collate=lambda batch: [f["_idx"] for f in batch],
        group_by_length=group_by_length,
    )
    loader = module.train_dataloader()
    return [[i for batch in loader for i in batch] for _ in range(epochs)]


@pytest.mark.parametrize("group_by_length", [False, True])
def test_training_order_is_a_pure_function_of_the_order_seed(
    rte: PreparedTask, group_by_length: bool
) -> None:
    train, dev = _train_dev(rte, 44, subsample_seed=5)  # 44: the last batch is short
    assert len({len(f["input_ids"]) for f in train}) > 10  # real lengths vary

    _scramble_global_rngs(1)
    base = _epoch_sequences(train, dev, order_seed=7, group_by_length=group_by_length)
    _scramble_global_rngs(2)  # another trial ran in between: the global RNGs moved on
    again = _epoch_sequences(train, dev, order_seed=7, group_by_length=group_by_length)
    assert again == base  # same seed -> the identical sequence, epoch by epoch

    for epoch in base:  # every epoch shows every example exactly once
        assert sorted(epoch) == list(range(len(train)))
    assert base[0] != base[1]  # each epoch is reshuffled

    others = [_epoch_sequences(train, dev, s, group_by_length) for s in (8, 9, 1234567891)]
    for other in others:
        assert other != base and other[0] != base[0]  # another seed -> another order
        assert [sorted(e) for e in other] == [sorted(e) for e in base]  # ... of the same examples
    assert len({tuple(o[0]) for o in others}) == 3


def test_group_by_length_really_groups(rte: PreparedTask) -> None:
    """Guards the parametrisation above: True takes the length-grouped path."""
    train, dev = _train_dev(rte, 64, subsample_seed=5)
    lengths = [len(f["input_ids"]) for f in train]

    def padded(group: bool) -> int:
        order = _epoch_sequences(train, dev, 3, group, epochs=1)[0]
        batches = [order[i : i + 8] for i in range(0, len(order), 8)]
        return sum(max(lengths[i] for i in b) * len(b) for b in batches)

    assert padded(True) < padded(False)


def _identity(feature: dict) -> tuple:
    return tuple(feature["input_ids"]), feature["labels"]


def _recording_datamodule(log: list[tuple]) -> type[FeatureDataModule]:
    """FeatureDataModule that notes each training example (its token ids and label) a trial's
    collate sees, in order."""

    class Recording(FeatureDataModule):
        def __init__(self, train: list[dict], dev: list[dict], *args: Any, **kwargs: Any) -> None:
            super().__init__([{**f, "_train": True} for f in train], dev, *args, **kwargs)
            inner = self.collate

            def collate(batch: list[dict]) -> dict[str, torch.Tensor]:
                if "_train" in batch[0]:
                    log.extend(_identity(f) for f in batch)
                    batch = [{k: v for k, v in f.items() if k != "_train"} for f in batch]
                return inner(batch)

            self.collate = collate

    return Recording


@pytest.mark.parametrize("group_by_length", [False, True])
def test_a_trial_trains_on_the_order_seeds_sequence(
    rte: PreparedTask, bert: str, monkeypatch: pytest.MonkeyPatch, group_by_length: bool
) -> None:
    """End to end through run_trial: the examples Lightning feeds, epoch by epoch, are exactly
    train_dataloader()'s sequence for the order seed; the init seed does not move them."""
    import suite.training.trial

    hp = HParams(lr=1e-3, batch_size=8, epochs=2, group_by_length=group_by_length)
    size = 20

    def trained_order(seeds: Seeds) -> list[list[tuple]]:
        log: list[tuple] = []
        monkeypatch.setattr(suite.training.trial, "FeatureDataModule", _recording_datamodule(log))
        record = run_trial(rte, bert, TrialPlan(size, hp, seeds))
        assert not str(record.get("reason") or "").startswith("error"), record["reason"]
        assert len(record["loss_curve"]) == 2 * 3 and len(log) == 2 * size
        return [log[:size], log[size:]]

    trained = trained_order(Seeds(init=1, order=21, subsample=3))
    train, dev = _train_dev(rte, size, subsample_seed=3)
    expected = [
        [_identity(train[i]) for i in epoch] for epoch in _epoch_sequences(train, dev, 21, group_by_length)
    ]
    assert trained == expected
    assert trained_order(Seeds(init=2, order=21, subsample=3)) == trained  # init seed: no effect
    other_order = trained_order(Seeds(init=1, order=22, subsample=3))
    assert other_order != trained and sorted(other_order[0]) == sorted(trained[0])  # same examples
    other_subsample = trained_order(Seeds(init=1, order=21, subsample=4))
    assert sorted(other_subsample[0]) != sorted(trained[0])  # the subsample seed draws others


# --------------------------------------------------------------------------------------------
# 2b. init_seed -> the head's initial weights, and nothing pretrained


def _build(task: PreparedTask, model: str, init: int, order: int) -> Any:
    """The module as suite/training/trial.py `_fit` builds it, after some other trial has run."""
    _scramble_global_rngs(order * 7919 + init)
    torch.manual_seed(init)  # the head's initial weights
    module = task.build_module(load_encoder(model), HP)
    torch.manual_seed(order)  # dropout masks
    return module


def _split_state(module: Any) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
    state = {k: v.detach().clone() for k, v in module.state_dict().items()}
    head = {k: v for k, v in state.items() if not k.startswith("encoder.")}
    encoder = {k.removeprefix("encoder."): v for k, v in state.items() if k.startswith("encoder.")}
    return head, encoder


def _identical(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_head_init_depends_on_the_init_seed_only(tiny: PreparedTask, bert: str) -> None:
    from transformers import AutoModel

    pretrained = AutoModel.from_pretrained(bert).state_dict()
    base_head, base_encoder = _split_state(_build(tiny, bert, init=11, order=1))
    assert base_head and _identical(base_encoder, pretrained)  # nothing pretrained re-drawn

    same_init_head, same_init_encoder = _split_state(_build(tiny, bert, init=11, order=2))
    assert _identical(same_init_head, base_head)  # the order seed leaves the head alone
    assert _identical(same_init_encoder, base_encoder)

    for other_init in (12, 1234567891):
        head, encoder = _split_state(_build(tiny, bert, init=other_init, order=1))
        assert head.keys() == base_head.keys()
        assert any(not torch.equal(head[k], base_head[k]) for k in head), other_init  # head moved
        assert _identical(encoder, pretrained), other_init  # ... every encoder tensor did not


def test_run_trial_initialises_the_head_from_the_init_seed_only(
    tiny: PreparedTask, bert: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same, through run_trial itself: snapshot what `_fit` builds before it trains."""
    built: list[tuple[dict, dict]] = []
    build = tiny.builder

    def snapshot(task: PreparedTask, encoder: Any, hparams: HParams) -> Any:
        module = build(task, encoder, hparams)
        built.append(_split_state(module))
        return module

    monkeypatch.setattr(tiny, "builder", snapshot)
    hp = HParams(lr=1e-3, batch_size=8, epochs=1)
    for seeds in (Seeds(11, 1, 3), Seeds(11, 2, 4), Seeds(12, 1, 3)):
        run_trial(tiny, bert, TrialPlan(16, hp, seeds))
    (head_a, enc_a), (head_b, enc_b), (head_c, enc_c) = built
    assert _identical(head_a, head_b) and _identical(enc_a, enc_b)  # other order + subsample seeds
    assert not _identical(head_a, head_c) and _identical(enc_a, enc_c)  # other init seed


# --------------------------------------------------------------------------------------------
# 2c. order_seed -> the dropout stream (and the first batch), never the weights


def _first_step_loss(task: PreparedTask, model: str, init: int, order: int) -> float:
    module = _build(task, model, init, order)
    train, dev = _train_dev(task, 32, subsample_seed=3)
    loader = FeatureDataModule(train, dev, 8, order, task.collate).train_dataloader()
    module.train()
    return module.loss(next(iter(loader))).item()


def _fixed_batch(task: PreparedTask) -> dict[str, torch.Tensor]:
    train, _ = _train_dev(task, 32, subsample_seed=3)
    return task.collate(train[:8])


def test_order_seed_moves_the_first_step_loss_through_dropout_and_order_only(
    tiny: PreparedTask, bert: str
) -> None:
    base = _first_step_loss(tiny, bert, init=1, order=2)
    assert _first_step_loss(tiny, bert, init=1, order=2) == base  # same seeds: same loss, bit for bit
    assert _first_step_loss(tiny, bert, init=1, order=3) != base  # only the order seed changed

    batch = _fixed_batch(tiny)
    a, b = _build(tiny, bert, init=1, order=2), _build(tiny, bert, init=1, order=3)
    with torch.no_grad():
        # eval mode (no dropout): the initial models are the same function
        a.eval()
        b.eval()
        assert torch.equal(a(batch), b(batch))
        # train mode on the very same batch: only the dropout masks differ, and they do
        a.train()
        b.train()
        torch.manual_seed(2)
        loss_a = a.loss(batch).item()
        torch.manual_seed(3)
        loss_b = b.loss(batch).item()
        torch.manual_seed(2)
        assert a.loss(batch).item() == loss_a  # same order seed: the same masks
        assert loss_a != loss_b

        # the check can fail: another init seed does change the eval-mode function
        c = _build(tiny, bert, init=4, order=2).eval()
        assert not torch.equal(a.eval()(batch), c(batch))


def test_run_trial_dropout_masks_follow_the_order_seed_only(
    tiny: PreparedTask, bert: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The dropout masks of a trial's first training step, caught by hooks on every nn.Dropout
    of the module `_fit` builds: equal whatever the init seed, different for another order seed."""
    build = tiny.builder
    masks: list[list[torch.Tensor]] = []

    def with_hooks(task: PreparedTask, encoder: Any, hparams: HParams) -> Any:
        module = build(task, encoder, hparams)
        first_step: list[torch.Tensor] = []
        masks.append(first_step)
        dropouts = [m for m in module.modules() if isinstance(m, torch.nn.Dropout) and m.p > 0]
        assert len(dropouts) >= 3  # embeddings, every layer, the head

        def hook(layer: torch.nn.Module, inputs: tuple, output: torch.Tensor) -> None:
            if layer.training and len(first_step) < len(dropouts):
                first_step.append(((output == 0) & (inputs[0] != 0)).clone())

        for layer in dropouts:
            layer.register_forward_hook(hook)
        return module

    monkeypatch.setattr(tiny, "builder", with_hooks)
    hp = HParams(lr=1e-3, batch_size=8, epochs=1)
    for seeds in (Seeds(1, 2, 3), Seeds(9, 2, 3), Seeds(1, 5, 3)):
        run_trial(tiny, bert, TrialPlan(16, hp, seeds))
    base, other_init, other_order = masks
    assert base and all(m.any() for m in base)  # dropout really dropped something

    def same(a: list[torch.Tensor], b: list[torch.Tensor]) -> bool:
        return len(a) == len(b) and all(torch.equal(x, y) for x, y in zip(a, b, strict=True))

    assert same(base, other_init)  # the init seed does not touch the dropout stream
    assert not same(base, other_order)


def test_run_trial_first_step_loss_follows_the_seeds(tiny: PreparedTask, bert: str) -> None:
    hp = HParams(lr=1e-3, batch_size=8, epochs=1)

    def curve(seeds: Seeds) -> list[float]:
        record = run_trial(tiny, bert, TrialPlan(16, hp, seeds))
        assert len(record["loss_curve"]) == 2, record.get("reason")
        return record["loss_curve"]

    base = curve(Seeds(init=1, order=2, subsample=3))
    assert curve(Seeds(init=1, order=2, subsample=3)) == base  # the whole curve, in one process
    assert curve(Seeds(init=1, order=5, subsample=3))[0] != base[0]  # only the order seed changed


# --------------------------------------------------------------------------------------------
# 2d. subsample_seed -> which examples a small-data size draws


def test_subsample_is_a_function_of_the_subsample_seed_only(tiny: PreparedTask, rte: PreparedTask) -> None:
    for task, size in ((tiny, 32), (rte, 100)):
        data = task.data
        labels = data.labels["train"]
        _scramble_global_rngs(1)
        base = data.train_indices(size, 465539299)
        _scramble_global_rngs(2)
        assert np.array_equal(data.train_indices(size, 465539299), base)
        assert len(base) == size and len(set(base.tolist())) == size
        assert np.all(np.diff(base) > 0) and base[-1] < len(labels)
        draws = [tuple(data.train_indices(size, s).tolist()) for s in (1, 2, 3, 2**31 - 1)]
        assert len(set(draws)) == 4 and tuple(base.tolist()) not in draws
        # stratified: every draw keeps the class counts of the full set (to rounding)
        expected = np.bincount(labels) * size / len(labels)
        for draw in draws:
            assert np.all(np.abs(np.bincount(labels[list(draw)]) - expected) <= 1)
    # the tiny task's 48 pairs are half "yes": a 32 draw is exactly 16 + 16
    assert np.bincount(tiny.data.labels["train"][tiny.data.train_indices(32, 9)]).tolist() == [16, 16]
    # the subsample's features are what a trial trains on, whatever else happened meanwhile
    idx = tiny.data.train_indices(32, 9)
    assert tiny.data.features("train", idx) == tiny.data.features("train", tiny.data.train_indices(32, 9))


def test_unstratifiable_subsample_is_still_seeded() -> None:
    """A class with one member cannot be stratified: the plain draw must use the seed too."""
    strata = np.array([0] * 60 + [1] * 39 + [2])
    _scramble_global_rngs(1)
    a = subsample_indices(100, 30, seed=17, strata=strata)
    _scramble_global_rngs(2)
    assert np.array_equal(subsample_indices(100, 30, seed=17, strata=strata), a)
    assert not np.array_equal(subsample_indices(100, 30, seed=18, strata=strata), a)
    assert len(set(a.tolist())) == 30


def test_out_of_range_subsample_seed_is_refused_not_silently_unstratified() -> None:
    """scikit-learn refuses a seed >= 2**32 with a ValueError; it must not be taken for an
    unstratifiable class (which quietly drew 92 + 8 instead of 90 + 10 here)."""
    labels = np.array([0] * 900 + [1] * 100)
    top = subsample_indices(1000, 100, seed=2**32 - 1, strata=labels)
    assert np.bincount(labels[top]).tolist() == [90, 10]
    for seed in (2**32, 2**40, -1):
        with pytest.raises(ValueError, match="subsample seed"):
            subsample_indices(1000, 100, seed=seed, strata=labels)


@pytest.mark.parametrize("group_by_length", [False, True])
def test_loaders_never_draw_from_the_dropout_stream(rte: PreparedTask, group_by_length: bool) -> None:
    """torch's global RNG is the dropout stream: iterating a train or dev loader must not move
    it, or dropout would depend on how often dev is evaluated."""
    train, dev = _train_dev(rte, 64, 3)
    module = FeatureDataModule(train, dev, 8, 5, rte.collate, group_by_length=group_by_length)
    torch.manual_seed(11)
    before = torch.get_rng_state()
    for loader in (module.train_dataloader(), module.val_dataloader()):
        for _ in loader:
            pass
    assert torch.equal(before, torch.get_rng_state())
