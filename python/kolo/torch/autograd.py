"""The autograd functions of kolo.torch's differentiable collectives, with
horovod.torch's gradient definitions (horovod/torch/mpi_ops.py). In terms of the
ranks' losses L_r, the backward passes differentiate:

  allreduce, grouped_allreduce, alltoall:    sum_r L_r  (the exact adjoint)
  allgather, grouped_allgather, broadcast:   (1/n) sum_r L_r  (averaged gradients)
  reducescatter, grouped_reducescatter:      n sum_r L_r

that is: all-reduce's gradient is the same all-reduce of the output gradient;
all-gather's the output gradient averaged over ranks, then this rank's rows;
broadcast's the averaged gradient on the root and zeros elsewhere;
reduce-scatter's the output gradients all-gathered (times n for Sum) times the
factors; all-to-all's an all-to-all back with the received splits. Min, Max and
Product have no gradient (Horovod would reduce the gradients with the same op,
which is not a derivative): their backward raises.

The backward collectives are unnamed: every rank runs the same backward graph,
so they are submitted in the same order everywhere."""
from __future__ import annotations

import functools
from typing import Any, Callable, List, Optional, Tuple

import torch

from .. import _core
from .._runtime import RUNTIME, current_scope, in_scope
from . import ops


def _differentiable(op: int, what: str) -> None:
    if op not in (ops.Sum, ops.Average):
        raise RuntimeError(
            "kolo: %s with op %s has no gradient (only Sum and Average are differentiable)" % (what, _core.OP_NAMES[op])
        )


def _scoped(backward: Callable[..., Any]) -> Callable[..., Any]:
    """Runs a backward pass on the process set its forward ran on (ctx.scope)."""

    @functools.wraps(backward)
    def run(ctx: Any, *grads: Any) -> Any:
        with in_scope(getattr(ctx, "scope", None)):
            return backward(ctx, *grads)

    return run


def _offsets(rows: List[int]) -> List[Tuple[int, int]]:
    """(offset, rows) of this rank's block in every gathered tensor: the row
    counts of every rank, exchanged in one all-gather."""
    size, rank = RUNTIME.size(), RUNTIME.rank()
    everyone = ops.allgather_async(torch.tensor(rows, dtype=torch.int64).reshape(1, -1)).wait()
    everyone = everyone.reshape(size, len(rows))
    return [(int(everyone[:rank, i].sum()), rows[i]) for i in range(len(rows))]


class Allreduce(torch.autograd.Function):
    @staticmethod
    def forward(
        ctx: Any, tensor: torch.Tensor, name: Optional[str], op: int, prescale: float, postscale: float
    ) -> torch.Tensor:
        ctx.scope = current_scope()
        ctx.op, ctx.prescale, ctx.postscale = op, prescale, postscale
        return ops.allreduce_async(tensor, None, name, op, prescale, postscale).wait()

    @staticmethod
    @_scoped
    def backward(ctx: Any, grad: torch.Tensor) -> Tuple[Any, ...]:
        _differentiable(ctx.op, "allreduce")
        reduced = ops.allreduce_async(grad, None, None, ctx.op, ctx.prescale, ctx.postscale).wait()
        return reduced, None, None, None, None


class GroupedAllreduce(torch.autograd.Function):
    @staticmethod
    def forward(
        ctx: Any, name: Optional[str], op: int, prescale: float, postscale: float, *tensors: torch.Tensor
    ) -> Tuple[torch.Tensor, ...]:
        ctx.scope = current_scope()
        ctx.op, ctx.prescale, ctx.postscale = op, prescale, postscale
        return tuple(ops.grouped_allreduce_async(list(tensors), None, name, op, prescale, postscale).wait())

    @staticmethod
    @_scoped
    def backward(ctx: Any, *grads: torch.Tensor) -> Tuple[Any, ...]:
        _differentiable(ctx.op, "grouped_allreduce")
        reduced = ops.grouped_allreduce_async(list(grads), None, None, ctx.op, ctx.prescale, ctx.postscale).wait()
        return (None, None, None, None) + tuple(reduced)


class Allgather(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, tensor: torch.Tensor, name: Optional[str]) -> torch.Tensor:
        ctx.scope = current_scope()
        ctx.shape = tensor.shape
        return ops.allgather_async(tensor, name).wait()

    @staticmethod
    @_scoped
    def backward(ctx: Any, grad: torch.Tensor) -> Tuple[Any, ...]:
        rows = ctx.shape[0] if len(ctx.shape) else 1
        reduced = ops.allreduce_async(grad, None, None, ops.Average).wait()
        ((offset, rows),) = _offsets([rows])
        return reduced.narrow(0, offset, rows).reshape(ctx.shape), None


class GroupedAllgather(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, name: Optional[str], *tensors: torch.Tensor) -> Tuple[torch.Tensor, ...]:
        ctx.scope = current_scope()
        from .grouped import grouped_allgather_async

        ctx.shapes = [t.shape for t in tensors]
        return tuple(grouped_allgather_async(list(tensors), name).wait())

    @staticmethod
    @_scoped
    def backward(ctx: Any, *grads: torch.Tensor) -> Tuple[Any, ...]:
        reduced = ops.grouped_allreduce_async(list(grads), None, None, ops.Average).wait()
        blocks = _offsets([s[0] if len(s) else 1 for s in ctx.shapes])
        return (None,) + tuple(
            r.narrow(0, offset, rows).reshape(shape) for r, (offset, rows), shape in zip(reduced, blocks, ctx.shapes)
        )


class Broadcast(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, tensor: torch.Tensor, root_rank: int, name: Optional[str]) -> torch.Tensor:
        ctx.scope = current_scope()
        ctx.root_rank = root_rank
        return ops.broadcast_async(tensor, root_rank, name).wait()

    @staticmethod
    @_scoped
    def backward(ctx: Any, grad: torch.Tensor) -> Tuple[Any, ...]:
        reduced = ops.allreduce_async(grad, None, None, ops.Average).wait()
        if RUNTIME.global_rank() != ctx.root_rank:  # root_rank: a rank of the ring, as Horovod's
            reduced.zero_()
        return reduced, None, None


def _scatter_grad(ctx: Any, grad: torch.Tensor) -> torch.Tensor:
    scale = (RUNTIME.size() if ctx.op == ops.Sum else 1) * ctx.prescale * ctx.postscale
    return grad * scale if scale != 1.0 else grad


class Reducescatter(torch.autograd.Function):
    @staticmethod
    def forward(
        ctx: Any, tensor: torch.Tensor, name: Optional[str], op: int, prescale: float, postscale: float
    ) -> torch.Tensor:
        ctx.scope = current_scope()
        ctx.op, ctx.prescale, ctx.postscale = op, float(prescale), float(postscale)
        return ops.reducescatter_async(tensor, name, op, None, prescale, postscale).wait()

    @staticmethod
    @_scoped
    def backward(ctx: Any, grad: torch.Tensor) -> Tuple[Any, ...]:
        _differentiable(ctx.op, "reducescatter")
        return ops.allgather_async(_scatter_grad(ctx, grad)).wait(), None, None, None, None


class GroupedReducescatter(torch.autograd.Function):
    @staticmethod
    def forward(
        ctx: Any, name: Optional[str], op: int, prescale: float, postscale: float, *tensors: torch.Tensor
    ) -> Tuple[torch.Tensor, ...]:
        ctx.scope = current_scope()
        from .grouped import grouped_reducescatter_async

        ctx.op, ctx.prescale, ctx.postscale = op, float(prescale), float(postscale)
        return tuple(grouped_reducescatter_async(list(tensors), name, op, None, prescale, postscale).wait())

    @staticmethod
    @_scoped
    def backward(ctx: Any, *grads: torch.Tensor) -> Tuple[Any, ...]:
        from .grouped import grouped_allgather_async

        _differentiable(ctx.op, "grouped_reducescatter")
        gathered = grouped_allgather_async([_scatter_grad(ctx, g) for g in grads]).wait()
        return (None, None, None, None) + tuple(gathered)


class Alltoall(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, tensor: torch.Tensor, splits: Any, name: Optional[str]) -> Tuple[torch.Tensor, ...]:
        ctx.scope = current_scope()
        output, received = ops.alltoall_async(tensor, splits, name).wait()
        ctx.received = received
        ctx.mark_non_differentiable(received)
        return output, received

    @staticmethod
    @_scoped
    def backward(ctx: Any, grad: torch.Tensor, _received: Any) -> Tuple[Any, ...]:
        back, _ = ops.alltoall_async(grad.contiguous(), ctx.received).wait()
        return back, None, None


__all__ = [
    "Allreduce",
    "GroupedAllreduce",
    "Allgather",
    "GroupedAllgather",
    "Broadcast",
    "Reducescatter",
    "GroupedReducescatter",
    "Alltoall",
]
