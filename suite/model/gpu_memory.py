"""What one worker takes of a GPU's memory, to size `--workers auto` on a card before any trial
has recorded its own peak (`peak_gpu_mb`): one training step of the encoder at the sweep's
largest batch and the task's longest length, under the study's precision, with AdamW's state.

The head is left out (a linear layer or a CRF: kilobytes beside the encoder's activations), and
so is what torch does not allocate itself, the CUDA context: `CONTEXT_MB`, as measured on recent
cards, is added. Frozen recipes (LoRA, a frozen encoder) need less than this: the probe errs on
the side of fewer workers."""

from __future__ import annotations

import contextlib

import torch

from suite.model.encoders import load_encoder
from suite.model.optim import AUTOCAST_DTYPES, make_optimizer

CONTEXT_MB = 600  # the CUDA context and kernels a process holds outside torch's allocator


def probe_peak_mb(model: str, batch_size: int, length: int, precision: str) -> float:
    """Peak GPU memory (MB) of a training step of `model` on a [batch_size, length] batch on the
    current CUDA device; what it allocated is freed again."""
    device = torch.device("cuda")
    encoder = load_encoder(model).to(device).train()
    optimizer = make_optimizer(encoder, 1e-5, 0.0, True, precision=precision)
    torch.cuda.reset_peak_memory_stats(device)
    vocab = int(getattr(encoder.config, "vocab_size", 1000))
    ids = torch.randint(5, max(6, vocab), (batch_size, length), device=device)
    cast = AUTOCAST_DTYPES.get(precision)
    with torch.autocast("cuda", dtype=cast) if cast else contextlib.nullcontext():
        hidden = encoder(input_ids=ids, attention_mask=torch.ones_like(ids)).last_hidden_state
    hidden.float().square().mean().backward()
    optimizer.step()  # AdamW's two moments: allocated at the first step
    torch.cuda.synchronize(device)
    peak = torch.cuda.max_memory_reserved(device) / 2**20
    del encoder, optimizer, ids, hidden
    torch.cuda.empty_cache()
    return peak + CONTEXT_MB
