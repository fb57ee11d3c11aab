"""Stabilisers: the remedies the fine-tuning variance papers tested, as hyperparameters.

- `reinit_layers: k` (Zhang et al. 2021): the top k encoder layers, and the pretrained pooler
  when the head uses it, are re-drawn by the model's own initialiser from the init seed's RNG
  (after the head, so a recipe with re-init shares its head weights with one without);
- `llrd: f` (Howard & Ruder 2018; Sun et al. 2019; Zhang et al. 2021): the top layer trains at
  the base rate and each layer below at f times the one above; the embedding level (everything
  below the first layer) gets the lowest, f^L; what sits above the top layer (pooler, final norm)
  and the head train at the base rate;
- `freeze: embeddings | encoder`: no gradient for the embedding level, or for the whole encoder
  (the feature-based use of BERT, Devlin et al. 2019 s5.3: a frozen encoder, kept in eval mode
  as when features are extracted, under a trained head);
- `head_lr_mult`: the head (every parameter outside the encoder) at lr x this.

Layers are found by the families' naming: `encoder.layer` (BERT, RoBERTa, ELECTRA, DeBERTa-v2),
`transformer.layer` (DistilBERT), `layers` (ModernBERT). ALBERT shares one layer's weights across
depth, so there is no top layer to re-initialise and no per-layer rate: both are refused.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from torch import nn
from transformers import PreTrainedModel

from suite.config.sweep import HParams, SweepSpec
from suite.errors import SpecError
from suite.model import adapters
from suite.model.encoders import missing_weights

LAYER_LISTS = ("encoder.layer", "transformer.layer", "layers")
ABOVE_TOP = ("pooler.", "final_norm.")  # applied after the last layer: trained at the base rate


@dataclass(frozen=True)
class EncoderLayout:
    """Where an encoder's layers are: `layers` are their name prefixes, bottom to top."""

    layers: tuple[str, ...]
    shared: bool  # one layer's weights at every depth (ALBERT)

    def level(self, name: str) -> int | None:
        """A parameter's depth: 0 the embedding level, i the i-th layer (1 = bottom), None above the top."""
        if name.startswith(ABOVE_TOP):
            return None
        for depth, prefix in enumerate(self.layers, start=1):
            if name.startswith(prefix):
                return depth
        return 0


def encoder_layout(encoder: PreTrainedModel) -> EncoderLayout:
    if hasattr(getattr(encoder, "encoder", None), "albert_layer_groups"):
        return EncoderLayout((), shared=True)
    for path in LAYER_LISTS:
        try:
            layers = encoder.get_submodule(path)
        except AttributeError:
            continue
        if isinstance(layers, nn.ModuleList):
            return EncoderLayout(tuple(f"{path}.{i}." for i in range(len(layers))), shared=False)
    return EncoderLayout((), shared=False)


def head_refusal(values: dict[str, Any], head: str, classifier: str) -> tuple[str, str] | None:
    """(hyperparameter, why) when a setting's head choice does not fit the task, else None."""
    chosen = values.get("classifier", "task")
    if chosen != "task" and head != "classification":
        return "classifier", f"a {head} task has no classification head to choose"
    kind = classifier if chosen == "task" else chosen
    if values.get("features") == "last4" and head == "classification" and kind in ("auto", "pooler"):
        return (
            "features",
            f"last4 feeds its own MLP from [CLS] or the mean: set classifier cls or mean, not {kind}",
        )
    if values.get("features") == "last4" and head == "span":
        return "features", "the span head has no feature-based variant"
    return None


def pooler_refusal(encoder: PreTrainedModel, classifier: str) -> str | None:
    """Why `classifier: pooler` cannot run on this checkpoint (no pooler, or a pooler whose
    weights the checkpoint does not hold, as in a masked-LM checkpoint), else None."""
    if classifier != "pooler":
        return None
    if getattr(encoder, "pooler", None) is None:
        return (
            f"pooler needs a checkpoint with a pretrained pooler; {type(encoder).__name__} has none "
            "(use auto or cls)"
        )
    if lacking := [k for k in missing_weights(encoder) if k.startswith("pooler.")]:
        return (
            f"pooler needs a checkpoint with pretrained pooler weights; this one has none "
            f"({', '.join(lacking)} missing, as in a masked-LM checkpoint): use auto (its pooler is "
            "then drawn under the init seed), cls or mean"
        )
    return None


def refusal(encoder: PreTrainedModel, values: dict[str, Any]) -> tuple[str, str] | None:
    """(hyperparameter, why) when this encoder cannot apply a setting's stabilisers, else None."""
    layers = getattr(encoder.config, "num_hidden_layers", None) or getattr(encoder.config, "n_layers", 0)
    if values.get("features") == "last4" and layers < 4:
        return "features", f"last4 needs 4 layers; this {encoder.config.model_type} encoder has {layers}"
    k, f = values.get("reinit_layers", 0), values.get("llrd", 1.0)
    if not k and f == 1:
        return None
    layout, kind = encoder_layout(encoder), encoder.config.model_type
    name = "reinit_layers" if k else "llrd"
    if layout.shared:
        return name, f"{kind} shares one layer's weights across depth: {name} has no layer to act on"
    if not layout.layers:
        return name, f"{kind}: no layer list found ({', '.join(LAYER_LISTS)}), so {name} cannot be applied"
    if k > len(layout.layers):
        return name, f"reinit_layers {k} exceeds the {len(layout.layers)} layers of this {kind} encoder"
    return None


def check_sweep(
    encoder: PreTrainedModel,
    sweep: SweepSpec,
    where: str | Path,
    head: str = "classification",
    classifier: str = "auto",
    task_where: str | Path = "task",
) -> None:
    """Pre-flight: every planned setting's stabilisers and adapter apply to this encoder and its
    head choice to the task and the checkpoint (a TPE space: every searched value), else one line
    naming the sweep file and field (or the task's `classifier` field, `task_where`), before any
    training."""
    if sweep.adaptive:
        _check_searched_adapter(sweep, where)
        planned = [{name: v} for name, p in sweep.space.items() for v in p.candidates()] or [{}]
    else:
        planned = sweep.settings()
    for values in planned:
        merged = sweep.merged(values)
        found = refusal(encoder, merged) or head_refusal(merged, head, classifier)
        if found := found or adapters.refusal(encoder, merged):
            name, why = found
            raise SpecError(f"{where}: field '{sweep.block_of(values, name)}': {why}")
        chosen = merged.get("classifier", "task")
        kind = classifier if chosen == "task" else chosen
        if head == "classification" and (why := pooler_refusal(encoder, kind)):
            if chosen == "task":
                raise SpecError(f"{task_where}: field 'classifier': {why}")
            raise SpecError(f"{where}: field '{sweep.block_of(values, 'classifier')}': {why}")


def _check_searched_adapter(sweep: SweepSpec, where: str | Path) -> None:
    """A searched `adapter` with LoRA's values set (searched or fixed): the sampler would propose a
    non-LoRA setting that carries them, refused only once training has started."""
    from suite.config.sweep import LORA

    if "adapter" not in sweep.space or set(sweep.space["adapter"].candidates()) <= {"lora"}:
        return
    base = sweep.merged({})
    if given := [n for n in LORA if n in sweep.space or base.get(n, LORA[n]) != LORA[n]]:
        raise SpecError(
            f"{where}: field '{sweep.block_of({'adapter': None}, 'adapter')}': a searched adapter "
            f"cannot carry {given[0]} (it applies to adapter lora only): fix the adapter or drop "
            f"{given[0]}"
        )


def reinit_top_layers(encoder: PreTrainedModel, k: int, pooler: bool) -> None:
    """Re-draw the top k layers (and the pooler) with the model's own `_init_weights`, from
    torch's RNG as it stands. A loaded weight may carry transformers' "already initialised" flag,
    which would make `_init_weights` skip it: the flag is cleared first."""
    layout = encoder_layout(encoder)
    top = layout.layers[len(layout.layers) - k :]
    modules = [encoder.get_submodule(prefix.rstrip(".")) for prefix in top]
    if pooler and getattr(encoder, "pooler", None) is not None:
        modules.append(encoder.pooler)
    for module in modules:
        for tensor in [*module.parameters(), *module.buffers()]:
            tensor._is_hf_initialized = False
        module.apply(encoder._init_weights)


def apply(module: Any, hparams: HParams) -> None:
    """Re-init and freeze a built module (a suite EncoderModule) as its hyperparameters say."""
    encoder = module.encoder
    if hparams.reinit_layers:
        reinit_top_layers(encoder, hparams.reinit_layers, pooler=module.uses_pooler)
    if hparams.freeze == "encoder":
        # Lightning keeps the modes it finds (and restores them after each evaluation).
        encoder.requires_grad_(False).eval()
    elif hparams.freeze == "embeddings":
        layout = encoder_layout(encoder)
        for name, param in encoder.named_parameters():
            if layout.level(name) == 0:
                param.requires_grad_(False)


def lr_multipliers(module: Any, hparams: HParams) -> dict[str, float]:
    """Parameter-name prefix -> learning-rate multiplier (the longest matching prefix wins): the
    head at `head_lr_mult` (times a head part's own multiplier, e.g. a CRF's), the encoder at
    the base rate, or per layer under LLRD."""
    out = {"": hparams.head_lr_mult}
    out.update({prefix: hparams.head_lr_mult * m for prefix, m in module.lr_multipliers().items()})
    out["encoder."] = 1.0
    if hparams.llrd != 1:
        layout = encoder_layout(module.encoder)
        top = len(layout.layers)
        for name, _ in module.encoder.named_parameters():
            depth = layout.level(name)
            if depth is not None:
                out[f"encoder.{name}"] = hparams.llrd ** (top - depth)
    return out
