"""The shape exchange behind allgather and alltoall: every rank contributes its
tensor's shape as a fixed-size int64 record, so ranks learn each other's first
dimensions and can tell a trailing-dimension mismatch apart (raised the same on
every rank, naming the tensor)."""
from __future__ import annotations

import ctypes
import struct
import zlib
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


def check_equal(what: str, records: List[Tuple[int, Tuple[int, ...]]]) -> None:
    """All ranks must agree on the whole shape (all-reduce, broadcast,
    reduce-scatter: the engine compares element counts, so a transposed tensor
    would pass it); raises MismatchError naming the tensor and the ranks."""
    shape0 = records[0][1]
    for rank, (_, shape) in enumerate(records):
        if tuple(shape) != tuple(shape0):
            raise MismatchError("%s: shape %s on rank 0 but %s on rank %d (the same number of elements, "
                                "another shape)" % (what, list(shape0), list(shape), rank), "KOLO_ERR_MISMATCH", 30)


def _digest(shape: Sequence[int]) -> int:
    return zlib.crc32(struct.pack("<%dq" % (len(shape) + 1), len(shape), *shape))


def submit_digests(name: bytes, shapes: Sequence[Sequence[int]],
                   runtime: Runtime = RUNTIME) -> Tuple[_core.Request, ctypes.Array]:
    """A group's shape exchange: one digest (CRC-32 of ndim and dims) per member,
    every rank's in one all-gather (`<name>.shape`)."""
    size, count = runtime.size(), len(shapes)
    mine = (ctypes.c_int64 * count)(*[_digest(s) for s in shapes])
    gathered = (ctypes.c_int64 * (count * size))()
    send = _core.View(ctypes.addressof(mine), count, _core.INT64, mine)
    recv = _core.View(ctypes.addressof(gathered), count * size, _core.INT64, gathered)
    return _core.submit_allgather(name + b".shape", send, recv, None, runtime), gathered


def check_digests(what: str, gathered: ctypes.Array, size: int, shapes: Sequence[Sequence[int]],
                  names: Sequence[str]) -> None:
    """Raises MismatchError (on every rank) naming the first member whose shape
    on some rank differs from rank 0's."""
    count = len(shapes)
    for rank in range(1, size):
        for i in range(count):
            if gathered[rank * count + i] != gathered[i]:
                raise MismatchError("%s: tensor '%s' has another shape on rank %d than on rank 0, with the same "
                                    "number of elements (this rank's: %s)" % (what, names[i], rank, list(shapes[i])),
                                    "KOLO_ERR_MISMATCH", 30)


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
