"""NoisyTune: Wu, Wu, Qi, Huang and Xie (2022), "NoisyTune: A Little Noise Can Help You Finetune
Pretrained Language Models Better", ACL 2022 (arXiv 2202.12024), as a `setup` hook.

How it follows the paper. Before fine-tuning, each parameter matrix W of the pretrained model gets
uniform noise scaled by that matrix's own standard deviation (Eq. 1):

    W <- W + U(-lambda / 2, lambda / 2) * std(W),   lambda = 0.15

(the paper's default, its best on GLUE). As in the authors' code, every parameter tensor of the
pretrained encoder is perturbed, weights, biases and LayerNorm parameters alike; a tensor of one
element has no spread and is left as it is. Weights that are not pretrained are not perturbed: the
new head, encoder weights the checkpoint lacked (`module.drawn_weights`) and a LoRA adapter's own
matrices. The noise comes from the setup's generator, seeded from the trial's init seed, so a
trial reruns exactly and the head's initial weights are those of plain fine-tuning.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from suite.model.methods import Method


class NoisyTune(Method):
    def __init__(self, noise_lambda: float = 0.15) -> None:
        if not noise_lambda >= 0:
            raise ValueError(f"noise_lambda is a scale >= 0, got {noise_lambda}")
        self.noise_lambda = float(noise_lambda)

    def setup(self, module: Any, pretrained: Mapping[str, torch.Tensor], generator: torch.Generator) -> None:
        drawn = set(module.drawn_weights)
        for name, param in module.encoder.named_parameters():
            if param.numel() < 2 or name in drawn or "lora_" in name:
                continue
            std = param.detach().float().std()
            noise = (torch.rand(param.shape, generator=generator) - 0.5) * self.noise_lambda * std
            param.add_(noise.to(device=param.device, dtype=param.dtype))
