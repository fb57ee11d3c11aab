"""One padded training batch computed as length-sorted pieces: the same examples and the same
loss (each piece's mean weighted by its share of the batch's denominator), with less padding.

Whole-set length buckets change which examples share a batch, and that moved scores
(docs/sweeps.md, length buckets); splitting keeps each random batch as it is and only stops
computing its padding. Written here because no library splits a batch for compute while keeping
its loss: gradient accumulation in Lightning and Accelerate splits by count, not by length.
"""

from __future__ import annotations

import torch

# Tensors [batch, tokens] aligned with input_ids: trimmed to a piece's longest example.
TOKEN_ALIGNED = ("input_ids", "attention_mask", "token_type_ids", "labels")
# One more forward and backward call costs about as much as this many padded tokens on 2 CPU
# cores with MiniLM (a few ms of Python and small kernels against ~1.5 ms per token).
PIECE_COST_TOKENS = 64
# Per accelerator; None: batches are computed whole. On a GPU a padded token is nearly free
# (these batches leave it launch-bound), while each extra piece adds a forward and backward
# call's kernel launches: splitting would only slow a step down.
DEVICE_PIECE_COST: dict[str, int | None] = {"cpu": PIECE_COST_TOKENS, "gpu": None}


def piece_cost(accelerator: str) -> int | None:
    """The piece cost `split_batches` uses on this accelerator (`resolve_trainer`'s name), None
    for whole batches; a trial records it (`piece_cost`)."""
    return DEVICE_PIECE_COST[accelerator]


def cut_points(lengths: list[int], piece_cost: int = PIECE_COST_TOKENS) -> list[int]:
    """End indices of the pieces of ascending `lengths` that minimise padded tokens plus
    `piece_cost` per piece (a piece pads to its last, longest, example): exact, by dynamic
    programming over the n(n+1)/2 contiguous pieces (n is a batch size: tens)."""
    n = len(lengths)
    best = [0.0] + [float("inf")] * n  # best[j]: cost of the first j examples
    cut = [0] * (n + 1)
    for j in range(1, n + 1):
        for i in range(j):  # a piece of examples i..j-1
            cost = best[i] + (j - i) * lengths[j - 1] + piece_cost
            if cost < best[j]:
                best[j], cut[j] = cost, i
    ends, j = [], n
    while j > 0:
        ends.append(j)
        j = cut[j]
    return ends[::-1]


def split_batch(
    batch: dict[str, torch.Tensor], piece_cost: int = PIECE_COST_TOKENS
) -> list[dict[str, torch.Tensor]]:
    """The batch's rows sorted by real length and cut into pieces (`cut_points`), each piece's
    token-aligned tensors trimmed to its own longest row (and a tagging batch's word starts to
    its most words). A batch that is not right-padded is left whole: trimming would cut tokens."""
    mask = batch["attention_mask"]
    lengths, width = mask.sum(-1), mask.shape[1]
    if not torch.equal(mask.bool(), torch.arange(width, device=mask.device) < lengths.unsqueeze(-1)):
        return [batch]
    order = torch.argsort(lengths, stable=True)
    sorted_lengths = lengths[order].tolist()
    pieces, start = [], 0
    for end in cut_points(sorted_lengths, piece_cost):
        rows, longest = order[start:end], sorted_lengths[end - 1]
        piece = {}
        for key, value in batch.items():
            value = value[rows]
            if key in TOKEN_ALIGNED and value.dim() == 2 and value.shape[1] == width:
                value = value[:, :longest]
            elif key == "word_starts":  # real starts (>= -1) come first, -2 pads: the CRF loops over words
                value = value[:, : int((value >= -1).sum(-1).max())]
            piece[key] = value
        pieces.append(piece)
        start = end
    return pieces
