"""horovod.torch behaviours a ported script relies on, each checked against
Horovod's documented (or, where undocumented, implemented) behaviour on N real
ranks: grouped all-gather and reduce-scatter, pre/postscale on reduce-scatter,
integer pre/postscale (Horovod: the factor times each element in double,
truncated to the type), the build queries, the exception classes. Prints
'PARITY <n>' and exits 0 when every check passed."""
import sys

import torch

import kolo.torch as hvd

hvd.init()
rank, size = hvd.rank(), hvd.size()
checks = 0


def check(what, got, want):
    global checks
    if isinstance(want, torch.Tensor):
        ok = got.dtype == want.dtype and got.shape == want.shape and torch.allclose(got.double(), want.double(),
                                                                                      rtol=1e-6, atol=1e-6)
    else:
        ok = got == want
    if not ok:
        raise AssertionError("rank %d: %s: got %r, want %r" % (rank, what, got, want))
    checks += 1


def raises(what, exception, call):
    global checks
    try:
        call()
    except exception as error:
        checks += 1
        return error
    raise AssertionError("rank %d: %s did not raise %s" % (rank, what, exception.__name__))


def value(r, shape, dtype=torch.float32):
    return (torch.arange(int(torch.tensor(shape).prod()), dtype=torch.float64).reshape(shape) * (r + 1) - 7).to(dtype)


def share(rows, r):
    base, extra = divmod(rows, size)
    return r * base + min(r, extra), base + (1 if r < extra else 0)


# ---- grouped_allgather: member i as allgather of member i ----
members = [value(rank, (rank + 1, 2)), value(rank, (2,), torch.int64), torch.tensor(float(rank))]
got = hvd.grouped_allgather(members)
check("grouped_allgather count", len(got), 3)
check("grouped_allgather 0", got[0], torch.cat([value(r, (r + 1, 2)) for r in range(size)]))
check("grouped_allgather 1", got[1], torch.cat([value(r, (2,), torch.int64) for r in range(size)]))
check("grouped_allgather scalar", got[2], torch.arange(size, dtype=torch.float32))
check("grouped_allgather_async", hvd.synchronize(hvd.grouped_allgather_async([torch.full((1,), rank)]))[0],
      torch.arange(size))

# ---- reducescatter with factors, grouped_reducescatter ----
for op, name in ((hvd.Sum, "Sum"), (hvd.Average, "Average")):
    for rows in (size, 2 * size + 1):
        x = value(rank, (rows, 3))
        full = sum(value(r, (rows, 3)) * 0.5 for r in range(size)) * 3.0 / (size if op == hvd.Average else 1)
        start, n = share(rows, rank)
        check("reducescatter %s rows=%d pre=0.5 post=3" % (name, rows),
              hvd.reducescatter(x, op=op, prescale_factor=0.5, postscale_factor=3.0), full[start:start + n])
got = hvd.grouped_reducescatter([value(rank, (size, 2)), value(rank, (size + 1,), torch.float64)], op=hvd.Sum)
start, n = share(size, rank)
check("grouped_reducescatter 0", got[0], sum(value(r, (size, 2)) for r in range(size))[start:start + n])
start, n = share(size + 1, rank)
check("grouped_reducescatter 1", got[1],
      sum(value(r, (size + 1,), torch.float64) for r in range(size))[start:start + n])

# ---- integer pre/postscale (Horovod: trunc(factor * element) in double, before and after) ----
for dtype in (torch.int32, torch.int64, torch.uint8):
    for op, name in ((hvd.Sum, "Sum"), (hvd.Average, "Average")):
        x = (torch.arange(6) * (rank + 1) + 3).to(dtype)
        pre, post = 0.7, 1.5
        scaled = [(torch.arange(6, dtype=torch.float64) * (r + 1) + 3).mul(pre).trunc() for r in range(size)]
        total = sum(scaled)
        want = (total * (post / (size if op == hvd.Average else 1))).trunc().to(dtype)
        check("allreduce %s %s pre=%s post=%s" % (dtype, name, pre, post),
              hvd.allreduce(x, op=op, prescale_factor=pre, postscale_factor=post), want)
        in_place = x.clone()
        hvd.allreduce_(in_place, op=op, prescale_factor=pre, postscale_factor=post)
        check("allreduce_ %s %s" % (dtype, name), in_place, want)
        grouped = hvd.grouped_allreduce([x, x.float()], op=op, prescale_factor=pre, postscale_factor=post)
        check("grouped_allreduce integer member %s %s" % (dtype, name), grouped[0], want)
    rows = 2 * size
    x = (torch.arange(rows * 2).reshape(rows, 2) + rank).to(dtype)
    scaled = sum((torch.arange(rows * 2, dtype=torch.float64).reshape(rows, 2) + r).mul(0.5).trunc()
                 for r in range(size))
    want = (scaled * 3.0).trunc().to(dtype)[2 * rank:2 * rank + 2]
    check("reducescatter %s pre=0.5 post=3" % dtype,
          hvd.reducescatter(x, op=hvd.Sum, prescale_factor=0.5, postscale_factor=3.0), want)

# ---- build queries: kolo has no MPI, Gloo, oneCCL, ROCm, DDL ----
for query in ("mpi_built", "gloo_built", "ccl_built", "rocm_built", "ddl_built", "mpi_enabled", "gloo_enabled",
              "mpi_threads_supported"):
    check(query, getattr(hvd, query)(), False)
check("cuda_built follows nccl_built", hvd.cuda_built(), hvd.nccl_built() > 0)

# ---- the dtypes kolo's Python knows are libkolo's (kolo_dtype_size), no more, no fewer ----
from kolo import _core, _lib  # noqa: E402
check("dtype sizes as libkolo's", {i: _lib.lib.kolo_dtype_size(i) for i in range(len(_core.DTYPE_SIZES) + 1)},
      {**_core.DTYPE_SIZES, len(_core.DTYPE_SIZES): 0})
print("NCCL_BUILT %d" % hvd.nccl_built())

# ---- exception classes a Horovod script catches ----
check("HorovodInternalError is KoloError", hvd.HorovodInternalError, hvd.KoloError)
check("HostsUpdatedInterrupt", issubclass(hvd.HostsUpdatedInterrupt, Exception), True)
raises("bad alltoall splits", ValueError, lambda: hvd.alltoall(torch.zeros(size, 1), splits=[size + 1] * size))
raises("alltoall splits of the wrong length", ValueError, lambda: hvd.alltoall(torch.zeros(2, 1), splits=[1, 1, 0, 0]))
raises("reducescatter of a scalar", ValueError, lambda: hvd.reducescatter(torch.tensor(1.0)))
raises("non-finite factor", ValueError, lambda: hvd.allreduce(torch.ones(2), prescale_factor=float("nan")))
tensor = torch.ones(17)
first = hvd.allreduce_async(tensor, name="duplicate_name")
error = raises("a name in flight submitted again", ValueError,
               lambda: hvd.allreduce_async(tensor, name="duplicate_name"))
check("duplicate name error names the tensor", "duplicate_name" in str(error), True)
check("duplicate name error is a HorovodInternalError", isinstance(error, hvd.HorovodInternalError), True)
check("the first request completes", hvd.synchronize(first), torch.ones(17))
hvd.barrier()

# ---- equal element counts in different shapes: an error naming the tensor, on every rank ----
if size > 1:
    odd = rank % 2 == 1
    cases = [
        ("allreduce", lambda: hvd.allreduce(torch.ones((3, 2) if odd else (2, 3)), name="transposed.weight")),
        ("allreduce_", lambda: hvd.allreduce_(torch.ones((6,) if odd else (2, 3)), name="flat.weight")),
        ("broadcast", lambda: hvd.broadcast(torch.ones((3, 2) if odd else (2, 3)), 0, name="broadcast.weight")),
        ("reducescatter", lambda: hvd.reducescatter(torch.ones((size, 3, 2) if odd else (size, 2, 3)),
                                                    name="scatter.weight")),
        ("grouped_allreduce", lambda: hvd.grouped_allreduce([torch.ones(4), torch.ones((3, 2) if odd else (2, 3))],
                                                            name="group.weight")),
    ]
    for kind, call in cases:
        error = raises(kind + " of another shape", hvd.MismatchError, call)
        named = "'group.weight.1'" if kind.startswith("grouped") else ".weight'"
        check(kind + " mismatch names the tensor", named in str(error) and "shape" in str(error), True)
        check(kind + " mismatch is a ValueError", isinstance(error, ValueError), True)
    check("the ring is usable after the mismatches", hvd.allreduce(torch.ones(2), op=hvd.Sum),
          torch.full((2,), float(size)))

print("PARITY %d" % checks)
sys.stdout.flush()
hvd.shutdown()
