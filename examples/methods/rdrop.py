"""R-Drop: Liang, Wu, Li, Wang, Meng, Qin, Chen, Zhang and Liu (2021), "R-Drop: Regularized
Dropout for Neural Networks", NeurIPS 2021 (arXiv 2106.14448), as a `loss` hook.

How it follows the paper. Every training step runs the batch forward twice: with dropout on, the
two passes are two sub-models, P1 and P2. The loss is the two passes' negative log-likelihoods plus
alpha times their symmetric Kullback-Leibler divergence (Eq. 2-3: L = L_NLL + alpha L_KL, L_KL =
(KL(P1 || P2) + KL(P2 || P1)) / 2); the two NLLs are averaged, as the authors' GLUE fine-tuning code
does, so alpha = 0 trains on the mean of two passes' losses. The KL is summed over classes and
averaged over examples (the authors' code sums it over the batch too: their alpha is this one /
batch size); the paper's GLUE runs take alpha in {0.1, 0.5, 1.0}; the default is 1.0.

Beyond the paper's classification: per-token outputs (tagging emissions) take the KL per real
token (the attention mask), span start and end logits each their own KL, averaged; a regression
score (one output) takes the squared difference of the two passes. The extra terms are computed in
fp32 whatever the autocast (the hook's job, docs/methods.md); the second pass's dropout comes from
the global RNG, which the suite seeds from the order seed, so a trial reruns exactly.
"""

from __future__ import annotations

from typing import Any

import torch
from torch.nn import functional as F

from suite.model.methods import Method


class RDrop(Method):
    def __init__(self, alpha: float = 1.0) -> None:
        if not alpha >= 0:
            raise ValueError(f"alpha is a weight >= 0, got {alpha}")
        self.alpha = float(alpha)

    def loss(self, batch: dict[str, Any], outputs: Any, base_loss: torch.Tensor, module: Any) -> torch.Tensor:
        second_loss, second = module.loss_with_outputs(batch)  # the second pass: its own dropout masks
        nll = (base_loss + second_loss.float()) / 2
        return nll + self.alpha * consistency(outputs, second, batch["attention_mask"])


def consistency(first: Any, second: Any, mask: torch.Tensor) -> torch.Tensor:
    """The symmetric KL between two passes' outputs (span heads: start and end, averaged; a
    regression score: the squared difference), in fp32."""
    if isinstance(first, tuple | list):
        return sum(consistency(a, b, mask) for a, b in zip(first, second, strict=True)) / len(first)
    a, b = first.float(), second.float()
    if a.ndim == 1:  # one score per example
        return ((a - b) ** 2).mean()
    log_a, log_b = F.log_softmax(a, dim=-1), F.log_softmax(b, dim=-1)
    kl = ((log_a.exp() * (log_a - log_b)).sum(-1) + (log_b.exp() * (log_b - log_a)).sum(-1)) / 2
    if kl.ndim == 2:  # per token: the real ones only
        weight = mask.to(kl.dtype)
        return (kl * weight).sum() / weight.sum().clamp(min=1.0)
    return kl.mean()
