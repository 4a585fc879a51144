"""Every kolo.torch and kolo (numpy) collective on every dtype, checked against a
single-process reference computed from every rank's (deterministic) inputs.
Run as N ranks; prints 'CHECKS <n>' and exits 0 when every check passed."""
import sys

import numpy as np
import torch

import kolo
import kolo.torch as hvd

DTYPES = [torch.bool, torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64, torch.float16, torch.bfloat16,
          torch.float32, torch.float64]
OPS = {"Sum": hvd.Sum, "Average": hvd.Average, "Min": hvd.Min, "Max": hvd.Max, "Product": hvd.Product}
SIZES = [1, 7, 33, 100_003]  # the last one is over the shared-memory threshold in bytes for 4-byte types

hvd.init()
rank, size = hvd.rank(), hvd.size()
checks = 0


def data(r, n, dtype, op="Sum"):
    base = torch.arange(n, dtype=torch.int64)
    if op == "Product":
        values = (base + r) % 2 + 1
    else:
        values = (base * 3 + r * 5) % 11
    return values.to(dtype)


def reference(op, n, dtype):
    inputs = [data(r, n, dtype, op).to(torch.float64) for r in range(size)]
    stacked = torch.stack(inputs)
    if op == "Sum":
        out = stacked.sum(0)
    elif op == "Average":
        out = stacked.sum(0)
        out = torch.div(out, size, rounding_mode="floor") if not dtype.is_floating_point else out / size
    elif op == "Min":
        out = stacked.min(0).values
    elif op == "Max":
        out = stacked.max(0).values
    else:
        out = stacked.prod(0)
    return out.to(dtype)


def check(what, got, want):
    global checks
    if got.dtype != want.dtype or got.shape != want.shape:
        raise AssertionError("%s: got %s %s, want %s %s" % (what, got.dtype, tuple(got.shape), want.dtype,
                                                            tuple(want.shape)))
    tolerance = {torch.float16: 1e-2, torch.bfloat16: 5e-2}.get(want.dtype, 1e-6)
    if want.dtype.is_floating_point:
        ok = torch.allclose(got.double(), want.double(), rtol=tolerance, atol=tolerance)
    else:
        ok = torch.equal(got, want)
    if not ok:
        diff = (got.double() - want.double()).abs()
        index = int(diff.argmax())
        raise AssertionError("%s: element %d is %s, want %s" % (what, index, got.flatten()[index].item(),
                                                                 want.flatten()[index].item()))
    checks += 1


# ---- all-reduce: every op x dtype x size, out of place, in place, async ----
for dtype in DTYPES:
    for n in SIZES:
        for op_name, op in OPS.items():
            if dtype == torch.bool and op_name == "Average":  # bools reduce as any/all; no average
                try:
                    hvd.allreduce(data(rank, n, dtype), op=op)
                except ValueError:
                    checks += 1
                    continue
                raise AssertionError("a bool Average was accepted")
            want = reference(op_name, n, dtype)
            tensor = data(rank, n, dtype, op_name)
            check("allreduce %s %s n=%d" % (op_name, dtype, n), hvd.allreduce(tensor, op=op), want)
            check("allreduce input untouched", tensor, data(rank, n, dtype, op_name))
            in_place = data(rank, n, dtype, op_name)
            returned = hvd.allreduce_(in_place, op=op)
            check("allreduce_ %s %s n=%d" % (op_name, dtype, n), in_place, want)
            assert returned is in_place
        handles = [hvd.allreduce_async(data(rank, n, dtype), op=hvd.Sum, name="async.%s.%d.%d" % (dtype, n, i))
                   for i in range(3)]
        for handle in handles:
            check("allreduce_async %s n=%d" % (dtype, n), hvd.synchronize(handle), reference("Sum", n, dtype))
            assert hvd.poll(handle)

# the deprecated average flag, pre/postscale
t = data(rank, 64, torch.float32)
check("average=False", hvd.allreduce(t, average=False), reference("Sum", 64, torch.float32))
check("prescale/postscale", hvd.allreduce(t, op=hvd.Sum, prescale_factor=0.5, postscale_factor=4.0),
      reference("Sum", 64, torch.float32) * 2.0)
check("fp16 compression", hvd.allreduce(t, op=hvd.Sum, compression=hvd.Compression.fp16),
      reference("Sum", 64, torch.float32))

# autograd through allreduce: d(sum(allreduce_sum(x)))/dx = size
x = torch.ones(5, requires_grad=True)
hvd.allreduce(x, op=hvd.Sum).sum().backward()
check("allreduce gradient", x.grad, torch.full((5,), float(size)))

# ---- grouped all-reduce, mixed dtypes ----
group = [data(rank, n, dtype) for dtype, n in [(torch.float32, 10), (torch.float64, 100_003), (torch.int32, 5),
                                               (torch.float32, 3)]]
for got, (dtype, n) in zip(hvd.grouped_allreduce(group, op=hvd.Sum),
                           [(torch.float32, 10), (torch.float64, 100_003), (torch.int32, 5), (torch.float32, 3)]):
    check("grouped_allreduce %s" % dtype, got, reference("Sum", n, dtype))
in_place = [data(rank, 9, torch.float32), data(rank, 4, torch.float32)]
hvd.grouped_allreduce_(in_place, op=hvd.Max)
check("grouped_allreduce_", in_place[1], reference("Max", 4, torch.float32))

# ---- all-gather: first dimension differs by rank ----
for dtype in DTYPES:
    for rows in (1, 3, 5000):
        tensor = (data(rank, (rank + rows) * 3, dtype)).reshape(rank + rows, 3)
        want = torch.cat([data(r, (r + rows) * 3, dtype).reshape(r + rows, 3) for r in range(size)])
        check("allgather %s rows=%d" % (dtype, rows), hvd.allgather(tensor), want)
check("allgather scalar", hvd.allgather(torch.tensor(float(rank))), torch.arange(size, dtype=torch.float32))
check("allgather async", hvd.synchronize(hvd.allgather_async(torch.full((2,), rank))),
      torch.arange(size).repeat_interleave(2))
y = torch.ones(2, 2, requires_grad=True)
(hvd.allgather(y) * 2).sum().backward()
check("allgather gradient", y.grad, torch.full((2, 2), 2.0))  # horovod: averaged over ranks

# ---- broadcast from every root ----
for dtype in DTYPES:
    for root in range(size):
        for n in (3, 100_003):
            want = data(root, n, dtype)
            check("broadcast %s root=%d" % (dtype, root), hvd.broadcast(data(rank, n, dtype), root), want)
            buffer = data(rank, n, dtype)
            hvd.broadcast_(buffer, root_rank=root)
            check("broadcast_ %s root=%d" % (dtype, root), buffer, want)
check("broadcast_async_", hvd.synchronize(hvd.broadcast_async_(torch.full((4,), rank), size - 1)),
      torch.full((4,), size - 1))

# ---- reduce-scatter ----
for dtype in DTYPES:
    for rows in (size * 2, size * 2 + 1, 1):
        if rows % size and not kolo.engine_available():
            continue
        tensor = data(rank, rows * 4, dtype).reshape(rows, 4)
        full = reference("Sum", rows * 4, dtype).reshape(rows, 4)
        base, extra = divmod(rows, size)
        start = rank * base + min(rank, extra)
        mine = base + (1 if rank < extra else 0)
        check("reducescatter %s rows=%d" % (dtype, rows), hvd.reducescatter(tensor, op=hvd.Sum),
              full[start:start + mine])

# ---- all-to-all ----
if kolo.engine_available():
    for dtype in DTYPES:
        splits = [(rank + r) % 3 for r in range(size)]
        rows = sum(splits)
        tensor = torch.arange(rows * 2, dtype=torch.int64).reshape(rows, 2).to(dtype) + rank
        got, received = hvd.alltoall(tensor, splits=splits)
        pieces = []
        for r in range(size):
            their = [(r + q) % 3 for q in range(size)]
            theirs = torch.arange(sum(their) * 2, dtype=torch.int64).reshape(sum(their), 2).to(dtype) + r
            offset = sum(their[:rank])
            pieces.append(theirs[offset:offset + their[rank]])
        check("alltoall %s" % dtype, got, torch.cat(pieces))
        check("alltoall received splits", received, torch.tensor([(r + rank) % 3 for r in range(size)],
                                                                  dtype=torch.int32))
    even = torch.arange(size * 2).reshape(size * 2, 1) + 100 * rank
    check("alltoall even", hvd.alltoall(even), torch.cat([torch.arange(size * 2).reshape(size * 2, 1)[2 * rank:
                                                                                                    2 * rank + 2]
                                                          + 100 * r for r in range(size)]))

# ---- objects, barrier, join ----
assert hvd.broadcast_object({"from": rank, "list": [1, 2]}, root_rank=size - 1) == {"from": size - 1, "list": [1, 2]}
assert hvd.allgather_object(("rank", rank)) == [("rank", r) for r in range(size)]
hvd.barrier()
if kolo.engine_available():
    last = hvd.join()
    assert 0 <= last < size, last
checks += 3

# ---- the framework-free module on numpy arrays and raw buffers ----
for np_dtype in (np.bool_, np.uint8, np.int8, np.int16, np.int32, np.int64, np.float16, np.float32, np.float64):
    array = (np.arange(1000) * 3 + rank * 5) % 11
    array = array.astype(np_dtype)
    want = sum(((np.arange(1000) * 3 + r * 5) % 11).astype(np.float64) for r in range(size)).astype(np_dtype)
    got = kolo.allreduce(array, op=kolo.Sum)
    assert got.dtype == np_dtype and np.allclose(got.astype(np.float64), want.astype(np.float64)), (np_dtype, got[:5])
    kolo.allreduce_(array, op=kolo.Sum)
    assert np.allclose(array.astype(np.float64), want.astype(np.float64))
    checks += 2
raw = bytearray([rank + 1] * 16)
kolo.allreduce_(raw, op=kolo.Max)
assert raw == bytearray([size] * 16), raw
gathered = kolo.allgather(np.full((rank + 1, 2), rank, dtype=np.int32))
assert gathered.shape == (size * (size + 1) // 2, 2) and gathered[-1, 0] == size - 1
assert kolo.broadcast(np.array([rank, rank], dtype=np.float64), 0).tolist() == [0.0, 0.0]
checks += 3

print("CHECKS %d" % checks)
sys.stdout.flush()
hvd.shutdown()
