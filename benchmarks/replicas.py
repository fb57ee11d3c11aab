"""Replicate-parallel training throughput: R seed replicates of one setting as one batched model
(`torch.func.stack_module_state` + `vmap`, dropout drawn per replicate) against R sequential
forward+backward passes, on the bundled encoder.

    python -m benchmarks.replicas [--batch 16] [--length 64] [--steps 5] [--device cpu|cuda]

Prints, for R = 1, 2, 4, 8, the seconds per replicate-step both ways and the throughput ratio.
Every replicate sees its own batch of the same shape (with whole-set length buckets, replicates
with different order seeds would first have to be padded to a common length per step).

    SUITE_DATA_DIR=../shared/data python -m benchmarks.replicas --train [--size 64] [--dev 64]

Real training instead: R seed replicates of one RTE setting (minilm-l6) as R sequential
`run_trial`s and as one `suite.training.replicas.run_replicates` group (its padding to a common length, its
dev evaluations and optimizer steps included); prints seconds per replicate both ways, whole
trials and the training loops alone, and the ratio.
"""

from __future__ import annotations

import argparse
import copy
import time

import torch
from torch.func import functional_call, grad, stack_module_state, vmap

from suite.model.encoders import load_encoder


def step_seconds(fn: object, steps: int, device: str) -> float:
    fn()  # warm-up
    if device == "cuda":
        torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(steps):
        fn()
    if device == "cuda":
        torch.cuda.synchronize()
    return (time.perf_counter() - start) / steps


def measure(pretrained: torch.nn.Module, replicas: int, args: argparse.Namespace) -> tuple[float, float]:
    """Seconds per step of R replicates: R sequential forward+backward passes, and one vmapped."""
    models = [copy.deepcopy(pretrained).train() for _ in range(replicas)]
    ids = torch.randint(
        1000, pretrained.config.vocab_size, (replicas, args.batch, args.length), device=args.device
    )

    def sequential() -> None:
        for model, x in zip(models, ids, strict=True):
            model(input_ids=x).last_hidden_state.pow(2).mean().backward()

    params, buffers = stack_module_state(models)
    skeleton = copy.deepcopy(models[0]).to("meta")

    # No attention mask: building one branches on its values, which vmap cannot trace.
    def loss(p: dict, b: dict, x: torch.Tensor) -> torch.Tensor:
        out = functional_call(skeleton, (p, b), (), {"input_ids": x})
        return out.last_hidden_state.pow(2).mean()

    batched = vmap(grad(loss), randomness="different")
    return step_seconds(sequential, args.steps, args.device), step_seconds(
        lambda: batched(params, buffers, ids), args.steps, args.device
    )


def train_seconds(record: dict) -> float:
    """A record's training loop with its dev evaluations: its wall time less its overhead."""
    overhead = record.get("overhead_s", {})
    wall = record.get("group_wall_time_s", record["wall_time_s"])
    return wall - overhead.get("to_first_step", 0.0) - overhead.get("after_training", 0.0)


def train_mode(args: argparse.Namespace) -> None:
    from suite.config.sweep import HParams
    from suite.config.task import load_task
    from suite.data.paths import data_dir
    from suite.heads.registry import prepare_task
    from suite.model.encoders import load_tokenizer
    from suite.training.replicas import run_replicates
    from suite.training.trial import run_trial
    from suite.training.trial_plan import Seeds, TrialPlan

    spec = load_task(args.task).model_copy(update={"eval_limit": args.dev, "max_length": args.max_length})
    task = prepare_task(spec, data_dir(), load_tokenizer(args.model))
    hparams = HParams(lr=2e-5, batch_size=args.batch, epochs=args.epochs)
    trainer = {"accelerator": "gpu" if args.device == "cuda" else "cpu"}

    def plans(replicas: int) -> list[TrialPlan]:
        return [
            TrialPlan(args.size, hparams, Seeds(init=r, order=100 + r, subsample=0)) for r in range(replicas)
        ]

    run_trial(task, args.model, plans(1)[0], trainer=trainer)  # warm-up: weights, features, kernels
    run_replicates(task, args.model, plans(1), trainer=trainer)
    print(
        f"{args.model} on {args.device}, {torch.get_num_threads()} thread(s): {spec.name} size {args.size}, "
        f"max_length {args.max_length}, batch {args.batch}, {args.epochs} epoch(s), dev {args.dev}; "
        "seconds per replicate"
    )
    print(
        f"{'R':>3s} {'sequential':>11s} {'parallel':>9s} {'ratio':>6s} "
        f"{'seq loop':>9s} {'par loop':>9s} {'ratio':>6s}"
    )
    for replicas in args.replicas:
        start = time.perf_counter()
        sequential = [run_trial(task, args.model, plan, trainer=trainer) for plan in plans(replicas)]
        one = (time.perf_counter() - start) / replicas
        start = time.perf_counter()
        group = run_replicates(task, args.model, plans(replicas), trainer=trainer)
        many = (time.perf_counter() - start) / replicas
        bad = [r["reason"] for r in sequential + group if r["outcome"] == "errored"]
        if bad:
            raise SystemExit(f"errored: {bad[0]}")
        loop_one = sum(train_seconds(r) for r in sequential) / replicas
        loop_many = train_seconds(group[0]) / replicas
        print(
            f"{replicas:3d} {one:11.2f} {many:9.2f} {one / many:5.2f}x "
            f"{loop_one:9.2f} {loop_many:9.2f} {loop_one / loop_many:5.2f}x"
        )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", default="minilm-l6")
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--length", type=int, default=64)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--train", action="store_true", help="real training: run_trial vs run_replicates")
    parser.add_argument("--task", default="tasks/rte.yaml")
    parser.add_argument("--size", type=int, default=64, help="--train: training examples per replicate")
    parser.add_argument("--dev", type=int, default=64, help="--train: dev examples evaluated per epoch")
    parser.add_argument("--max-length", type=int, default=128, help="--train: tokens per example at most")
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--threads", type=int, help="torch threads (--train: 1 unless given)")
    parser.add_argument("--replicas", type=int, nargs="+", default=[1, 2, 4, 8])
    args = parser.parse_args()
    if args.threads or args.train:
        torch.set_num_threads(args.threads or 1)
    if args.train:
        return train_mode(args)
    pretrained = load_encoder(args.model).to(args.device)
    print(f"{args.model} on {args.device}, batch {args.batch} x {args.length} tokens per replicate")
    print(f"{'R':>3s} {'sequential s/step':>18s} {'vmap s/step':>12s} {'throughput ratio':>17s}")
    for replicas in args.replicas:
        one, many = measure(pretrained, replicas, args)
        print(f"{replicas:3d} {one:18.3f} {many:12.3f} {one / many:16.2f}x")


if __name__ == "__main__":
    main()
