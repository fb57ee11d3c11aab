"""The input embedding's gradient added row by row into one kept `.grad`, on the CPU.

torch's embedding backward returns a dense [vocabulary, width] gradient for every call (MiniLM:
47 MB), zero-filled, and autograd adds the pieces' of a split batch into yet another. A block this
large is fresh memory each time (glibc and jemalloc both map it anew), so the kernel faults it in
page by page: ~24 ms a call against ~4 ms of arithmetic, 17-20% of a NER step on the CPU
(benchmarks/RESULTS.md). Here a call sums its own tokens' rows with the same kernel over a compact
index, adds those rows into a buffer kept across steps, and at the end of the backward pass puts
that sum into the weight's `.grad` as autograd would: each row sees the same additions in the same
order as before (the pieces in the order autograd runs them, then the accumulation into `.grad`),
so every gradient is bit-identical (tests/test_embedding_grad.py).

Written here because no library does it: `sparse=True` embeddings change the optimizer (AdamW
takes no sparse gradient), and a custom allocator setting only moves the cost into memory.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.autograd import Variable
from torch.autograd.function import once_differentiable
from torch.nn import functional as F


class _RowsBackward(torch.autograd.Function):
    """The lookup; its backward sums the gradient's rows into the pass's kept buffer
    (`owner.add_rows`) and returns none for the weight: autograd's own summing is what allocates."""

    @staticmethod
    def forward(ctx, ids: torch.Tensor, weight: torch.Tensor, owner: KeptGradEmbedding) -> torch.Tensor:  # noqa: ANN001
        ctx.save_for_backward(ids)
        ctx.owner, ctx.weight = owner, weight
        return F.embedding(ids, weight, owner.padding_idx)

    @staticmethod
    @once_differentiable
    def backward(ctx, grad: torch.Tensor) -> tuple[None, None, None]:  # noqa: ANN001
        (ids,) = ctx.saved_tensors
        ctx.owner.add_rows(ids, grad, ctx.weight)
        return None, None, None


class KeptGradEmbedding(nn.Embedding):
    """An `nn.Embedding` (the same parameters and names) whose training lookups on the CPU sum
    their gradient in kept buffers (`add_rows`); anywhere else it is torch's own."""

    # Vocabulary-sized buffers, made once: the one `.grad` holds, and (only when gradients are
    # accumulated over backward passes) the one a pass sums into while `.grad` is still held.
    _buffers_kept: list[torch.Tensor] | None = None
    # Per backward pass under way (autograd's graph task): the weight it is for and its sum so far.
    _pending: dict[int, tuple[torch.Tensor, torch.Tensor]] | None = None

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        # Renormalising or sparse lookups, and functorch transforms (replicates under vmap: their
        # gradients are not this module's `.grad`), are torch's own.
        plain = self.max_norm is not None or self.scale_grad_by_freq or self.sparse
        plain |= torch._C._are_functorch_transforms_active()
        training = torch.is_grad_enabled() and self.weight.requires_grad
        if plain or not training or self.weight.device.type != "cpu":
            return super().forward(ids)
        return _RowsBackward.apply(ids, self.weight, self)

    def add_rows(self, ids: torch.Tensor, grad: torch.Tensor, weight: torch.Tensor) -> None:
        """`grad` (per token of `ids`) summed per row as torch's embedding backward sums it (in
        token order, from zero, over a compact index), and added into this backward pass's sum,
        which goes into `weight.grad` when the pass ends (`_settle`): as autograd sums the calls'
        gradients in the order it runs them, then accumulates the total into `.grad`."""
        rows, compact = torch.unique(ids, return_inverse=True)
        padding = -1
        if self.padding_idx is not None and bool((hit := rows == self.padding_idx).any()):
            padding = int(hit.nonzero()[0, 0])
        sums = torch.ops.aten.embedding_dense_backward(grad, compact, len(rows), padding, False)
        pending = self._pending = self._pending or {}
        task = torch._C._current_graph_task_id()
        if task not in pending:  # the pass's first call
            pending[task] = (weight, self._zeroed(weight))
            Variable._execution_engine.queue_callback(lambda: self._settle(task))
        pending[task][1].index_add_(0, rows, sums)

    def _zeroed(self, weight: torch.Tensor) -> torch.Tensor:
        """A zeroed kept buffer that neither `.grad` nor a pass under way holds (the second made
        only when needed)."""
        kept = self._buffers_kept = self._buffers_kept or []
        held = [weight.grad, *(total for _, total in self._pending.values())]
        free = next((b for b in kept if all(b is not h for h in held)), None)
        if free is None:
            kept.append(free := torch.zeros_like(weight))
            return free
        return free.zero_()

    def _settle(self, task: int) -> None:
        """The pass's sum into `.grad` as autograd's accumulation does it: taken when there is no
        `.grad`, else added in place. (A pass that raised never settles: its sum never reaches
        `.grad`, as autograd's buffers do not, and its entry keeps one buffer held until the module
        is cast or dropped: a raised backward ends the trial.)"""
        weight, total = self._pending.pop(task)
        if weight.grad is None:
            weight.grad = total
        else:
            weight.grad.add_(total)

    def _apply(self, fn, recurse: bool = True):  # noqa: ANN001, ANN202 (torch's signature)
        self._buffers_kept, self._pending = None, None  # made again for the moved or cast weight
        return super()._apply(fn, recurse)


def keep_embedding_grad(encoder: nn.Module) -> None:
    """The encoder's input (word) embedding made a `KeptGradEmbedding`, in place; an encoder whose
    input embedding is not a plain `nn.Embedding`, or whose embedding weight is used elsewhere too
    (tied: its other gradient would reach `.grad` first, another order of additions), is left as
    it is."""
    try:
        embedding = encoder.get_input_embeddings()
    except (AttributeError, NotImplementedError):
        return
    if type(embedding) is not nn.Embedding:
        return
    if sum(p is embedding.weight for _, p in encoder.named_parameters(remove_duplicate=False)) == 1:
        embedding.__class__ = KeptGradEmbedding
