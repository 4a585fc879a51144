"""Outputs whose size only the ring learns (all-gather, all-to-all) land in memory
Python allocates once the size is known: kolo.torch's and kolo's results are the
very tensors and arrays their allocators made (no copy out of a buffer of
libkolo's), the allocator is asked once, for the element count, and not at all
for an empty output; an allocator that raises fails the operation with that
exception as the error's cause. Prints 'OK <checks>'."""
import numpy as np
import torch

import kolo
import kolo.torch as hvd
from kolo import _core
from kolo.errors import KoloError
from kolo.torch import ops

hvd.init()
rank, size = hvd.rank(), hvd.size()
checks = 0


def check(ok: bool, what: str) -> None:
    global checks
    assert ok, "rank %d: %s" % (rank, what)
    checks += 1


def recording(made: list, dtype: torch.dtype) -> _core.Allocator:
    def allocate(count: int):
        flat = torch.empty(count, dtype=dtype)
        made.append((count, flat))
        return flat, flat.data_ptr()

    return allocate


# the ring's total is known only after the counts are exchanged: rank r sends r + 1 rows
rows = torch.arange((rank + 1) * 3, dtype=torch.float64).reshape(rank + 1, 3) + 100 * rank
total = size * (size + 1) // 2
made: list = []
request = _core.submit_allgather(
    b"out.direct",
    ops._view(rows),
    None,
    _core.size_array(size),
    allocate=recording(made, torch.float64),
)
request.result()
check(len(made) == 1 and made[0][0] == total * 3, "asked once, for the element count: %r" % made)
check(request.output is made[0][1], "the output is the allocator's tensor")
want = torch.cat([torch.arange((r + 1) * 3, dtype=torch.float64) + 100 * r for r in range(size)])
check(torch.equal(request.output, want), "all-gather values")

empty: list = []
request = _core.submit_allgather(
    b"out.empty", ops._view(torch.empty(0)), None, None, allocate=recording(empty, torch.float32)
)
request.result()
check(empty == [] and request.output is None, "an empty output asks for nothing")

# the public calls give what their allocators made
gathered = hvd.allgather(rows, name="out.torch")
check(gathered.shape == (total, 3) and torch.equal(gathered.reshape(-1), want), "kolo.torch allgather")
check(gathered._base is not None and gathered._base.dim() == 1, "a view of one flat allocation")
received, splits = hvd.alltoall(torch.full((size * 2, 2), float(rank)), splits=[2] * size, name="out.a2a")
check(splits.tolist() == [2] * size, "alltoall splits")
check(torch.equal(received[:, 0], torch.arange(size).repeat_interleave(2).double().float()), "alltoall rows")
array = kolo.allgather(np.full((rank + 1, 2), rank, dtype=np.int32), name="out.numpy")
check(array.shape == (total, 2) and array.flags.owndata is False and array.base.ndim == 1, "numpy allgather")
check(array[:, 0].tolist() == [r for r in range(size) for _ in range(r + 1)], "numpy allgather values")


# last: rank 0's allocator raises; that fails the operation (and the communicator,
# as libkolo's own allocation failure does) with the Python exception as the
# cause there, and the operation on every other rank
def broken(count: int):
    raise MemoryError("no room for %d elements" % count)


allocate = broken if rank == 0 else recording([], torch.float64)
try:
    _core.submit_allgather(b"out.broken", ops._view(rows), None, None, allocate=allocate).result()
    check(False, "a raising allocator must fail the operation")
except KoloError as error:
    cause = error.__cause__
    check(isinstance(cause, MemoryError) if rank == 0 else cause is None, "the cause: %r" % cause)
print("OK %d" % checks, flush=True)
