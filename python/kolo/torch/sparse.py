"""Sparse gradients (nn.Embedding(sparse=True) and the like), as horovod.torch
reduces them: without sparse_as_dense, every rank's indices and values are
all-gathered (sparse_allreduce_async) and the gathered sparse tensor, whose
repeated indices add up when it is applied, is the sum (or, divided by the
number of ranks, the average); with sparse_as_dense=True the gradient is made
dense, all-reduced, and made sparse again before the update."""
from __future__ import annotations

from typing import Any, Optional, Tuple

import torch

from .. import _core
from .._core import Handle
from .._runtime import RUNTIME
from .compression import Compression
from .ops import Average, Sum, allreduce_into, on_process_set, allgather_async


def _check_sparse(tensor: Any) -> torch.Tensor:
    if not isinstance(tensor, torch.Tensor) or tensor.layout != torch.sparse_coo:
        raise TypeError(
            "kolo: sparse_allreduce_async needs a sparse COO tensor, not %s"
            % (tensor.layout if isinstance(tensor, torch.Tensor) else type(tensor).__name__)
        )
    return tensor


@on_process_set
def sparse_allreduce_async(
    tensor: torch.Tensor, name: Optional[str] = None, op: int = Average, process_set: Any = None
) -> Handle:
    """Starts the all-gather of a sparse tensor's indices and values over the
    ranks (Horovod's sparse all-reduce); synchronize(handle) returns a sparse
    tensor of the same size holding every rank's entries (values divided by
    the number of ranks for Average), uncoalesced."""
    tensor = _check_sparse(tensor)
    if op not in (Sum, Average):
        raise ValueError("kolo: sparse tensors reduce with Sum or Average, not %s" % _core.OP_NAMES[_core.check_op(op)])
    base = _core.op_name("sparse_allreduce", name).decode()
    indices = allgather_async(tensor._indices().t().contiguous(), base + ".indices")
    values = allgather_async(tensor._values().contiguous(), base + ".values")

    def finish() -> torch.Tensor:
        gathered_values = values.wait()
        gathered_indices = indices.wait()
        if op == Average:
            gathered_values = gathered_values / RUNTIME.size()
        return torch.sparse_coo_tensor(gathered_indices.t(), gathered_values, tensor.size())

    return Handle(indices.requests + values.requests, finish, "sparse_allreduce %s" % base)


def submit_gradient(
    grad: torch.Tensor, name: str, op: int, sparse_as_dense: bool, compression: Any = Compression.none
) -> Tuple[Handle, None, None]:
    """DistributedOptimizer's reduction of a sparse gradient: the handle's
    output is the reduced gradient, sparse. Densified, it is compressed as
    dense gradients are."""
    if sparse_as_dense:
        dense, ctx = compression.compress(grad.to_dense().contiguous())
        inner = allreduce_into(dense, dense, _core.check_name(name), op, 1.0, 1.0)
        return (
            Handle(
                inner.requests, lambda: compression.decompress(inner.wait(), ctx).to_sparse(), "allreduce %s" % name
            ),
            None,
            None,
        )
    return sparse_allreduce_async(grad, name, op), None, None


__all__ = ["sparse_allreduce_async"]
