"""A plain PyTorch fine-tuning loop (no Lightning, no suite head) as the reference the suite's
default classification head must agree with: Hugging Face's AutoModelForSequenceClassification,
the same recipe (AdamW with bias correction, eps 1e-6, decay on matrices only, linear warmup and
decay, clipping at 1.0), the same subsample and the same seeds, on the same device in the same
precision (fp32 on the CPU, bf16 autocast on a GPU: benchmarks/device.py).

    SUITE_DATA_DIR=../shared/data python benchmarks/reference_loop.py [tasks/sst2.yaml] [--size 200] \
        [--device auto|cpu|cuda]

Prints both score distributions over the seeds and a Mann-Whitney test between them.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import torch
from transformers import AutoModelForSequenceClassification, DataCollatorWithPadding

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run as a script: `benchmarks` too
from benchmarks.device import DEVICES, accelerator, autocast, resolve_device, to_device  # noqa: E402
from suite.config.sweep import HParams  # noqa: E402
from suite.heads.registry import PreparedTask  # noqa: E402
from suite.model.names import resolve  # noqa: E402
from suite.model.optim import parameter_groups  # noqa: E402


def reference_score(
    task: PreparedTask, model: str, size: int, hp: HParams, seeds: tuple[int, int, int], device: str = "cpu"
) -> float:
    """Dev accuracy of one plain-loop run with (init, order, subsample) seeds on `device`."""
    init, order, subsample = seeds
    data = task.data
    train = [
        {k: f[k] for k in ("input_ids", "attention_mask", "labels")}
        for f in data.features("train", data.train_indices(size, subsample))
    ]
    dev = [
        {k: f[k] for k in ("input_ids", "attention_mask", "labels")}
        for f in data.features("dev", data.dev_indices())
    ]
    torch.manual_seed(init)
    net = AutoModelForSequenceClassification.from_pretrained(resolve(model), num_labels=data.num_labels)
    net.to(device)
    optimizer = torch.optim.AdamW(parameter_groups(net, hp.lr, hp.weight_decay), lr=hp.lr, eps=1e-6)
    collate = DataCollatorWithPadding(task.tokenizer)
    loader = torch.utils.data.DataLoader(
        train, batch_size=hp.batch_size, shuffle=True, collate_fn=collate,
        generator=torch.Generator().manual_seed(order),
    )  # fmt: skip
    total = len(loader) * hp.epochs
    warmup = round(hp.warmup_ratio * total)
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer,
        lambda s: s / max(1, warmup) if s < warmup else max(0.0, (total - s) / max(1, total - warmup)),
    )
    torch.manual_seed(order)  # dropout
    net.train()
    for _ in range(hp.epochs):
        for batch in loader:
            with autocast(device):
                loss = net(**to_device(batch, device)).loss
            loss.backward()
            torch.nn.utils.clip_grad_norm_(net.parameters(), hp.max_grad_norm)
            optimizer.step(), schedule.step(), optimizer.zero_grad()
    net.eval()
    right = 0
    with torch.no_grad():
        for batch in torch.utils.data.DataLoader(dev, batch_size=64, collate_fn=collate):
            batch = to_device(batch, device)
            with autocast(device):
                logits = net(**batch).logits
            right += int((logits.argmax(-1) == batch["labels"]).sum())
    return right / len(dev)


def main() -> None:
    from scipy import stats

    from suite.config.sweep import SeedSpec, seed_grid
    from suite.config.task import load_task
    from suite.data.paths import data_dir
    from suite.heads.registry import prepare_task
    from suite.model.encoders import load_tokenizer
    from suite.training.trial import run_trial
    from suite.training.trial_plan import Seeds, TrialPlan

    parser = argparse.ArgumentParser()
    parser.add_argument("task", nargs="?", default="tasks/sst2.yaml")
    parser.add_argument("--size", type=int, default=200)
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--device", choices=DEVICES, default="auto", help="both ways' (auto: the trials')")
    args = parser.parse_args()
    device = resolve_device(args.device)
    trainer = {"accelerator": accelerator(device)}
    spec = load_task(args.task)
    task = prepare_task(spec, data_dir(), load_tokenizer(spec.model))
    hp = HParams(lr=1e-4, batch_size=16, epochs=5)
    seeds = list(seed_grid(SeedSpec(repeats=args.seeds)))
    ours = [
        run_trial(task, spec.model, TrialPlan(args.size, hp, Seeds(*s)), trainer=trainer)["score"]
        for s in seeds
    ]
    reference = [reference_score(task, spec.model, args.size, hp, s, device) for s in seeds]
    for name, scores in (("suite (classifier: auto)", ours), ("plain PyTorch loop", reference)):
        print(
            f"{name:26s} median {100 * np.median(scores):.1f}  scores {[round(100 * s, 1) for s in scores]}"
        )
    print(f"Mann-Whitney p = {stats.mannwhitneyu(ours, reference).pvalue:.3f}")


if __name__ == "__main__":
    main()
