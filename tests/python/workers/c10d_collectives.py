"""One rank of test_torch_backend's collective check: the default process group is
backend "kolo", a second group over the same ranks is gloo. Every collective runs on
both with the same inputs (small integers, exact in every dtype) and the results must
be equal; where gloo lacks the dtype or the op, the single-process reference (every
rank's input is a function of its rank, so each rank computes all of them) decides.
Prints "CHECKS n" and "OK" on success; any difference raises."""
from __future__ import annotations

import os
import sys
from typing import Callable, List, Optional

import torch
import torch.distributed as dist

import kolo.torch.distributed  # noqa: F401  (registers backend "kolo")

DTYPES = [torch.uint8, torch.int32, torch.int64, torch.float16, torch.bfloat16, torch.float32, torch.float64]
OPS = {"SUM": dist.ReduceOp.SUM, "MIN": dist.ReduceOp.MIN, "MAX": dist.ReduceOp.MAX,
       "PRODUCT": dist.ReduceOp.PRODUCT, "AVG": dist.ReduceOp.AVG}
checks = 0
gloo_checks = 0  # of them, compared with gloo's result


def value(rank: int, dtype: torch.dtype, n: int = 7) -> torch.Tensor:
    """Rank r's input: values 1..3 (products and sums stay exact and in range)."""
    return ((torch.arange(n) + rank) % 3 + 1).to(dtype)


def reference(op: str, inputs: List[torch.Tensor]) -> torch.Tensor:
    stack = torch.stack([t.double() for t in inputs])
    if op == "SUM":
        out = stack.sum(0)
    elif op == "AVG":
        out = stack.sum(0) / len(inputs)
        if not inputs[0].is_floating_point():
            out = torch.div(stack.sum(0), len(inputs), rounding_mode="floor")
    elif op == "MIN":
        out = stack.min(0).values
    elif op == "MAX":
        out = stack.max(0).values
    else:
        out = stack.prod(0)
    return out.to(inputs[0].dtype)


def same(what: str, got: torch.Tensor, want: torch.Tensor) -> None:
    global checks
    checks += 1
    if got.dtype != want.dtype or not torch.equal(got, want):
        raise AssertionError("%s: kolo gave %s, expected %s" % (what, got.tolist(), want.tolist()))


def with_gloo(fn: Callable[[], torch.Tensor]) -> Optional[torch.Tensor]:
    """fn's result on gloo, or None where gloo does not support it."""
    try:
        return fn()
    except RuntimeError:
        return None


def check_allreduce(rank: int, size: int, gloo: dist.ProcessGroup) -> None:
    global gloo_checks
    for dtype in DTYPES:
        inputs = [value(r, dtype) for r in range(size)]
        for name, op in OPS.items():
            got = value(rank, dtype)
            dist.all_reduce(got, op=op)
            same("all_reduce %s %s" % (name, dtype), got, reference(name, inputs))
            theirs = value(rank, dtype)
            if name == "AVG":  # gloo has no AVG: its SUM divided by the size
                theirs = with_gloo(lambda: dist.all_reduce(theirs, group=gloo) or theirs)
                if theirs is not None:
                    theirs = (theirs.double() / size).to(dtype) if dtype.is_floating_point \
                        else torch.div(theirs, size, rounding_mode="floor")
            else:
                theirs = with_gloo(lambda: dist.all_reduce(theirs, op=op, group=gloo) or theirs)
            if theirs is not None:
                gloo_checks += 1
                same("all_reduce %s %s vs gloo" % (name, dtype), got, theirs)
        coalesced = [value(rank, dtype, 5), value(rank + 1, dtype, 3)]
        dist.all_reduce_coalesced(coalesced, op=dist.ReduceOp.MAX)
        same("all_reduce_coalesced MAX %s [0]" % dtype, coalesced[0],
             reference("MAX", [value(r, dtype, 5) for r in range(size)]))
        same("all_reduce_coalesced MAX %s [1]" % dtype, coalesced[1],
             reference("MAX", [value(r + 1, dtype, 3) for r in range(size)]))


def check_moves(rank: int, size: int, gloo: dist.ProcessGroup) -> None:
    for dtype in DTYPES + [torch.bool, torch.int8, torch.int16]:
        for root in range(size):
            mine = value(rank, dtype) if dtype != torch.bool else value(rank, torch.int32) > 1
            dist.broadcast(mine, src=root)
            want = value(root, dtype) if dtype != torch.bool else value(root, torch.int32) > 1
            same("broadcast %s root %d" % (dtype, root), mine, want)
        outs = [torch.zeros(7, dtype=dtype) for _ in range(size)]
        dist.all_gather(outs, value(rank, dtype))
        gloo_outs = [torch.zeros(7, dtype=dtype) for _ in range(size)]
        if with_gloo(lambda: dist.all_gather(gloo_outs, value(rank, dtype), group=gloo) or gloo_outs) is None:
            gloo_outs = [value(r, dtype) for r in range(size)]
        for r in range(size):
            same("all_gather %s from %d" % (dtype, r), outs[r], gloo_outs[r])
        flat = torch.zeros(7 * size, dtype=dtype)
        dist._all_gather_base(flat, value(rank, dtype))
        same("_all_gather_base %s" % dtype, flat, torch.cat([value(r, dtype) for r in range(size)]))


def check_alltoall(rank: int, size: int, gloo: dist.ProcessGroup) -> None:
    global gloo_checks
    for dtype in DTYPES:
        # equal blocks of 2 rows of 3
        send = (torch.arange(size * 6).reshape(size * 2, 3) % 5 + rank).to(dtype)
        mine = torch.zeros_like(send)
        dist.all_to_all_single(mine, send)
        theirs = torch.zeros_like(send)
        if with_gloo(lambda: dist.all_to_all_single(theirs, send, group=gloo) or theirs) is not None:
            gloo_checks += 1
            same("all_to_all_single %s vs gloo" % dtype, mine, theirs)
        # uneven: rank r sends r + i + 1 rows to rank i
        in_splits = [rank + i + 1 for i in range(size)]
        out_splits = [r + rank + 1 for r in range(size)]
        send = torch.full((sum(in_splits), 2), rank + 1).to(dtype)
        mine = torch.zeros((sum(out_splits), 2), dtype=dtype)
        dist.all_to_all_single(mine, send, out_splits, in_splits)
        want = torch.cat([torch.full((out_splits[r], 2), r + 1).to(dtype) for r in range(size)])
        same("all_to_all_single uneven %s" % dtype, mine, want)


def check_reductions_to_one(rank: int, size: int, gloo: dist.ProcessGroup) -> None:
    for dtype in DTYPES:
        for name in ("SUM", "MIN", "MAX", "PRODUCT"):
            blocks = [value(rank * 3 + i, dtype, 4) for i in range(size)]
            out = torch.zeros(4, dtype=dtype)
            dist.reduce_scatter(out, blocks, op=OPS[name])
            same("reduce_scatter %s %s" % (name, dtype), out,
                 reference(name, [value(r * 3 + rank, dtype, 4) for r in range(size)]))
            flat = torch.cat(blocks)
            out = torch.zeros(4, dtype=dtype)
            dist._reduce_scatter_base(out, flat, op=OPS[name])
            same("_reduce_scatter_base %s %s" % (name, dtype), out,
                 reference(name, [value(r * 3 + rank, dtype, 4) for r in range(size)]))
        root = size - 1
        mine, before = value(rank, dtype), value(rank, dtype)
        dist.reduce(mine, dst=root)
        same("reduce %s" % dtype, mine,
             reference("SUM", [value(r, dtype) for r in range(size)]) if rank == root else before)


def check_odd_inputs(rank: int, size: int) -> None:
    # a non-contiguous tensor is reduced in place
    t = value(rank, torch.float32, 12).reshape(3, 4).t()
    dist.all_reduce(t)
    same("all_reduce non-contiguous", t,
         reference("SUM", [value(r, torch.float32, 12) for r in range(size)]).reshape(3, 4).t())
    # what kolo cannot do fails clearly, on every rank alike, and the group goes on
    for bad, words in ((lambda: dist.all_reduce(torch.ones(2, dtype=torch.bool)), "does not reduce"),
                       (lambda: dist.all_reduce(torch.ones(2, dtype=torch.int32), op=dist.ReduceOp.BAND),
                        "BAND")):
        try:
            bad()
        except RuntimeError as error:
            assert words in str(error), error
        else:
            raise AssertionError("expected an error with %r" % words)
    work = dist.all_reduce(torch.ones(3), async_op=True)
    result = work.get_future().wait()
    same("async all_reduce future", result[0], torch.full((3,), float(size)))
    dist.barrier()


def main() -> None:
    dist.init_process_group(backend="kolo")
    rank, size = dist.get_rank(), dist.get_world_size()
    gloo = dist.new_group(backend="gloo")
    check_allreduce(rank, size, gloo)
    check_moves(rank, size, gloo)
    check_alltoall(rank, size, gloo)
    check_reductions_to_one(rank, size, gloo)
    check_odd_inputs(rank, size)
    print("CHECKS %d" % checks)
    print("GLOO_CHECKS %d" % gloo_checks)
    print("BACKEND %s" % dist.get_backend())
    dist.destroy_process_group()
    print("OK")
    sys.stdout.flush()


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    main()
