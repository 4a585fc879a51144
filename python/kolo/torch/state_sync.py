"""kolo.torch.state_sync: TorchState.sync()'s optimizer part, every tensor broadcast in
place over the ring instead of rank 0's torch.save of the whole state dict sent as one
pickled object.

A newcomer (or a survivor whose last commit is older than rank 0's) takes rank 0's
optimizer state: rank 0 broadcasts only its layout (per parameter: the state's keys, each
tensor's shape and dtype, the values that are not tensors; the param groups'
hyper-parameters), every rank makes its state match that layout (allocating what it
lacks: a newcomer's optimizer has no state before its first step), then every tensor is
broadcast in place from rank 0 with the engine's asynchronous broadcasts (no pickling,
no copy through Python bytes), so the joiner's state equals rank 0's bit for bit.

TorchState.sync() sends the model's and the optimizer's host tensors through
sync_in_place (issue 28): one kolo_sync_buffers call in which each rank digests its
tensors and only the ranks whose bytes differ from rank 0's receive them, each from the
nearest rank before it that holds rank 0's bytes (docs/ELASTIC.md, "Training state").
"""
from __future__ import annotations

import ctypes
from typing import Any, Dict, List, Tuple

import torch

from ..objects import broadcast_object
from .._runtime import RUNTIME, lib
from .ops import broadcast_async_

Layout = Dict[str, Any]


def _layout(optimizer: torch.optim.Optimizer) -> Layout:
    """Rank 0's optimizer state without the tensors' values."""
    params = [p for group in optimizer.param_groups for p in group["params"]]
    states: List[Dict[str, Any]] = []
    for p in params:
        entry: Dict[str, Any] = {}
        for key, value in optimizer.state.get(p, {}).items():
            if isinstance(value, torch.Tensor):  # (Adam's "step" lives on the CPU next to a GPU parameter)
                entry[key] = (
                    "tensor",
                    tuple(value.shape),
                    str(value.dtype).replace("torch.", ""),
                    value.device == p.device,
                )
            else:
                entry[key] = ("value", value)
        states.append(entry)
    groups = [{k: v for k, v in group.items() if k != "params"} for group in optimizer.param_groups]
    return {"count": len(params), "states": states, "groups": groups}


def _match(optimizer: torch.optim.Optimizer, layout: Layout) -> List[Tuple[str, torch.Tensor]]:
    """Makes this rank's optimizer state take layout (values not tensors copied, tensors
    allocated where missing or of another shape); returns the tensors to receive."""
    params = [p for group in optimizer.param_groups for p in group["params"]]
    if len(params) != layout["count"] or len(optimizer.param_groups) != len(layout["groups"]):
        raise ValueError(
            "kolo: rank 0's optimizer has %d parameters in %d groups, this rank's %d in %d"
            % (layout["count"], len(layout["groups"]), len(params), len(optimizer.param_groups))
        )
    for group, saved in zip(optimizer.param_groups, layout["groups"]):
        group.update(saved)
    tensors: List[Tuple[str, torch.Tensor]] = []
    for index, (p, entry) in enumerate(zip(params, layout["states"])):
        if not entry:
            optimizer.state.pop(p, None)
            continue
        state = optimizer.state[p]
        for key in [k for k in state if k not in entry]:
            del state[key]
        for key, (kind, *rest) in entry.items():
            if kind == "value":
                state[key] = rest[0]
                continue
            shape, dtype, with_param = rest
            dtype = getattr(torch, dtype)
            device = p.device if with_param else torch.device("cpu")
            live = state.get(key)
            if (
                not isinstance(live, torch.Tensor)
                or tuple(live.shape) != tuple(shape)
                or live.dtype != dtype
                or live.device != device
            ):
                live = torch.empty(shape, dtype=dtype, device=device)
                state[key] = live
            tensors.append(("%d.%s" % (index, key), live))
    return tensors


def optimizer_tensors_to_sync(optimizer: torch.optim.Optimizer, root_rank: int = 0) -> List[Tuple[str, torch.Tensor]]:
    """Takes root_rank's optimizer layout (one small object) and returns the state's
    tensors, allocated where missing, whose values must then become root_rank's."""
    layout = broadcast_object(
        _layout(optimizer) if RUNTIME.rank() == root_rank else None, root_rank, name="kolo.state_sync.layout"
    )
    return _match(optimizer, layout)


def sync_in_place(tensors: List[Tuple[str, torch.Tensor]]) -> None:
    """Makes every tensor rank 0's. The host tensors go in one kolo_sync_buffers call:
    each rank digests them, and a tensor goes only to the ranks whose bytes differ
    from rank 0's (a newcomer, a survivor on another commit), each from the nearest
    rank before it that holds rank 0's bytes, not from rank 0 around the whole ring;
    on one host (unless KOLO_STATE_SYNC=sources) or with KOLO_STATE_SYNC=root, libkolo
    takes the old broadcast. Device tensors are broadcast from rank 0 in place."""
    host = [t for _, t in tensors if t.device.type == "cpu" and t.is_contiguous()]
    others = [(n, t) for n, t in tensors if not (t.device.type == "cpu" and t.is_contiguous())]
    handles = [broadcast_async_(t, 0, name="kolo.state_sync.%s" % n) for n, t in others]
    for handle in handles:  # done before the host call, so every rank runs them in one order
        handle.wait()
    if host:
        count = len(host)
        buffers = (ctypes.c_void_p * count)(*[t.data_ptr() if t.numel() else None for t in host])
        sizes = (ctypes.c_size_t * count)(*[t.numel() * t.element_size() for t in host])
        comm = RUNTIME.require()
        RUNTIME.check(lib.kolo_sync_buffers(comm, buffers, sizes, count, None), "kolo: TorchState.sync")


def broadcast_optimizer_state_in_place(optimizer: torch.optim.Optimizer, root_rank: int = 0) -> None:
    """Makes every rank's optimizer state equal to root_rank's: the layout as one small
    object, then each tensor broadcast in place."""
    layout = broadcast_object(
        _layout(optimizer) if RUNTIME.rank() == root_rank else None, root_rank, name="kolo.state_sync.layout"
    )
    tensors = _match(optimizer, layout)
    handles = [broadcast_async_(tensor, root_rank, name="kolo.state_sync.%s" % name) for name, tensor in tensors]
    for handle in handles:
        handle.wait()


__all__ = ["broadcast_optimizer_state_in_place", "optimizer_tensors_to_sync", "sync_in_place"]
