"""Replicate-parallel training throughput: R seed replicates of one setting as one batched model
(`torch.func.stack_module_state` + `vmap`, dropout drawn per replicate) against R sequential
forward+backward passes, on the bundled encoder.

    python -m benchmarks.replicas [--batch 16] [--length 64] [--steps 5] [--device cpu|cuda]

Prints, for R = 1, 2, 4, 8, the seconds per replicate-step both ways and the throughput ratio.
Every replicate sees its own batch of the same shape (with whole-set length buckets, replicates
with different order seeds would first have to be padded to a common length per step).
"""

from __future__ import annotations

import argparse
import copy
import time

import torch
from torch.func import functional_call, grad, stack_module_state, vmap

from suite.models import load_encoder


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


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", default="minilm-l6")
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--length", type=int, default=64)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = parser.parse_args()
    pretrained = load_encoder(args.model).to(args.device)
    print(f"{args.model} on {args.device}, batch {args.batch} x {args.length} tokens per replicate")
    print(f"{'R':>3s} {'sequential s/step':>18s} {'vmap s/step':>12s} {'throughput ratio':>17s}")
    for replicas in (1, 2, 4, 8):
        one, many = measure(pretrained, replicas, args)
        print(f"{replicas:3d} {one:18.3f} {many:12.3f} {one / many:16.2f}x")


if __name__ == "__main__":
    main()
