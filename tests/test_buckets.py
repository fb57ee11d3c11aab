"""Whole-set length bucketing: every example once per epoch, near-equal lengths per batch, an
order that is a pure function of the seed."""

from __future__ import annotations

import numpy as np
import torch
from transformers.trainer_pt_utils import LengthGroupedSampler

from suite.data.buckets import BucketBatchSampler


def _lengths(n: int = 500, seed: int = 0) -> list[int]:
    return np.random.default_rng(seed).integers(20, 129, n).tolist()


def _epochs(lengths: list[int], batch: int, seed: int, epochs: int = 2) -> list[list[list[int]]]:
    sampler = BucketBatchSampler(lengths, batch, torch.Generator().manual_seed(seed))
    return [list(sampler) for _ in range(epochs)]


def _padding(lengths: list[int], batches: list[list[int]]) -> float:
    real = sum(lengths[i] for b in batches for i in b)
    return sum(max(lengths[i] for i in b) * len(b) for b in batches) / real - 1


def test_each_epoch_is_a_permutation_in_full_batches() -> None:
    lengths = _lengths(203)
    for epoch in _epochs(lengths, 16, seed=1):
        assert sorted(i for b in epoch for i in b) == list(range(203))
        assert sorted(len(b) for b in epoch) == [11] + [16] * 12
    assert len(BucketBatchSampler(lengths, 16, torch.Generator())) == 13


def test_pure_function_of_the_seed_and_new_each_epoch() -> None:
    lengths = _lengths()
    first, second = _epochs(lengths, 16, seed=7)
    assert _epochs(lengths, 16, seed=7) == [first, second]
    assert first != second
    assert _epochs(lengths, 16, seed=8)[0] != first
    # Ties are broken by the seed, so equal-length examples change batches between seeds.
    members = [{frozenset(b) for b in _epochs(lengths, 16, s)[0]} for s in (1, 2)]
    assert members[0] != members[1]


def test_padding_is_what_a_whole_set_sort_leaves_and_below_mega_batches() -> None:
    lengths = _lengths(500)
    for batch in (16, 32):
        ours = _padding(lengths, _epochs(lengths, batch, seed=0, epochs=1)[0])
        optimum = _padding(lengths, [list(c) for c in np.array_split(np.argsort(lengths), -(-500 // batch))])
        hf = list(LengthGroupedSampler(batch, lengths=lengths, generator=torch.Generator().manual_seed(0)))
        theirs = _padding(lengths, [hf[i : i + batch] for i in range(0, len(hf), batch)])
        assert ours <= optimum + 0.01
        assert ours < theirs / 2
