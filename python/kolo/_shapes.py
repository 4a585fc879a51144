"""The shape exchange behind allgather and alltoall: every rank contributes its
tensor's shape as a fixed-size int64 record, so ranks learn each other's first
dimensions and can tell a trailing-dimension mismatch apart (raised the same on
every rank, naming the tensor)."""
from __future__ import annotations

import ctypes
import struct
import zlib
from typing import List, Optional, Sequence, Tuple

from . import _core
from ._runtime import RUNTIME, Runtime
from .errors import MismatchError

MAX_DIMS = 16
RECORD = MAX_DIMS + 2  # ndim, dtype, dims


Gathered = Tuple[ctypes.Array, ctypes.Array]  # every rank's records, and each rank's element count


def _exchange(name: bytes, values: Sequence[int], runtime: Runtime) -> Tuple[_core.Request, Gathered]:
    size, count = runtime.size(), len(values)
    mine = (ctypes.c_int64 * count)(*values)
    gathered = (ctypes.c_int64 * (count * size))()
    counts = _core.size_array(size)
    send = _core.View(ctypes.addressof(mine), count, _core.INT64, mine)
    recv = _core.View(ctypes.addressof(gathered), count * size, _core.INT64, gathered)
    return _core.submit_allgather(name + b".shape", send, recv, counts, runtime), (gathered, counts)


def _by_rank(gathered: Gathered, size: int) -> List[Optional[List[int]]]:
    """Each rank's values; None for a rank that gave none (one that joined:
    join() takes part in the others' operations with nothing)."""
    values, counts = gathered
    out: List[Optional[List[int]]] = []
    offset = 0
    for r in range(size):
        out.append(list(values[offset : offset + counts[r]]) if counts[r] else None)
        offset += counts[r]
    return out


def submit(name: bytes, shape: Sequence[int], dtype: int, runtime: Runtime = RUNTIME) -> Tuple[_core.Request, Gathered]:
    """Starts the exchange of this rank's (dtype, shape) record; returns the
    request and what decode() reads every rank's record from."""
    if len(shape) > MAX_DIMS:
        raise ValueError("kolo: tensors of more than %d dimensions are not supported" % MAX_DIMS)
    return _exchange(name, [len(shape), dtype, *shape] + [0] * (MAX_DIMS - len(shape)), runtime)


def decode(gathered: Gathered, size: int) -> List[Optional[Tuple[int, Tuple[int, ...]]]]:
    """[(dtype, shape)] by rank; None for a rank that joined."""
    out: List[Optional[Tuple[int, Tuple[int, ...]]]] = []
    for record in _by_rank(gathered, size):
        out.append(None if record is None else (record[1], tuple(record[2 : 2 + record[0]])))
    return out


def rows(records: List[Optional[Tuple[int, Tuple[int, ...]]]]) -> List[int]:
    """Each rank's first dimension (0 for a joined rank)."""
    return [record[1][0] if record is not None else 0 for record in records]


def check_equal(what: str, records: List[Optional[Tuple[int, Tuple[int, ...]]]]) -> None:
    """All ranks (joined ones aside) must agree on the whole shape (all-reduce,
    broadcast, reduce-scatter: the engine compares element counts, so a
    transposed tensor would pass it); raises MismatchError naming the tensor
    and the ranks."""
    present = [(rank, record[1]) for rank, record in enumerate(records) if record is not None]
    first, shape0 = present[0]
    for rank, shape in present[1:]:
        if tuple(shape) != tuple(shape0):
            raise MismatchError(
                "%s: shape %s on rank %d but %s on rank %d (the same number of elements, "
                "another shape)" % (what, list(shape0), first, list(shape), rank),
                "KOLO_ERR_MISMATCH",
            )


def _digest(shape: Sequence[int]) -> int:
    return zlib.crc32(struct.pack("<%dq" % (len(shape) + 1), len(shape), *shape))


def submit_digests(
    name: bytes, shapes: Sequence[Sequence[int]], runtime: Runtime = RUNTIME
) -> Tuple[_core.Request, Gathered]:
    """A group's shape exchange: one digest (CRC-32 of ndim and dims) per member,
    every rank's in one all-gather (`<name>.shape`)."""
    return _exchange(name, [_digest(s) for s in shapes], runtime)


def check_digests(
    what: str, gathered: Gathered, size: int, shapes: Sequence[Sequence[int]], names: Sequence[str]
) -> None:
    """Raises MismatchError (on every rank) naming the first member whose shape
    on some rank differs from the first rank's (joined ranks aside)."""
    present = [(rank, digests) for rank, digests in enumerate(_by_rank(gathered, size)) if digests is not None]
    for rank, digests in present[1:]:
        for i, (digest, first) in enumerate(zip(digests, present[0][1])):
            if digest != first:
                raise MismatchError(
                    "%s: tensor '%s' has another shape on rank %d than on rank %d, with the same "
                    "number of elements (this rank's: %s)" % (what, names[i], rank, present[0][0], list(shapes[i])),
                    "KOLO_ERR_MISMATCH",
                )


def check_compatible(what: str, records: List[Optional[Tuple[int, Tuple[int, ...]]]]) -> None:
    """All ranks (joined ones aside) must agree on the dtype, the number of
    dimensions and every dimension but the first; raises MismatchError naming
    the ranks otherwise."""
    present = [(rank, record) for rank, record in enumerate(records) if record is not None]
    first, (dtype0, shape0) = present[0]
    for rank, (dtype, shape) in present:
        if dtype != dtype0:
            raise MismatchError(
                "%s: dtype %s on rank %d but %s on rank %d"
                % (what, _core.DTYPE_NAMES[dtype0], first, _core.DTYPE_NAMES[dtype], rank),
                "KOLO_ERR_MISMATCH",
            )
        if len(shape) != len(shape0) or tuple(shape[1:]) != tuple(shape0[1:]):
            raise MismatchError(
                "%s: shape %s on rank %d but %s on rank %d (only the first dimension may differ)"
                % (what, list(shape0), first, list(shape), rank),
                "KOLO_ERR_MISMATCH",
            )
