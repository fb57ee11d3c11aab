"""Per-trial cost of building the `auto` classification head: before (the whole
AutoModelForSequenceClassification built by `from_config`, every weight allocated and drawn, and
the encoder thrown away for the pretrained one) vs after (`suite.heads.classification
.reference_model`: the model laid out on the meta device, only the head materialised and drawn).

    python -m benchmarks.auto_head [--repeats 5] [--threads 1] [--only bert-base,bert-large]

Configs are the families' base-sized defaults (no download: the config classes' own defaults,
BERT-large by size), with a random encoder that is built once, untimed. Prints the median seconds
of each construction (after one untimed warm-up), their ratio, the bytes of tensors each allocates
beyond the encoder, and the floor any construction with today's head values would pay: drawing as
many random numbers as `from_config` draws before the head (torch's default init of every layer,
then the family's init), timed as one uniform_ and one normal_ pass over the encoder's size.
"""

from __future__ import annotations

import argparse
import copy
import statistics
import time
from collections.abc import Callable

import torch
import transformers as T
from transformers import initialization as hf_init

from suite.heads.classification import reference_model

CONFIGS: dict[str, Callable[[], T.PretrainedConfig]] = {
    "bert-base": lambda: T.BertConfig(),
    "bert-large": lambda: T.BertConfig(
        hidden_size=1024, num_hidden_layers=24, num_attention_heads=16, intermediate_size=4096
    ),
    "roberta-base": lambda: T.RobertaConfig(vocab_size=50265, max_position_embeddings=514, type_vocab_size=1),
    "deberta-v2-base": lambda: T.DebertaV2Config(
        vocab_size=128100,
        hidden_size=768,
        num_hidden_layers=12,
        num_attention_heads=12,
        intermediate_size=3072,
    ),
    "electra-base": lambda: T.ElectraConfig(
        embedding_size=768,
        hidden_size=768,
        num_hidden_layers=12,
        num_attention_heads=12,
        intermediate_size=3072,
    ),
    "distilbert-base": lambda: T.DistilBertConfig(),
    "modernbert-base": lambda: T.ModernBertConfig(),
}


def before(encoder: T.PreTrainedModel, num_outputs: int) -> T.PreTrainedModel:
    """`reference_model` as it was: a whole second model, its encoder discarded."""
    config = copy.deepcopy(encoder.config)
    config.num_labels = num_outputs
    model = T.AutoModelForSequenceClassification.from_config(config)
    setattr(model, model.base_model_prefix, encoder)
    return model


def timed(build: Callable[[], object], repeats: int) -> float:
    build()  # warm-up: imports, first allocations
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        build()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def nbytes(module: torch.nn.Module, skip: str | None = None) -> int:
    return sum(
        t.numel() * t.element_size()
        for name, t in [*module.named_parameters(), *module.named_buffers()]
        if skip is None or not name.startswith(skip + ".")
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1, help="torch threads (a trial's --threads)")
    parser.add_argument("--only", default="", help="comma-separated config names")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    names = [n for n in CONFIGS if not args.only or n in args.only.split(",")]
    print(f"auto head construction, {args.threads} thread(s), median of {args.repeats}")
    print(
        f"{'config':16} {'params':>7} {'before s':>9} {'after s':>8} {'ratio':>7} "
        f"{'before MB':>10} {'after MB':>9} {'same-values floor s':>20}"
    )
    for name in names:
        config = CONFIGS[name]()
        with hf_init.no_init_weights():  # the encoder's values do not matter here
            encoder = T.AutoModel.from_config(config)
        torch.manual_seed(0)
        old = timed(lambda encoder=encoder: before(encoder, 2), args.repeats)
        new = timed(lambda encoder=encoder: reference_model(encoder, 2), args.repeats)
        old_model, new_model = before(encoder, 2), reference_model(encoder, 2)
        prefix = old_model.base_model_prefix
        old_mb = (nbytes(T.AutoModelForSequenceClassification.from_config(copy.deepcopy(config)))) / 2**20
        new_mb = nbytes(new_model, skip=prefix) / 2**20
        size = sum(p.numel() for p in encoder.parameters())
        scratch = torch.empty(size)
        floor = timed(lambda scratch=scratch: (scratch.uniform_(), scratch.normal_()), 1)
        del old_model, new_model, scratch
        print(
            f"{name:16} {size / 1e6:6.0f}M {old:9.3f} {new:8.3f} {old / new:6.0f}x "
            f"{old_mb:10.0f} {new_mb:9.2f} {floor:20.3f}"
        )


if __name__ == "__main__":
    main()
