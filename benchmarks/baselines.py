"""The ways of running a small hyperparameter sweep that benchmarks/sweep.py measures the suite
against, each run in its own process so its memory and threads are its own:

    python -m benchmarks.baselines {hf-pad128,hf-dynamic,lean} --out RESULT.json \
        [--task tasks/rte.yaml] [--size 500] [--epochs 2] [--lr 2e-5 5e-5] [--batch-size 16 32] \
        [--device auto|cpu|cuda]

- `hf-pad128`: Hugging Face `Trainer.hyperparameter_search` (Optuna, grid), every example padded
  to max_length as run_glue does;
- `hf-dynamic`: the same with dynamic padding and `train_sampling_strategy="group_by_length"`;
- `lean`: the fastest plain loop we could write: weights copied from memory, whole-set length
  buckets, dynamic padding, fused AdamW, length-sorted inference-mode evaluation.

All three train on the suite's own tokenized features of the same seeded subsample, with the same
recipe (AdamW, weight decay 0.01 on matrices, 10% linear warmup then decay, clipping at 1.0),
on `--device` in the suite's default precision there (fp32 on the CPU, bf16 autocast on a GPU:
benchmarks/device.py), and evaluate on the full dev set after each epoch. The JSON holds one
entry per trial.
"""

from __future__ import annotations

import argparse
import copy
import json
import resource
import tempfile
import time
from itertools import product
from typing import Any

import torch

from benchmarks.device import DEVICES, autocast, precision, resolve_device, to_device

KEYS = ("input_ids", "attention_mask", "token_type_ids", "labels")


def peak_rss_mb() -> float:
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)


def load_features(task_path: str, size: int, subsample_seed: int = 0) -> tuple[Any, list, list]:
    """The suite's tokenizer and features of the subsample and the dev set (model inputs only)."""
    from suite.config.task import load_task
    from suite.data.paths import data_dir
    from suite.heads.registry import prepare_task
    from suite.model.encoders import load_tokenizer

    spec = load_task(task_path)
    task = prepare_task(spec, data_dir(), load_tokenizer(spec.model))
    data = task.data
    keep = [k for k in KEYS if k in data.features("dev", data.dev_indices()[:1])[0]]
    train = [
        {k: f[k] for k in keep} for f in data.features("train", data.train_indices(size, subsample_seed))
    ]
    dev = [{k: f[k] for k in keep} for f in data.features("dev", data.dev_indices())]
    return task.tokenizer, train, dev


def model_folder(task_path: str) -> str:
    from suite.config.task import load_task
    from suite.model.names import resolve

    return resolve(load_task(task_path).model)


def hf_search(args: argparse.Namespace, dynamic: bool) -> list[dict[str, Any]]:
    import optuna
    from transformers import (
        AutoModelForSequenceClassification,
        DataCollatorWithPadding,
        Trainer,
        TrainerCallback,
        TrainingArguments,
    )

    tokenizer, train, dev = load_features(args.task, args.size)
    folder = model_folder(args.task)
    trials: list[dict[str, Any]] = []

    class Clock(TrainerCallback):
        def on_train_begin(self, targs, state, control, **kwargs):  # noqa: ANN001, ANN201
            # The setting as Trainer applied it (model_init may run before hp_space fills params).
            trials[-1].update(learning_rate=targs.learning_rate, batch_size=targs.per_device_train_batch_size)

        def on_step_begin(self, targs, state, control, **kwargs):  # noqa: ANN001, ANN201
            trials[-1].setdefault("first_step", time.perf_counter())
            trials[-1].setdefault("first_step_at", time.time())

        def on_evaluate(self, targs, state, control, metrics=None, **kwargs):  # noqa: ANN001, ANN201
            trials[-1]["scores"].append(metrics["eval_accuracy"])

        def on_train_end(self, targs, state, control, **kwargs):  # noqa: ANN001, ANN201
            trials[-1]["train_end"] = time.perf_counter()

    def model_init(trial: Any = None) -> Any:
        if trial is not None:  # Trainer also calls it once at construction, outside any trial
            trials.append({"start": time.perf_counter(), "scores": []})
        return AutoModelForSequenceClassification.from_pretrained(folder, num_labels=2)

    def accuracy(prediction: Any) -> dict[str, float]:
        return {"accuracy": float((prediction.predictions.argmax(-1) == prediction.label_ids).mean())}

    padding = {"padding": "longest"} if dynamic else {"padding": "max_length", "max_length": 128}
    with tempfile.TemporaryDirectory() as out:
        targs = TrainingArguments(
            output_dir=out,
            num_train_epochs=args.epochs,
            eval_strategy="epoch",
            save_strategy="no",
            logging_strategy="no",
            report_to="none",
            disable_tqdm=True,
            use_cpu=args.device == "cpu",
            bf16=precision(args.device) == "bf16-mixed",
            warmup_steps=0.1,
            weight_decay=0.01,
            per_device_eval_batch_size=64,
            train_sampling_strategy="group_by_length" if dynamic else "random",
            seed=0,
        )
        trainer = Trainer(
            model_init=model_init,
            args=targs,
            train_dataset=train,
            eval_dataset=dev,
            data_collator=DataCollatorWithPadding(tokenizer, **padding),
            compute_metrics=accuracy,
            callbacks=[Clock()],
        )
        grid = {"learning_rate": args.lr, "per_device_train_batch_size": args.batch_size}
        trainer.hyperparameter_search(
            hp_space=lambda t: {k: t.suggest_categorical(k, v) for k, v in grid.items()},
            backend="optuna",
            n_trials=len(args.lr) * len(args.batch_size),
            direction="maximize",
            compute_objective=lambda metrics: metrics["eval_accuracy"],
            sampler=optuna.samplers.GridSampler(grid, seed=0),
        )
    ends = [t["start"] for t in trials[1:]] + [time.perf_counter()]
    ended_at = time.time()  # the last trial's end (the search's), as the clock other processes read
    lengths = [len(f["input_ids"]) for f in train]
    results = []
    for trial, end in zip(trials, ends, strict=True):
        batch = trial["batch_size"]
        padded = hf_grouped_padding(lengths, batch) if dynamic else len(lengths) * 128
        results.append(
            {
                "lr": trial["learning_rate"],
                "batch_size": batch,
                "seconds": end - trial["start"],
                "to_first_step": trial["first_step"] - trial["start"],
                "first_step_at": trial["first_step_at"],
                "ended_at": ended_at,
                "after_training": end - trial["train_end"],
                "scores": trial["scores"],
                "train_real": sum(lengths) * args.epochs,
                "train_padded": padded * args.epochs,
                "peak_rss_mb": peak_rss_mb(),
            }
        )
    return results


def hf_grouped_padding(lengths: list[int], batch: int, seed: int = 0) -> int:
    """Tokens one epoch of Hugging Face's LengthGroupedSampler feeds, padding included."""
    from transformers.trainer_pt_utils import LengthGroupedSampler

    order = list(LengthGroupedSampler(batch, lengths=lengths, generator=torch.Generator().manual_seed(seed)))
    return sum(
        max(lengths[i] for i in order[s : s + batch]) * len(order[s : s + batch])
        for s in range(0, len(order), batch)
    )


def tensors(features: list[dict[str, Any]]) -> list[dict[str, torch.Tensor]]:
    """Features (lists of ids, scalar labels) as tensors, for `pad`."""
    return [{k: torch.tensor(v) for k, v in f.items()} for f in features]


def pretrained_classifier(task_path: str) -> Any:
    """The task's checkpoint with a two-way classification head drawn under seed 0: every loop
    written here by hand starts from the same weights."""
    from transformers import AutoModelForSequenceClassification

    torch.manual_seed(0)
    return AutoModelForSequenceClassification.from_pretrained(model_folder(task_path), num_labels=2)


def lean_loop(args: argparse.Namespace) -> list[dict[str, Any]]:
    from transformers import get_linear_schedule_with_warmup

    from suite.data.buckets import BucketBatchSampler
    from suite.model.optim import parameter_groups

    _, train, dev = load_features(args.task, args.size)
    as_tensors = tensors(train)
    dev_sorted = sorted(tensors(dev), key=lambda f: len(f["input_ids"]))
    lengths = [len(f["input_ids"]) for f in train]
    pretrained = pretrained_classifier(args.task)
    pretrained.to(args.device)
    results = []
    for seed, (lr, batch) in enumerate(product(args.lr, args.batch_size)):
        start = time.perf_counter()
        net = copy.deepcopy(pretrained).train()
        optimizer = torch.optim.AdamW(parameter_groups(net, lr, 0.01), lr=lr, fused=True)
        sampler = BucketBatchSampler(lengths, batch, torch.Generator().manual_seed(seed))
        total = len(sampler) * args.epochs
        schedule = get_linear_schedule_with_warmup(optimizer, round(0.1 * total), total)
        scores, first_step, padded, eval_s = [], None, 0, []
        for _ in range(args.epochs):
            for indices in sampler:
                inputs = to_device(pad([as_tensors[i] for i in indices]), args.device)
                padded += inputs["input_ids"].numel()
                if first_step is None:
                    first_step, first_step_at = time.perf_counter(), time.time()
                with autocast(args.device):
                    loss = net(**inputs).loss
                loss.backward()
                torch.nn.utils.clip_grad_norm_(net.parameters(), 1.0)
                optimizer.step(), schedule.step(), optimizer.zero_grad(set_to_none=True)
            eval_start = time.perf_counter()
            scores.append(evaluate(net, dev_sorted, args.device))
            eval_s.append(round(time.perf_counter() - eval_start, 3))
        train_end = time.perf_counter()
        del net, optimizer
        end = time.perf_counter()
        results.append(
            {
                "lr": lr,
                "batch_size": batch,
                "seconds": end - start,
                "to_first_step": first_step - start,
                "first_step_at": first_step_at,
                "ended_at": time.time(),
                "after_training": end - train_end,
                "scores": scores,
                "eval_s": eval_s,  # each epoch's evaluation, inside "seconds"
                "train_real": sum(lengths) * args.epochs,
                "train_padded": padded,
                "peak_rss_mb": peak_rss_mb(),
            }
        )
    return results


def pad(features: list[dict[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
    """Dynamic padding of pre-made tensors (labels are scalars)."""
    out = {}
    for key in features[0]:
        values = [f[key] for f in features]
        out[key] = (
            torch.stack(values)
            if values[0].dim() == 0
            else torch.nn.utils.rnn.pad_sequence(values, batch_first=True)
        )
    return out


@torch.inference_mode()
def evaluate(net: Any, dev_sorted: list[dict[str, torch.Tensor]], device: str, batch: int = 128) -> float:
    net.eval()
    right = 0
    for s in range(0, len(dev_sorted), batch):
        inputs = to_device(pad(dev_sorted[s : s + batch]), device)
        labels = inputs.pop("labels")
        with autocast(device):
            logits = net(**inputs).logits
        right += int((logits.argmax(-1) == labels).sum())
    net.train()
    return right / len(dev_sorted)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("way", choices=["hf-pad128", "hf-dynamic", "lean"])
    parser.add_argument("--out", required=True)
    parser.add_argument("--task", default="tasks/rte.yaml")
    parser.add_argument("--size", type=int, default=500)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--lr", type=float, nargs="+", default=[2e-5, 5e-5])
    parser.add_argument("--batch-size", type=int, nargs="+", default=[16, 32])
    parser.add_argument(
        "--device", choices=DEVICES, default="auto", help="auto: where the suite's trials run"
    )
    args = parser.parse_args()
    args.device = resolve_device(args.device)
    start = time.perf_counter()
    trials = lean_loop(args) if args.way == "lean" else hf_search(args, dynamic=args.way == "hf-dynamic")
    with open(args.out, "w") as f:
        json.dump({"trials": trials, "in_process_s": time.perf_counter() - start}, f)


if __name__ == "__main__":
    main()
