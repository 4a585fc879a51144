"""kolo's framework-free collectives: numpy arrays and any writable buffer
(bytearray, memoryview, array.array), passed to libkolo by pointer. Same names
and semantics as kolo.torch, so a numpy-only script (or a framework kolo has no
module for) uses the same calls. Out-of-place calls return new numpy arrays;
the `_` forms work in place and need C-contiguous writable memory."""
from __future__ import annotations

from typing import Any, List, Optional, Sequence, Tuple

import numpy as np

from . import _core, _shapes
from ._core import Handle
from ._runtime import RUNTIME

_DTYPES = {
    np.dtype(np.uint8): _core.UINT8,
    np.dtype(np.int32): _core.INT32,
    np.dtype(np.int64): _core.INT64,
    np.dtype(np.float16): _core.FLOAT16,
    np.dtype(np.float32): _core.FLOAT32,
    np.dtype(np.float64): _core.FLOAT64,
    np.dtype(np.int8): _core.INT8,
    np.dtype(np.int16): _core.INT16,
    np.dtype(np.bool_): _core.BOOL,
}
_NUMPY = {code: dtype for dtype, code in _DTYPES.items()}


def as_array(value: Any, writable: bool = False) -> np.ndarray:
    """A numpy view of an array or buffer (no copy); TypeError for anything else."""
    if isinstance(value, np.ndarray):
        array = value
    else:
        try:
            array = np.asarray(memoryview(value))
        except TypeError:
            raise TypeError("kolo: expected a numpy array or a buffer, not %s" % type(value).__name__) from None
    if array.dtype not in _DTYPES:
        raise TypeError(
            "kolo: dtype %s is not supported (bool, uint8, int8, int16, int32, int64, float16, "
            "float32, float64)" % array.dtype
        )
    if writable and not array.flags.writeable:
        raise ValueError("kolo: an in-place operation needs writable memory")
    return array


def _view(array: np.ndarray) -> _core.View:
    if not array.flags.c_contiguous:
        raise ValueError("kolo: an in-place operation needs a C-contiguous array (use np.ascontiguousarray)")
    return _core.View(array.ctypes.data if array.size else 0, int(array.size), _DTYPES[array.dtype], array)


def _allocate_flat(dtype: np.dtype) -> _core.Allocator:
    """An output of count elements that libkolo writes into directly, made once
    the ring knows count (all-gather, all-to-all)."""

    def allocate(count: int) -> Tuple[np.ndarray, int]:
        flat = np.empty(count, dtype=dtype)
        return flat, flat.ctypes.data

    return allocate


def _output(request: _core.Request, dtype: np.dtype) -> np.ndarray:
    """What _allocate_flat made for request (nothing was asked for an empty output)."""
    return request.output if request.output is not None else np.empty(0, dtype)


def _contiguous(value: Any) -> np.ndarray:
    return np.ascontiguousarray(as_array(value))


# ---- all-reduce ----


def allreduce_async_(array: Any, op: int = _core.AVG, name: Optional[str] = None) -> Handle:
    """Starts an in-place all-reduce; synchronize(handle) returns the array."""
    target = as_array(array, writable=True)
    op = _core.check_op(op)
    view = _view(target)
    request = _core.submit_allreduce(_core.op_name("allreduce", name), view, view, op)
    return Handle([request], lambda: target, "allreduce")


def allreduce_(array: Any, op: int = _core.AVG, name: Optional[str] = None) -> np.ndarray:
    return allreduce_async_(array, op, name).wait()


def allreduce_async(array: Any, op: int = _core.AVG, name: Optional[str] = None) -> Handle:
    """Starts an all-reduce into a new array."""
    source = _contiguous(array)
    output = np.empty_like(source)
    op = _core.check_op(op)
    request = _core.submit_allreduce(_core.op_name("allreduce", name), _view(source), _view(output), op)
    return Handle([request], lambda: output, "allreduce")


def allreduce(array: Any, op: int = _core.AVG, name: Optional[str] = None) -> np.ndarray:
    return allreduce_async(array, op, name).wait()


def grouped_allreduce(arrays: Sequence[Any], op: int = _core.AVG, name: Optional[str] = None) -> List[np.ndarray]:
    """All-reduces a list of arrays of one dtype as one fused unit; new arrays."""
    sources = [_contiguous(a) for a in arrays]
    if not sources:
        return []
    if len({s.dtype for s in sources}) != 1:
        raise TypeError("kolo: grouped_allreduce needs arrays of one dtype")
    outputs = [np.empty_like(s) for s in sources]
    group = _core.op_name("grouped_allreduce", name)
    names = [group + b".%d" % i for i in range(len(sources))]
    requests = _core.submit_grouped_allreduce(
        group, names, [_view(s) for s in sources], [_view(o) for o in outputs], _core.check_op(op)
    )
    return Handle(requests, lambda: outputs, "grouped_allreduce").wait()


# ---- all-gather ----


def allgather_async(array: Any, name: Optional[str] = None) -> Handle:
    """Concatenates every rank's array along the first dimension (which may
    differ by rank; the other dimensions must match)."""
    source = _contiguous(array)
    if source.ndim == 0:
        source = source.reshape(1)
    raw = _core.op_name("allgather", name)
    size = RUNTIME.size()
    shape_request, gathered = _shapes.submit(raw, source.shape, _DTYPES[source.dtype])
    what = "allgather %s" % raw.decode()

    def build(data: np.ndarray) -> np.ndarray:
        records = _shapes.decode(gathered, size)
        _shapes.check_compatible(what, records)
        return data.reshape((sum(_shapes.rows(records)),) + source.shape[1:])

    counts = _core.size_array(size)
    data_request = _core.submit_allgather(raw, _view(source), None, counts, allocate=_allocate_flat(source.dtype))

    def finish() -> np.ndarray:
        return build(_output(data_request, source.dtype))

    return Handle([shape_request, data_request], finish, what)


def allgather(array: Any, name: Optional[str] = None) -> np.ndarray:
    return allgather_async(array, name).wait()


# ---- broadcast ----


def broadcast_async_(array: Any, root_rank: int, name: Optional[str] = None) -> Handle:
    target = as_array(array, writable=True)
    root = _core.check_root(root_rank, RUNTIME.size())
    request = _core.submit_broadcast(_core.op_name("broadcast", name), _view(target), root)
    return Handle([request], lambda: target, "broadcast")


def broadcast_(array: Any, root_rank: int, name: Optional[str] = None) -> np.ndarray:
    return broadcast_async_(array, root_rank, name).wait()


def broadcast_async(array: Any, root_rank: int, name: Optional[str] = None) -> Handle:
    return broadcast_async_(np.array(as_array(array), copy=True, order="C"), root_rank, name)


def broadcast(array: Any, root_rank: int, name: Optional[str] = None) -> np.ndarray:
    return broadcast_async(array, root_rank, name).wait()


# ---- reduce-scatter, all-to-all ----


def reducescatter_async(array: Any, op: int = _core.AVG, name: Optional[str] = None) -> Handle:
    """Reduces over ranks and gives rank r its share of the first dimension
    (the first d0 % size ranks get one row more)."""
    source = _contiguous(array)
    if source.ndim == 0:
        raise ValueError("kolo: reducescatter needs at least one dimension")
    size, rank = RUNTIME.size(), RUNTIME.rank()
    rows = _core.split_counts(source.shape[0], size)
    row = int(np.prod(source.shape[1:], dtype=np.int64))
    output = np.empty((rows[rank],) + source.shape[1:], source.dtype)
    request = _core.submit_reducescatter(
        _core.op_name("reducescatter", name), _view(source), _view(output), [n * row for n in rows], _core.check_op(op)
    )
    return Handle([request], lambda: output, "reducescatter")


def reducescatter(array: Any, op: int = _core.AVG, name: Optional[str] = None) -> np.ndarray:
    return reducescatter_async(array, op, name).wait()


def alltoall_async(array: Any, splits: Optional[Sequence[int]] = None, name: Optional[str] = None) -> Handle:
    """Sends splits[r] rows of the first dimension to rank r (an even split by
    default); the result is what every rank sent here, in rank order."""
    source = _contiguous(array)
    if source.ndim == 0:
        raise ValueError("kolo: alltoall needs at least one dimension")
    size = RUNTIME.size()
    rows = _split_rows(source.shape[0], size, splits)
    row = int(np.prod(source.shape[1:], dtype=np.int64))
    counts = _core.size_array(size)
    raw = _core.op_name("alltoall", name)
    shape_request, gathered = _shapes.submit(raw, source.shape, _DTYPES[source.dtype])
    request = _core.submit_alltoall(
        raw, _view(source), [n * row for n in rows], counts, allocate=_allocate_flat(source.dtype)
    )
    what = "alltoall %s" % raw.decode()

    def finish() -> np.ndarray:
        _shapes.check_compatible(what, _shapes.decode(gathered, size))
        flat = _output(request, source.dtype)
        return flat.reshape((-1,) + source.shape[1:]) if row else flat.reshape((0,) + source.shape[1:])

    return Handle([shape_request, request], finish, what)


def alltoall(array: Any, splits: Optional[Sequence[int]] = None, name: Optional[str] = None) -> np.ndarray:
    return alltoall_async(array, splits, name).wait()


def _split_rows(first_dim: int, size: int, splits: Optional[Sequence[int]]) -> List[int]:
    if splits is None:
        if first_dim % size:
            raise ValueError(
                "kolo: alltoall without splits needs the first dimension (%d) divisible by the "
                "number of ranks (%d)" % (first_dim, size)
            )
        return [first_dim // size] * size
    rows = [int(s) for s in splits]
    if len(rows) != size or any(s < 0 for s in rows) or sum(rows) != first_dim:
        raise ValueError(
            "kolo: alltoall splits %s must be %d non-negative counts summing to %d" % (list(rows), size, first_dim)
        )
    return rows


# ---- synchronisation ----


def barrier() -> None:
    _core.submit_barrier().result()


def join() -> int:
    """This rank has no more data; returns the last rank to join."""
    return _core.submit_join().result().last_rank


def synchronize(handle: Handle) -> Any:
    """Waits for an *_async call and returns its output."""
    if not isinstance(handle, Handle):
        raise TypeError("kolo: synchronize needs a handle from an *_async call, not %s" % type(handle).__name__)
    return handle.wait()


def poll(handle: Handle) -> bool:
    """True once the handle's operation is complete (never blocks)."""
    if not isinstance(handle, Handle):
        raise TypeError("kolo: poll needs a handle from an *_async call, not %s" % type(handle).__name__)
    return handle.poll()


def numpy_dtype(code: int) -> np.dtype:
    return _NUMPY[code]


__all__ = [
    "allreduce",
    "allreduce_",
    "allreduce_async",
    "allreduce_async_",
    "grouped_allreduce",
    "allgather",
    "allgather_async",
    "broadcast",
    "broadcast_",
    "broadcast_async",
    "broadcast_async_",
    "reducescatter",
    "reducescatter_async",
    "alltoall",
    "alltoall_async",
    "barrier",
    "join",
    "synchronize",
    "poll",
    "as_array",
]
