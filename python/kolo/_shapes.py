"""The shape exchange behind allgather and alltoall: every rank contributes its
tensor's shape as a fixed-size int64 record, so ranks learn each other's first
dimensions and can tell a trailing-dimension mismatch apart (raised the same on
every rank, naming the tensor)."""
from __future__ import annotations

import ctypes
from typing import List, Sequence, Tuple

from . import _core
from ._runtime import RUNTIME, Runtime
from .errors import MismatchError

MAX_DIMS = 16
RECORD = MAX_DIMS + 2  # ndim, dtype, dims


def submit(name: bytes, shape: Sequence[int], dtype: int,
           runtime: Runtime = RUNTIME) -> Tuple[_core.Request, ctypes.Array]:
    """Starts the exchange; returns the request and the buffer that will hold
    every rank's record (size * RECORD int64)."""
    if len(shape) > MAX_DIMS:
        raise ValueError("kolo: tensors of more than %d dimensions are not supported" % MAX_DIMS)
    size = runtime.size()
    mine = (ctypes.c_int64 * RECORD)(len(shape), dtype, *shape)
    gathered = (ctypes.c_int64 * (RECORD * size))()
    send = _core.View(ctypes.addressof(mine), RECORD, _core.INT64, mine)
    recv = _core.View(ctypes.addressof(gathered), RECORD * size, _core.INT64, gathered)
    request = _core.submit_allgather(name + b".shape", send, recv, None, runtime)
    return request, gathered


def decode(gathered: ctypes.Array, size: int) -> List[Tuple[int, Tuple[int, ...]]]:
    """[(dtype, shape)] by rank."""
    out = []
    for r in range(size):
        record = gathered[r * RECORD:(r + 1) * RECORD]
        ndim = record[0]
        out.append((record[1], tuple(record[2:2 + ndim])))
    return out


def check_compatible(what: str, records: List[Tuple[int, Tuple[int, ...]]]) -> None:
    """All ranks must agree on the dtype, the number of dimensions and every
    dimension but the first; raises MismatchError naming the ranks otherwise."""
    dtype0, shape0 = records[0]
    for rank, (dtype, shape) in enumerate(records):
        if dtype != dtype0:
            raise MismatchError("%s: dtype %s on rank 0 but %s on rank %d" %
                                (what, _core.DTYPE_NAMES[dtype0], _core.DTYPE_NAMES[dtype], rank),
                                "KOLO_ERR_MISMATCH", 30)
        if len(shape) != len(shape0) or tuple(shape[1:]) != tuple(shape0[1:]):
            raise MismatchError("%s: shape %s on rank 0 but %s on rank %d (only the first dimension may differ)"
                                % (what, list(shape0), list(shape), rank), "KOLO_ERR_MISMATCH", 30)
