"""Seeded length bucketing over the whole training set: batches of near-equal lengths, in an
order that is a pure function of the order seed."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import torch
from torch.utils.data import Sampler


class BucketBatchSampler(Sampler[list[int]]):
    """fairseq's `batch_by_size` recipe: shuffle, stable-sort the whole set by length (so equal
    lengths stay in seeded random order), cut into batches of `batch_size`, shuffle the batches.

    Hugging Face's `LengthGroupedSampler` sorts only inside mega-batches of 50 batches, which
    leaves 12-85% padding on RTE-sized sets; a whole-set sort leaves 2-10% (benchmarks/padding.py).
    Jittering lengths before the sort (AllenNLP's padding_noise) would vary batch membership
    more, but 0.1 jitter doubles to triples the padding, so ties carry the randomness instead.
    The generator lives across epochs: each epoch draws a new tie order and batch order.
    """

    def __init__(self, lengths: Sequence[int], batch_size: int, generator: torch.Generator) -> None:
        self.lengths = torch.as_tensor(lengths)
        self.batch_size, self.generator = batch_size, generator

    def __len__(self) -> int:
        return -(-len(self.lengths) // self.batch_size)

    def __iter__(self) -> Iterator[list[int]]:
        shuffled = torch.randperm(len(self.lengths), generator=self.generator)
        order = shuffled[torch.argsort(self.lengths[shuffled], stable=True)].tolist()
        batches = [order[i : i + self.batch_size] for i in range(0, len(order), self.batch_size)]
        for b in torch.randperm(len(batches), generator=self.generator).tolist():
            yield batches[b]
