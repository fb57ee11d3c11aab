"""LightningDataModule over tokenized features: seeded order, dynamic padding."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import lightning as L
import torch
from torch.utils.data import DataLoader


class FeatureDataModule(L.LightningDataModule):
    """Train batches shuffled by `order_seed` alone; dev batches in file order.

    Batches are padded to their own longest example (the collate function), never to
    max_length: on GLUE-style data that halves the tokens a padded-to-128 run processes.
    """

    def __init__(
        self,
        train: list[dict[str, Any]],
        dev: list[dict[str, Any]],
        batch_size: int,
        order_seed: int,
        collate: Callable[[list[dict[str, Any]]], dict[str, torch.Tensor]],
        eval_batch_size: int = 64,
    ) -> None:
        super().__init__()
        self.train, self.dev = train, dev
        self.batch_size, self.eval_batch_size = batch_size, eval_batch_size
        self.order_seed = order_seed
        self.collate = collate

    def train_dataloader(self) -> DataLoader:
        order = torch.Generator().manual_seed(self.order_seed)
        return DataLoader(
            self.train,
            batch_size=self.batch_size,
            shuffle=True,
            generator=order,
            collate_fn=self.collate,
        )

    def val_dataloader(self) -> DataLoader:
        # Length-sorted dev batches carry little padding; every feature carries its own
        # label (or example id), so the metric does not depend on this order.
        dev = sorted(self.dev, key=lambda f: len(f["input_ids"]))
        return DataLoader(dev, batch_size=self.eval_batch_size, collate_fn=self.collate)
