import torch
from torch import nn

from suite.model.optim import BertAdam, make_optimizer, parameter_groups


def _first_step(optimizer_cls, **kw) -> float:  # noqa: ANN001
    p = nn.Parameter(torch.zeros(3))
    opt = optimizer_cls([p], lr=0.1, **kw)
    p.grad = torch.tensor([1.0, -2.0, 0.5])
    opt.step()
    return p.detach().abs().max().item()


def test_bias_correction_off_inflates_the_first_steps() -> None:
    corrected = _first_step(torch.optim.AdamW, weight_decay=0.0, eps=1e-6)
    uncorrected = _first_step(BertAdam)
    assert abs(corrected - 0.1) < 1e-4  # Adam's first step is lr * sign(g)
    # Without correction: lr * (1 - b1) / sqrt(1 - b2) = 0.1 * 0.1 / sqrt(0.001) ~ 0.316
    assert abs(uncorrected - 0.1 * 0.1 / 0.001**0.5) < 1e-3


def test_no_weight_decay_on_biases_and_layernorm() -> None:
    model = nn.Sequential(nn.Linear(4, 4), nn.LayerNorm(4))
    decay, no_decay = parameter_groups(model, 1e-3, 0.01)
    assert len(decay["params"]) == 1 and decay["params"][0] is model[0].weight
    assert len(no_decay["params"]) == 3 and no_decay["weight_decay"] == 0.0


def test_make_optimizer_picks_by_bias_correction() -> None:
    model = nn.Linear(2, 2)
    assert isinstance(make_optimizer(model, 1e-3, 0.0, bias_correction=False), BertAdam)
    assert isinstance(make_optimizer(model, 1e-3, 0.0, bias_correction=True), torch.optim.AdamW)
