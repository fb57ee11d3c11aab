"""Optimizers: AdamW with or without Adam's bias correction, fused where the precision allows."""

from __future__ import annotations

from collections.abc import Iterable

import torch
from torch import nn

# No decay on biases, norms, and a CRF's transition scores (log-potentials, not weights).
NO_DECAY = ("bias", "LayerNorm.weight", "layer_norm.weight", "norm.weight", "transitions")


def parameter_groups(
    model: nn.Module, lr: float, weight_decay: float, multipliers: dict[str, float] | None = None
) -> list[dict]:
    """Weight decay on matrices only: none on biases and LayerNorm weights (as BERT does); a
    parameter trains at lr x the multiplier of the longest prefix in `multipliers` its name starts
    with (1 when none does). Frozen parameters are left out."""
    groups: dict[tuple[float, bool], list] = {}
    by_length = sorted((multipliers or {}).items(), key=lambda kv: -len(kv[0]))
    for name, param in model.named_parameters():
        if not param.requires_grad:
            continue
        mult = next((m for prefix, m in by_length if name.startswith(prefix)), 1.0)
        decays = not (name.endswith(NO_DECAY) or param.ndim < 2)
        groups.setdefault((mult, decays), []).append(param)
    return [
        {"params": params, "lr": lr * mult, "weight_decay": weight_decay if decays else 0.0}
        for (mult, decays), params in sorted(groups.items(), key=lambda kv: (kv[0][0], not kv[0][1]))
    ]


class BertAdam(torch.optim.Optimizer):
    """AdamW without bias correction, as in the original BERT release.

    Written here because no maintained library ships it any more (transformers removed its
    AdamW with `correct_bias`); Mosbach et al. trace the small-data failure mode of BERT
    fine-tuning to exactly this omission, so the suite must be able to reproduce it.
    """

    def __init__(self, params: Iterable, lr: float, betas=(0.9, 0.999), eps=1e-6, weight_decay=0.0):
        super().__init__(params, dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay))

    @torch.no_grad()
    def step(self, closure=None):  # noqa: ANN001, ANN201 (torch's signature)
        loss = closure() if closure is not None else None
        for group in self.param_groups:
            beta1, beta2 = group["betas"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                state = self.state[p]
                if not state:
                    state["exp_avg"] = torch.zeros_like(p)
                    state["exp_avg_sq"] = torch.zeros_like(p)
                m, v = state["exp_avg"], state["exp_avg_sq"]
                m.mul_(beta1).add_(p.grad, alpha=1 - beta1)
                v.mul_(beta2).addcmul_(p.grad, p.grad, value=1 - beta2)
                p.addcdiv_(m, v.sqrt().add_(group["eps"]), value=-group["lr"])
                if group["weight_decay"]:
                    p.add_(p, alpha=-group["lr"] * group["weight_decay"])
        return loss


def adamw_implementation(precision: str) -> str:
    """How AdamW runs under a Lightning `precision`: `fused` (one kernel for all parameters, ~7x
    faster per step than the default on the CPU) at full or half precision; `foreach` under mixed
    precision, where Lightning clips gradients itself and refuses an optimizer that unscales them
    inside its step, as fused AdamW does (`MixedPrecision.clip_gradients`). The two differ in
    rounding, so the choice is part of a study's identity (`suite.identity.study_fingerprint`)."""
    return "foreach" if str(precision).endswith("-mixed") else "fused"


def optimizer_label(optimizer: torch.optim.Optimizer) -> str:
    """What a trial's record says it trained with, read off the optimizer built: `bert-adam`,
    `adamw-fused` or `adamw-foreach`; another (a method's) by its class."""
    if isinstance(optimizer, BertAdam):
        return "bert-adam"
    if type(optimizer) is not torch.optim.AdamW:  # built by a fine-tuning method's `optimizer` hook
        return f"{type(optimizer).__module__}.{type(optimizer).__qualname__}"
    return "adamw-fused" if optimizer.defaults.get("fused") else "adamw-foreach"


AUTOCAST_DTYPES = {"bf16-mixed": torch.bfloat16, "16-mixed": torch.float16}  # Lightning's mixed precisions


def make_optimizer(
    model: nn.Module,
    lr: float,
    weight_decay: float,
    bias_correction: bool,
    multipliers: dict[str, float] | None = None,
    precision: str = "32-true",
) -> torch.optim.Optimizer:
    groups = parameter_groups(model, lr, weight_decay, multipliers)
    return optimizer_over(groups, lr, bias_correction, precision)


def optimizer_over(
    groups: list[dict], lr: float, bias_correction: bool, precision: str
) -> torch.optim.Optimizer:
    """AdamW (bias-corrected) or BERT's Adam over parameter groups, as `make_optimizer` builds it."""
    if not bias_correction:
        return BertAdam(groups, lr=lr)
    fused = adamw_implementation(precision) == "fused"
    return torch.optim.AdamW(groups, lr=lr, eps=1e-6, fused=fused, foreach=not fused)
