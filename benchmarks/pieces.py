"""What a random batch's length-sorted pieces cost against whole-set length buckets, at the
suite's worker layout (one thread per process), in a bare training loop: where `--workers-check`'s
remaining gap to the lean loop comes from.

    SUITE_DATA_DIR=../shared/data python -m benchmarks.pieces [--task tasks/rte.yaml] [--size 500] \
        [--costs 16 32 64 128 256] [--repeats 2] [--ways buckets pieces:64]

One epoch of the same examples (the suite's features, a seeded subsample) per way, the ways
interleaved `--repeats` times in one process: whole-set length buckets (the lean loop's batches),
random batches computed as length-sorted pieces at each piece cost (`suite.data.pieces`; 64 is the
suite's), random batches whole, and random batches as pieces whose linear layers run as one call
over every piece's tokens (`concat`: attention still per piece; BERT-layout encoders only), each
a forward and backward per piece and one fused AdamW step per batch (`--ways`: only those). Prints
per way the median seconds per epoch, computed tokens over real ones, forward/backward calls, and
its speed against the buckets in the same run; then the cost of one more call, timed on the same
tokens as one [16, 64] batch, 4 pieces and 16 pieces, padded and not.
"""

from __future__ import annotations

import argparse
import copy
import statistics
import time
from typing import Any

import torch
import torch.nn.functional as F

from benchmarks.baselines import load_features, pad, pretrained_classifier, tensors
from suite.data.buckets import BucketBatchSampler
from suite.data.pieces import PIECE_COST_TOKENS, split_batch

Batch = dict[str, torch.Tensor]


def concat_loss(net: Any, pieces: list[Batch], total: int) -> torch.Tensor:
    """A BERT classifier's loss over a batch's pieces with each linear layer one call over every
    piece's tokens (rows flattened and concatenated) and attention per piece: the padding of the
    pieces, the calls of a whole batch. What an unpadded encoder would buy, measured, not used."""
    bert = net.bert
    width = bert.config.hidden_size
    shapes = [p["input_ids"].shape for p in pieces]
    x = torch.cat(
        [
            bert.embeddings(input_ids=p["input_ids"], token_type_ids=p["token_type_ids"]).reshape(-1, width)
            for p in pieces
        ]
    )
    masks = [p["attention_mask"][:, None, None, :].bool() for p in pieces]
    for layer in bert.encoder.layer:
        attn = layer.attention.self
        heads, size = attn.num_attention_heads, attn.attention_head_size
        q, k, v = attn.query(x), attn.key(x), attn.value(x)
        dropout = attn.dropout.p if net.training else 0.0
        outs, start = [], 0
        for (rows, length), mask in zip(shapes, masks, strict=True):
            end = start + rows * length
            q_, k_, v_ = (t[start:end].view(rows, length, heads, size).transpose(1, 2) for t in (q, k, v))
            o = F.scaled_dot_product_attention(
                q_, k_, v_, attn_mask=mask, dropout_p=dropout, scale=attn.scaling
            )
            outs.append(o.transpose(1, 2).reshape(end - start, heads * size))
            start = end
        a = layer.attention.output(torch.cat(outs), x)
        x = layer.output(layer.intermediate(a), a)
    firsts, start = [], 0
    for rows, length in shapes:  # each row's first token: [CLS]
        firsts.append(x[start : start + rows * length : length])
        start += rows * length
    logits = net.classifier(net.dropout(bert.pooler(torch.cat(firsts)[:, None])))
    labels = torch.cat([p["labels"] for p in pieces])
    return F.cross_entropy(logits, labels, reduction="sum") / total


def epoch(net0: Any, data: list[Batch], lengths: list[int], way: str, batch: int) -> tuple[float, int, int]:
    """Seconds, computed tokens and forward/backward calls of one epoch of `way`."""
    net = copy.deepcopy(net0).train()
    optimizer = torch.optim.AdamW(net.parameters(), lr=2e-5, fused=True)
    order = torch.Generator().manual_seed(1)
    if way == "buckets":
        batches = list(BucketBatchSampler(lengths, batch, order))
    else:
        shuffled = torch.randperm(len(data), generator=order).tolist()
        batches = [shuffled[i : i + batch] for i in range(0, len(shuffled), batch)]
    kind, _, cost = way.partition(":")
    computed = calls = 0
    start = time.perf_counter()
    for indices in batches:
        whole = pad([data[i] for i in indices])
        pieces = split_batch(whole, int(cost)) if cost else [whole]
        computed += sum(p["input_ids"].numel() for p in pieces)
        if kind == "concat":
            concat_loss(net, pieces, len(indices)).backward()
            calls += 1
        else:
            for piece in pieces:
                (net(**piece).loss * len(piece["input_ids"]) / len(indices)).backward()
            calls += len(pieces)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    return time.perf_counter() - start, computed, calls


def call_cost(net: Any, repeats: int = 6) -> None:
    """One more forward/backward call, on the same 1,024 tokens cut 1, 4 and 16 ways, the model in
    training mode (dropout on: attention takes the math path it takes in a training step)."""
    net = copy.deepcopy(net).train()

    def batch(rows: int, padded: bool) -> Batch:
        ids = torch.randint(1000, 2000, (rows, 64))
        mask = torch.ones_like(ids)
        if padded:  # every row two pad tokens: the attention mask is passed, as in most pieces
            mask[:, 62:] = 0
        labels = torch.zeros(rows, dtype=torch.long)
        return dict(input_ids=ids, attention_mask=mask, token_type_ids=torch.zeros_like(ids), labels=labels)

    def timed(pieces: list[Batch]) -> float:
        def one_round() -> None:
            for piece in pieces:
                net(**piece).loss.backward()

        one_round()  # warm-up
        start = time.perf_counter()
        for _ in range(repeats):
            one_round()
        spent = time.perf_counter() - start
        net.zero_grad(set_to_none=True)
        return spent / repeats

    for padded in (False, True):
        whole, four, sixteen = (timed([batch(16 // n, padded)] * n) for n in (1, 4, 16))
        print(
            f"  {'padded' if padded else 'unpadded':8s} [16, 64] {whole * 1e3:5.0f} ms;"
            f" 4 pieces {four * 1e3:5.0f} ms,"
            f" 16 pieces {sixteen * 1e3:5.0f} ms: one more call {(four - whole) / 3 * 1e3:4.1f} and"
            f" {(sixteen - whole) / 15 * 1e3:4.1f} ms ({whole / 1024 * 1e3:.2f} ms a token)"
        )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--task", default="tasks/rte.yaml")
    parser.add_argument("--size", type=int, default=500)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--costs", type=int, nargs="+", default=[16, 32, PIECE_COST_TOKENS, 128, 256])
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--threads", type=int, default=1, help="per process: the suite's workers run 1")
    parser.add_argument("--ways", nargs="+", help="only these (default: all; e.g. buckets pieces:64)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    _, train, _ = load_features(args.task, args.size)
    data = tensors(train)
    lengths = [len(f["input_ids"]) for f in train]
    net0 = pretrained_classifier(args.task)
    ways = args.ways or [
        "buckets",
        *(f"pieces:{c}" for c in args.costs),
        "whole",
        f"concat:{PIECE_COST_TOKENS}",
        "concat:4",
    ]
    warm = 4 * args.batch_size
    epoch(net0, data[:warm], lengths[:warm], "buckets", args.batch_size)  # warm-up, untimed
    seconds: dict[str, list[float]] = {w: [] for w in ways}
    shape: dict[str, tuple[int, int]] = {}
    for _ in range(args.repeats):
        for way in ways:
            spent, computed, calls = epoch(net0, data, lengths, way, args.batch_size)
            seconds[way].append(spent)
            shape[way] = computed, calls
    real = sum(lengths)
    print(
        f"{args.task}, {args.size} examples, batch {args.batch_size}, {args.threads} thread(s),"
        f" {args.repeats} epochs a way"
    )
    report(seconds, shape, real)
    print("the cost of a call:")
    call_cost(net0)


def report(seconds: dict[str, list[float]], shape: dict[str, tuple[int, int]], real: int) -> None:
    """Each way's median seconds per epoch, its runs, padding, calls and speed against the buckets
    (the buckets' time over the way's: below 1, slower)."""
    median = {way: statistics.median(runs) for way, runs in seconds.items()}
    print(f"{'way':14s} {'s/epoch':>8s} {'runs':>16s} {'padding':>8s} {'calls':>6s} {'vs buckets':>11s}")
    for way, runs in seconds.items():
        computed, calls = shape[way]
        runs_text = " ".join(f"{s:.1f}" for s in runs)
        speed = f"{median['buckets'] / median[way]:10.2f}x" if "buckets" in median else f"{'-':>11s}"
        print(f"{way:14s} {median[way]:8.2f} {runs_text:>16s} {computed / real - 1:8.1%} {calls:6d} {speed}")


if __name__ == "__main__":
    main()
