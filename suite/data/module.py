"""LightningDataModule over tokenized features: seeded order, dynamic padding."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import lightning as L
import torch
from torch.utils.data import DataLoader

from suite.data.buckets import BucketBatchSampler


class FeatureDataModule(L.LightningDataModule):
    """Train batches ordered by `order_seed` alone; dev batches sorted by length (`dev`: what each
    epoch evaluates).

    Batches are padded to their own longest example (the collate function), never to
    max_length; `group_by_length` also batches similar lengths together
    (benchmarks/padding.py measures both).
    """

    def __init__(
        self,
        train: list[dict[str, Any]],
        dev: list[dict[str, Any]],
        batch_size: int,
        order_seed: int,
        collate: Callable[[list[dict[str, Any]]], dict[str, torch.Tensor]],
        eval_batch_size: int = 64,
        group_by_length: bool = False,
    ) -> None:
        super().__init__()
        self.group_by_length = group_by_length
        self.train, self.dev = train, dev
        self.batch_size, self.eval_batch_size = batch_size, eval_batch_size
        self.order_seed = order_seed
        self.collate = collate

    def train_dataloader(self) -> DataLoader:
        order = torch.Generator().manual_seed(self.order_seed)
        if self.group_by_length:
            # Batches of near-equal lengths over the whole set, in an order order_seed decides.
            lengths = [len(f["input_ids"]) for f in self.train]
            batches = BucketBatchSampler(lengths, self.batch_size, order)
            return DataLoader(self.train, batch_sampler=batches, generator=order, collate_fn=self.collate)
        return DataLoader(
            self.train, batch_size=self.batch_size, shuffle=True, generator=order, collate_fn=self.collate
        )

    def val_dataloader(self) -> DataLoader:
        """Each epoch's evaluation: over `dev` (the whole set or the curve's sample)."""
        return self.eval_dataloader(self.dev)

    def eval_dataloader(self, features: list[dict[str, Any]]) -> DataLoader:
        """An evaluation over `features`, batched as every evaluation is."""
        # Length-sorted dev batches carry little padding; every feature carries its own
        # label (or example id), so the metric does not depend on this order.
        # A loader without its own generator draws its base seed from torch's global RNG, which
        # is the dropout stream: dropout would then depend on how often dev is evaluated.
        dev = sorted(features, key=lambda f: len(f["input_ids"]))
        fixed = torch.Generator().manual_seed(0)
        return DataLoader(dev, batch_size=self.eval_batch_size, generator=fixed, collate_fn=self.collate)
