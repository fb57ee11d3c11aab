"""Tokens and training time per epoch: padding to max_length (Hugging Face run_glue's default)
vs dynamic padding vs dynamic padding with length-grouped batches.

    SUITE_DATA_DIR=../shared/data python benchmarks/padding.py [tasks/ner.yaml] [--size 500] [--batches 20]

Prints real and padded token counts for a whole epoch of each strategy, the seconds of
forward+backward+step for the first --batches batches, and each strategy's ratio against the
pad-to-max_length baseline measured in the same run.
"""

from __future__ import annotations

import argparse
import os
import time

import torch

from suite.config.sweep import HParams
from suite.config.task import load_task
from suite.data.module import FeatureDataModule
from suite.data.paths import data_dir
from suite.heads.registry import prepare_task
from suite.model.encoders import load_encoder, load_tokenizer


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("task", nargs="?", default="tasks/ner.yaml")
    parser.add_argument("--size", type=int, default=500)
    parser.add_argument("--batches", type=int, default=0, help="timed batches (0 = the whole epoch)")
    parser.add_argument("--batch-size", type=int, default=16)
    args = parser.parse_args()
    torch.set_num_threads(os.cpu_count() or 1)

    spec = load_task(args.task)
    task = prepare_task(spec, data_dir(), load_tokenizer(spec.model))
    train = task.data.features("train", task.data.train_indices(args.size, 0))

    def fixed_collate(batch):  # noqa: ANN001, ANN202
        """The baseline: every batch padded to max_length, as run_glue does."""
        out = task.collate(batch)
        width = spec.max_length - out["input_ids"].shape[1]
        for k, v in out.items():
            if v.dim() == 2 and k in ("input_ids", "attention_mask", "token_type_ids", "labels"):
                fill = -100 if k == "labels" else (task.tokenizer.pad_token_id if k == "input_ids" else 0)
                out[k] = torch.nn.functional.pad(v, (0, width), value=fill)
        return out

    strategies = {
        "pad to max_length": (fixed_collate, False),
        "dynamic padding": (task.collate, False),
        "dynamic + grouped by length": (task.collate, True),
    }
    results = {}
    for name, (collate, grouped) in strategies.items():
        dm = FeatureDataModule(train, [], args.batch_size, 0, collate, group_by_length=grouped)
        batches = list(dm.train_dataloader())
        real = sum(int(b["attention_mask"].sum()) for b in batches)
        padded = sum(b["attention_mask"].numel() for b in batches)
        torch.manual_seed(0)
        module = task.build_module(
            load_encoder(spec.model), HParams(lr=5e-5, batch_size=args.batch_size, epochs=1)
        )
        optimizer = torch.optim.AdamW(module.parameters(), lr=5e-5, fused=True)
        start = time.perf_counter()
        for batch in batches[: args.batches or None]:
            loss = module.loss(batch)
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
        seconds = time.perf_counter() - start
        results[name] = (real, padded, seconds)

    base_padded, base_seconds = results["pad to max_length"][1:]
    print(
        f"task {spec.name}, {len(train)} examples, batch {args.batch_size}, "
        f"timed batches {args.batches or 'all'}, threads {torch.get_num_threads()}"
    )
    print(
        f"{'strategy':30s} {'real tok':>9s} {'padded tok':>10s} {'useful':>7s} {'seconds':>8s} "
        f"{'tok ratio':>9s} {'speed-up':>8s}"
    )
    for name, (real, padded, seconds) in results.items():
        print(
            f"{name:30s} {real:9d} {padded:10d} {real / padded:7.1%} {seconds:8.2f} "
            f"{padded / base_padded:9.2f} {base_seconds / seconds:8.2f}x"
        )


if __name__ == "__main__":
    main()
