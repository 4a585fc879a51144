"""Whole-model helpers of kolo.torch (horovod.torch's names): broadcast a
model's parameters or an optimizer's state from one rank, and move arbitrary
picklable objects."""
from __future__ import annotations

import collections.abc
import io
from typing import Any, Iterable, List, Mapping, Optional, Tuple, Union

import torch

from .. import _core, objects
from .._runtime import RUNTIME
from ..process_sets import entered, root_in_set
from .ops import check_tensor, broadcast_async_

Params = Union[Mapping[str, torch.Tensor], Iterable[Tuple[str, torch.Tensor]]]


def broadcast_parameters(params: Params, root_rank: int = 0, process_set: Any = None) -> None:
    """Overwrites every tensor of params (a model's state_dict(), or
    named_parameters()) in place with root_rank's values."""
    if isinstance(params, collections.abc.Mapping):
        items = sorted(params.items())
    elif isinstance(params, collections.abc.Iterable):
        items = list(params)
        if any(not isinstance(item, tuple) or len(item) != 2 for item in items):
            raise ValueError("kolo: broadcast_parameters needs a state_dict or a list of (name, tensor) pairs")
    else:
        raise ValueError(
            "kolo: broadcast_parameters needs a state_dict or named_parameters(), not %s" % type(params).__name__
        )
    _core.check_root(root_rank, RUNTIME.global_size())
    handles = []
    for name, tensor in items:
        if tensor is None:
            continue
        tensor = check_tensor(tensor)
        target = tensor.data if isinstance(tensor, torch.nn.Parameter) else tensor
        handles.append(
            broadcast_async_(target, root_rank, name="broadcast_parameters.%s" % name, process_set=process_set)
        )
    for handle in handles:
        handle.wait()


def _serialise(value: Any) -> bytes:
    buffer = io.BytesIO()
    torch.save(value, buffer)
    return buffer.getvalue()


def broadcast_optimizer_state(optimizer: torch.optim.Optimizer, root_rank: int = 0, process_set: Any = None) -> None:
    """Makes every rank's optimizer state (per-parameter buffers such as momentum,
    and every param group's hyper-parameters) equal to root_rank's; ranks whose
    optimizer has not stepped yet get the state created."""
    if not isinstance(optimizer, torch.optim.Optimizer):
        raise TypeError(
            "kolo: broadcast_optimizer_state needs a torch.optim.Optimizer, not %s" % type(optimizer).__name__
        )
    if isinstance(optimizer, torch.optim.LBFGS):
        raise ValueError("kolo: cannot broadcast torch.optim.LBFGS state")
    _core.check_root(root_rank, RUNTIME.global_size())
    with entered(process_set):  # within a set, root_rank (a ring rank) becomes the set's rank
        root = root_in_set(root_rank)
        state = optimizer.state_dict() if RUNTIME.rank() == root else None
        data = objects.broadcast_object(
            _serialise(state) if state is not None else None, root, name="broadcast_optimizer_state"
        )
        if RUNTIME.rank() != root:
            loaded = torch.load(io.BytesIO(data))
            optimizer.load_state_dict(loaded)


def broadcast_object(obj: Any, root_rank: int = 0, name: Optional[str] = None, process_set: Any = None) -> Any:
    """root_rank's obj (anything cloudpickle can serialise) on every rank (of process_set)."""
    _core.check_root(root_rank, RUNTIME.global_size())
    with entered(process_set):
        return objects.broadcast_object(obj, root_in_set(root_rank), name)


def allgather_object(obj: Any, name: Optional[str] = None, process_set: Any = None) -> List[Any]:
    """Every rank's obj (of process_set), in rank order."""
    with entered(process_set):
        return objects.allgather_object(obj, name)


__all__ = ["broadcast_parameters", "broadcast_optimizer_state", "broadcast_object", "allgather_object"]
