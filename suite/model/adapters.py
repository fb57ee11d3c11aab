"""Parameter-efficient fine-tuning: what of the pretrained encoder trains (`adapter`).

- `lora` (Hu et al. 2021), built by `peft`: a trainable low-rank update B A (x alpha / r) beside
  each target projection, the projection itself frozen; by default the family's attention query
  and value projections, as the paper adapts them;
- `bitfit` (Ben Zaken et al. 2022): only the encoder's bias terms train (attention, feed-forward
  and LayerNorm biases, as the paper's), the weights stay frozen.

The head (every parameter outside the encoder) always trains, and so do encoder weights the
checkpoint lacked (`drawn_weights`, e.g. a masked-LM checkpoint's pooler): they are new, not
pretrained. A pretrained pooler the head reads stays frozen under LoRA (as `peft` leaves it) and
trains its bias under BitFit. Applied after the head, the drawn weights and the stabilisers, so
the head's initial weights are those of the same init seed without an adapter; LoRA's A is drawn
from torch's RNG as it then stands (its B starts at zero: the model starts as the pretrained one).
"""

from __future__ import annotations

from typing import Any

from torch import nn
from transformers import PreTrainedModel

from suite.config.sweep import HParams

# Each family's attention query and value projections, by `config.model_type`.
DEFAULT_TARGETS: dict[str, tuple[str, ...]] = {
    "bert": ("query", "value"),
    "roberta": ("query", "value"),
    "xlm-roberta": ("query", "value"),
    "electra": ("query", "value"),
    "albert": ("query", "value"),
    "distilbert": ("q_lin", "v_lin"),
    "deberta-v2": ("query_proj", "value_proj"),
    "modernbert": ("Wqkv",),  # one fused query-key-value projection
}


def lora_targets(encoder: PreTrainedModel, targets: str) -> tuple[str, ...] | None:
    """The module names LoRA adapts: those given (comma-separated), or the family's default
    (`auto`; None for a family without one)."""
    if targets != "auto":
        return tuple(name.strip() for name in targets.split(",") if name.strip())
    return DEFAULT_TARGETS.get(encoder.config.model_type)


def _linear_names(encoder: PreTrainedModel) -> set[str]:
    """The last name part of every linear layer: what `peft` matches a target name against."""
    return {name.rsplit(".", 1)[-1] for name, m in encoder.named_modules() if isinstance(m, nn.Linear)}


def refusal(encoder: PreTrainedModel, values: dict[str, Any]) -> tuple[str, str] | None:
    """(hyperparameter, why) when this encoder cannot take a setting's adapter, else None."""
    adapter, kind = values.get("adapter", "none"), encoder.config.model_type
    if adapter == "bitfit" and not any(n.endswith("bias") for n, _ in encoder.named_parameters()):
        return "adapter", f"bitfit trains bias terms; this {kind} encoder has none"
    if adapter != "lora":
        return None
    given = values.get("lora_targets", "auto")
    targets = lora_targets(encoder, given)
    if targets is None:
        return "lora_targets", f"no default LoRA targets for {kind}: name its attention projections"
    linear = _linear_names(encoder)
    if missing := [t for t in targets if t not in linear]:
        field = "lora_targets" if given != "auto" else "adapter"
        return field, (
            f"no linear layer named {', '.join(missing)} in this {kind} encoder "
            f"(its linear layers: {', '.join(sorted(linear))})"
        )
    return None


def apply(module: Any, hparams: HParams) -> None:
    """Freeze the encoder of a built module (a suite EncoderModule) but what the adapter trains."""
    if hparams.adapter == "none":
        return
    encoder = module.encoder
    # The drawn weights by object: peft renames what it wraps (`dense.weight` ->
    # `dense.base_layer.weight`), never the parameters themselves.
    drawn = [p for name, p in encoder.named_parameters() if name in set(module.drawn_weights)]
    if hparams.adapter == "lora":
        from peft import LoraConfig, inject_adapter_in_model  # imported by LoRA settings only

        config = LoraConfig(
            r=hparams.lora_r,
            lora_alpha=hparams.lora_alpha,
            lora_dropout=hparams.lora_dropout,
            target_modules=list(lora_targets(encoder, hparams.lora_targets)),
            bias="none",
        )
        inject_adapter_in_model(config, encoder)  # in place; freezes all but the LoRA weights
    else:
        for name, param in encoder.named_parameters():
            param.requires_grad_(name.endswith("bias"))
    for param in drawn:  # new weights, not pretrained ones: they train whatever the adapter
        param.requires_grad_(True)


def parameter_counts(module: nn.Module) -> dict[str, int]:
    """Trainable and total parameters of a built module (encoder, adapter and head; a weight
    shared across layers, as ALBERT's, counted once)."""
    params = list(module.parameters())
    return {
        "trainable_params": sum(p.numel() for p in params if p.requires_grad),
        "total_params": sum(p.numel() for p in params),
    }
