"""horovod.torch's grouped all-gather and reduce-scatter: a list of tensors in one
call, member i named `<name>.<i>` (so ranks pair them by position), each
member's result as its single-tensor form gives it. Differentiable as the
single forms (autograd.GroupedAllgather, autograd.GroupedReducescatter)."""
from __future__ import annotations

from typing import Any, List, Optional, Sequence

import torch

from .. import _core
from .._core import Handle
from . import autograd
from .compression import Compression, Compressor
from .ops import Average, on_process_set, check_tensor, allgather_async, reducescatter_async


def _members(tensors: Sequence[torch.Tensor], kind: str) -> List[torch.Tensor]:
    if isinstance(tensors, torch.Tensor) or not isinstance(tensors, (list, tuple)):
        raise TypeError("kolo: %s needs a list of tensors, not %s" % (kind, type(tensors).__name__))
    return [check_tensor(t) for t in tensors]


def _combine(handles: List[Handle], what: str) -> Handle:
    requests = [r for h in handles for r in h.requests]
    return Handle(requests, lambda: [h.wait() for h in handles], what)


@on_process_set
def grouped_allgather_async(
    tensors: Sequence[torch.Tensor], name: Optional[str] = None, process_set: Any = None
) -> Handle:
    """Starts an all-gather of every tensor of the list (dim 0 may differ by rank);
    synchronize(handle) returns the list of gathered tensors."""
    members = _members(tensors, "grouped_allgather")
    group = _core.op_name("grouped_allgather", name).decode()
    return _combine(
        [allgather_async(t, "%s.%d" % (group, i)) for i, t in enumerate(members)], "grouped_allgather %s" % group
    )


@on_process_set
def grouped_allgather(
    tensors: Sequence[torch.Tensor], name: Optional[str] = None, process_set: Any = None
) -> List[torch.Tensor]:
    """Every tensor of the list concatenated over ranks along dim 0; differentiable."""
    members = _members(tensors, "grouped_allgather")
    if torch.is_grad_enabled() and any(t.requires_grad for t in members):
        return list(autograd.GroupedAllgather.apply(name, *members))
    return grouped_allgather_async(members, name).wait()


@on_process_set
def grouped_reducescatter_async(
    tensors: Sequence[torch.Tensor],
    name: Optional[str] = None,
    op: int = Average,
    process_set: Any = None,
    prescale_factor: float = 1.0,
    postscale_factor: float = 1.0,
) -> Handle:
    """Starts a reduce-scatter of every tensor of the list; synchronize(handle)
    returns the list of this rank's shares."""
    members = _members(tensors, "grouped_reducescatter")
    group = _core.op_name("grouped_reducescatter", name).decode()
    return _combine(
        [
            reducescatter_async(t, "%s.%d" % (group, i), op, None, prescale_factor, postscale_factor)
            for i, t in enumerate(members)
        ],
        "grouped_reducescatter %s" % group,
    )


@on_process_set
def grouped_reducescatter(
    tensors: Sequence[torch.Tensor],
    name: Optional[str] = None,
    compression: Compressor = Compression.none,
    op: int = Average,
    process_set: Any = None,
    prescale_factor: float = 1.0,
    postscale_factor: float = 1.0,
) -> List[torch.Tensor]:
    """op(t * prescale) * postscale over ranks for every tensor t of the list,
    rank r keeping its share of dim 0; differentiable for Sum and Average."""
    compressed = [compression.compress(t) for t in _members(tensors, "grouped_reducescatter")]
    inputs = [c for c, _ in compressed]
    if torch.is_grad_enabled() and any(t.requires_grad for t in inputs):
        reduced = list(
            autograd.GroupedReducescatter.apply(name, _core.check_op(op), prescale_factor, postscale_factor, *inputs)
        )
    else:
        reduced = grouped_reducescatter_async(inputs, name, op, None, prescale_factor, postscale_factor).wait()
    return [compression.decompress(r, ctx) for r, (_, ctx) in zip(reduced, compressed)]


__all__ = ["grouped_allgather", "grouped_allgather_async", "grouped_reducescatter", "grouped_reducescatter_async"]
