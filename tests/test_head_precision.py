"""Every head's output layer computes in fp32 under bf16 autocast (a GPU's bf16-mixed, here the
CPU's autocast): bf16 logits keep 8 bits of mantissa, so span logits tied in the n-best and STS-B
predictions rounded to ~0.02. In fp32 training nothing changes."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
from torch import nn

from suite.config.sweep import HParams
from suite.heads.base import EncoderModule, Fp32Linear, fp32_output
from suite.heads.classification import ClassificationModule, output_layer
from suite.heads.span import SpanModule
from suite.heads.tagging import TaggingModule
from suite.model.encoders import load_encoder
from tests.conftest import ARCHITECTURES

HP = HParams(lr=1e-3, batch_size=8, epochs=1)
BATCH = {
    "input_ids": torch.tensor([[101, 2023, 2003, 1037, 3231, 102], [101, 7592, 2088, 102, 0, 0]]),
    "attention_mask": torch.tensor([[1, 1, 1, 1, 1, 1], [1, 1, 1, 1, 0, 0]]),
}


def _output_under_bf16(module: EncoderModule, layer: nn.Module) -> tuple[torch.Tensor, torch.Tensor]:
    """(what `layer` returned inside the module's forward under bf16 autocast, the same layer on
    the same input computed in fp32 outside autocast)."""
    seen = {}
    handle = layer.register_forward_hook(lambda m, args, out: seen.update(x=args[0], out=out))
    module.eval()
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        module(BATCH)
    handle.remove()
    with torch.no_grad():
        return seen["out"], nn.functional.linear(seen["x"].float(), layer.weight, layer.bias)


def _check(module: EncoderModule, layer: nn.Module) -> None:
    out, fp32 = _output_under_bf16(module, layer)
    assert isinstance(layer, Fp32Linear) and out.dtype == torch.float32
    assert torch.equal(out, fp32)  # the fp32 product of its input, not a bf16 one
    assert not torch.equal(out, out.bfloat16().float())  # finer than bf16 can hold


@pytest.mark.parametrize("arch", ARCHITECTURES)
def test_the_auto_heads_output_layer_is_fp32_and_keeps_its_name(arch: str, tiny_models) -> None:  # noqa: ANN001
    module = ClassificationModule(
        load_encoder(str(tiny_models[arch])), HP, 3, ["accuracy"], classifier="auto"
    )
    layer = output_layer(module.reference)
    assert layer.out_features == 3
    _check(module, layer)
    names = {n for n, p in module.named_parameters() if p is layer.weight}
    assert names <= {"reference.classifier.weight", "reference.classifier.out_proj.weight"} and names


Builder = Callable[[object], EncoderModule]
HEADS: dict[str, tuple[Builder, Callable[[EncoderModule], nn.Module]]] = {
    "mean": (
        lambda e: ClassificationModule(e, HP, 1, ["spearman"], regression=True, classifier="mean"),
        lambda m: m.classifier,
    ),
    "tagging": (
        lambda e: TaggingModule(e, HP, ["O", "B-X", "I-X"], lambda w: ({}, {})),
        lambda m: m.classifier,
    ),
    "crf": (
        lambda e: TaggingModule(e, HP, ["O", "B-X", "I-X"], lambda w: ({}, {}), crf=True),
        lambda m: m.classifier,
    ),
    "span": (lambda e: SpanModule(e, HP, lambda s, e: ({}, {})), lambda m: m.qa_outputs),
}


@pytest.mark.parametrize("head", HEADS)
def test_each_heads_output_layer_is_fp32_under_bf16_autocast(head: str, tiny_models) -> None:  # noqa: ANN001
    build, layer = HEADS[head]
    module = build(load_encoder(str(tiny_models["bert"])))
    _check(module, layer(module))


def test_the_feature_based_mlp_ends_in_an_fp32_layer(tiny_models) -> None:  # noqa: ANN001
    last4 = HP.model_copy(update={"features": "last4"})  # (the tiny encoders have too few layers to run it)
    module = ClassificationModule(
        load_encoder(str(tiny_models["bert"])), last4, 2, ["accuracy"], classifier="cls"
    )
    assert [type(m) for m in module.classifier] == [nn.Linear, nn.Tanh, nn.Dropout, Fp32Linear]


def test_span_logits_come_out_fp32_under_bf16_autocast(tiny_models) -> None:  # noqa: ANN001
    module = SpanModule(load_encoder(str(tiny_models["bert"])), HP, lambda s, e: ({}, {}))
    module.eval()
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        start, end = module(BATCH)
    assert start.dtype == end.dtype == torch.float32
    assert (start[1, 4:] == -1e4).all()  # padding still masked out


def test_in_fp32_the_output_layer_computes_what_a_linear_layer_does() -> None:
    torch.manual_seed(0)
    plain = nn.Linear(8, 3)
    x = torch.randn(5, 8)
    expected = plain(x)
    layer = fp32_output(plain)
    assert layer is plain and torch.equal(layer(x), expected)
    with pytest.raises(TypeError, match="Linear"):
        fp32_output(nn.Sequential(nn.Linear(2, 2)))  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("weights", "out"), [(torch.bfloat16, torch.float32), (torch.float64, torch.float64)]
)
def test_under_true_precision_the_output_layer_computes_in_at_least_fp32(weights, out) -> None:  # noqa: ANN001
    """`--precision bf16-true` / `64-true` cast the weights themselves: the layer must not fail on
    mixed dtypes, computes in fp32 from bf16 weights and keeps fp64 ones."""
    torch.manual_seed(0)
    layer = fp32_output(nn.Linear(8, 3)).to(weights)
    x = torch.randn(5, 8, dtype=weights)
    y = layer(x)
    assert y.dtype == out
    expected = nn.functional.linear(x.to(out), layer.weight.to(out), layer.bias.to(out))
    assert torch.equal(y, expected)
