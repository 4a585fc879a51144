"""Collectives over picklable Python objects (broadcast_object, allgather_object),
framework-free: objects are serialised with cloudpickle (plain pickle when it is
absent) and moved as uint8 buffers."""
from __future__ import annotations

import pickle
from typing import Any, List, Optional

import numpy as np

from . import collectives
from ._runtime import RUNTIME

try:
    import cloudpickle as _pickler
except ImportError:  # cloudpickle is optional: lambdas and local classes then fail to pickle
    _pickler = pickle


def dumps(value: Any) -> bytes:
    return _pickler.dumps(value)


def broadcast_object(obj: Any, root_rank: int = 0, name: Optional[str] = None) -> Any:
    """Returns root_rank's obj on every rank."""
    base = name or "broadcast_object"
    if RUNTIME.rank() == root_rank:
        payload = np.frombuffer(dumps(obj), dtype=np.uint8).copy()
        length = np.array([payload.size], dtype=np.int64)
    else:
        payload = None
        length = np.zeros(1, dtype=np.int64)
    collectives.broadcast_(length, root_rank, name=base + ".length")
    if payload is None:
        payload = np.empty(int(length[0]), dtype=np.uint8)
    collectives.broadcast_(payload, root_rank, name=base + ".data")
    if RUNTIME.rank() == root_rank:
        return obj
    return pickle.loads(payload.tobytes())


def allgather_object(obj: Any, name: Optional[str] = None) -> List[Any]:
    """Every rank's obj, in rank order."""
    base = name or "allgather_object"
    payload = np.frombuffer(dumps(obj), dtype=np.uint8)
    lengths = collectives.allgather(np.array([payload.size], dtype=np.int64), name=base + ".length")
    data = collectives.allgather(payload, name=base + ".data")
    out, offset = [], 0
    for length in lengths.tolist():
        out.append(pickle.loads(data[offset : offset + length].tobytes()))
        offset += length
    return out
