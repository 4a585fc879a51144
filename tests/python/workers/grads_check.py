"""The backward pass of every differentiable kolo.torch collective, checked on
N real ranks against two things: horovod.torch's definition of that gradient
(horovod/torch/mpi_ops.py), written out here as a formula, and a single-process
reference that runs every rank's forward pass in this one process and lets
PyTorch's autograd differentiate it.

Horovod's definitions differentiate different losses per collective. With L_r
the loss on rank r (here <g_r, y_r>, g_r the output gradient rank r feeds in):
  allreduce, grouped_allreduce, alltoall:   d/dx of  sum_r L_r
  allgather, grouped_allgather, broadcast:  d/dx of  (1/n) sum_r L_r   (averaged)
  reducescatter, grouped_reducescatter:     d/dx of  n sum_r L_r
so the reference is autograd of that loss. Prints 'GRADS <n>' and exits 0 when
every check passed."""
import sys
from typing import Callable, List, Sequence

import torch

import kolo.torch as hvd

hvd.init()
rank, size = hvd.rank(), hvd.size()
checks = 0
DTYPE = torch.float64


def rows_of(r: int) -> int:
    """Ranks contribute different numbers of rows (allgather allows it)."""
    return [3, 1, 4, 2][r % 4]


def inputs(r: int, shape: Sequence[int], salt: int = 0) -> torch.Tensor:
    generator = torch.Generator().manual_seed(1000 * r + salt)
    return torch.randn(*shape, generator=generator, dtype=DTYPE)


def out_grad(r: int, shape: Sequence[int], salt: int = 0) -> torch.Tensor:
    generator = torch.Generator().manual_seed(7919 + 1000 * r + salt)
    return torch.randn(*shape, generator=generator, dtype=DTYPE)


def check(what: str, got: torch.Tensor, want: torch.Tensor) -> None:
    global checks
    if got is None or got.shape != want.shape or not torch.allclose(got, want, rtol=1e-9, atol=1e-9):
        raise AssertionError("rank %d: %s:\n got %s\nwant %s" % (rank, what, got, want))
    checks += 1


def reference(make_inputs: Callable[[int], torch.Tensor], forward_all: Callable[[List[torch.Tensor]],
              List[torch.Tensor]], make_grads: Callable[[int, torch.Tensor], torch.Tensor],
              scale: float) -> torch.Tensor:
    """Every rank's forward in this process; the gradient of
    scale * sum_r <g_r, y_r> with respect to this rank's input."""
    xs = [make_inputs(r).requires_grad_() for r in range(size)]
    ys = forward_all(xs)
    loss = sum((make_grads(r, ys[r]) * ys[r]).sum() for r in range(size)) * scale
    loss.backward()
    grad = xs[rank].grad
    return torch.zeros_like(xs[rank]) if grad is None else grad  # an input that did not reach the loss


def distributed(make_inputs: Callable[[int], torch.Tensor], op: Callable[[torch.Tensor], torch.Tensor],
                make_grads: Callable[[int, torch.Tensor], torch.Tensor]) -> torch.Tensor:
    x = make_inputs(rank).requires_grad_()
    y = op(x)
    y.backward(make_grads(rank, y))
    return x.grad


# ---- allreduce: Sum and Average, with pre/postscale; horovod: allreduce(g, same op and factors) ----
for op_name, op in (("Sum", hvd.Sum), ("Average", hvd.Average)):
    for pre, post in ((1.0, 1.0), (0.5, 3.0)):
        shape = (4, 3)
        make_x = lambda r: inputs(r, shape)  # noqa: E731
        make_g = lambda r, y: out_grad(r, y.shape)  # noqa: E731

        def forward_all(xs, op_name=op_name, pre=pre, post=post):
            total = sum(x * pre for x in xs)
            y = (total / size if op_name == "Average" else total) * post
            return [y] * size
        want = reference(make_x, forward_all, make_g, 1.0)
        got = distributed(make_x, lambda x, op=op, pre=pre, post=post: hvd.allreduce(
            x, op=op, prescale_factor=pre, postscale_factor=post), make_g)
        horovod = sum(out_grad(r, shape) for r in range(size)) * pre * post / (size if op_name == "Average" else 1)
        check("allreduce %s pre=%s post=%s vs reference" % (op_name, pre, post), got, want)
        check("allreduce %s pre=%s post=%s vs horovod" % (op_name, pre, post), got, horovod)

# ---- allgather: rows differ by rank; horovod: average of g over ranks, this rank's rows ----
for trailing in ((), (2,), (2, 3)):
    make_x = lambda r, trailing=trailing: inputs(r, (rows_of(r),) + trailing)  # noqa: E731
    make_g = lambda r, y: out_grad(r, y.shape)  # noqa: E731
    want = reference(make_x, lambda xs: [torch.cat(xs)] * size, make_g, 1.0 / size)
    got = distributed(make_x, hvd.allgather, make_g)
    offset = sum(rows_of(r) for r in range(rank))
    total = sum(rows_of(r) for r in range(size))
    horovod = (sum(out_grad(r, (total,) + trailing) for r in range(size)) / size)[offset:offset + rows_of(rank)]
    check("allgather trailing=%s vs reference" % (trailing,), got, want)
    check("allgather trailing=%s vs horovod" % (trailing,), got, horovod)

# a scalar gathers as one row; its gradient keeps the scalar's shape
x = torch.tensor(float(rank), dtype=DTYPE, requires_grad=True)
hvd.allgather(x).backward(torch.arange(size, dtype=DTYPE) + 1)
check("allgather scalar", x.grad, torch.tensor(float(rank + 1), dtype=DTYPE))

# ---- broadcast from every root; horovod: average of g over ranks on the root, zeros elsewhere ----
for root in range(size):
    shape = (5, 2)
    make_x = lambda r: inputs(r, shape)  # noqa: E731
    make_g = lambda r, y: out_grad(r, y.shape)  # noqa: E731
    want = reference(make_x, lambda xs, root=root: [xs[root]] * size, make_g, 1.0 / size)
    got = distributed(make_x, lambda x, root=root: hvd.broadcast(x, root), make_g)
    horovod = sum(out_grad(r, shape) for r in range(size)) / size if rank == root else torch.zeros(shape,
                                                                                                     dtype=DTYPE)
    check("broadcast root=%d vs reference" % root, got, want)
    check("broadcast root=%d vs horovod" % root, got, horovod)

# ---- grouped_allreduce: each member as allreduce ----
shapes = [(3,), (2, 2)]
for op_name, op in (("Sum", hvd.Sum), ("Average", hvd.Average)):
    xs_here = [inputs(rank, s, salt=i).requires_grad_() for i, s in enumerate(shapes)]
    outs = hvd.grouped_allreduce(xs_here, op=op, prescale_factor=2.0)
    torch.autograd.backward(outs, [out_grad(rank, s, salt=i) for i, s in enumerate(shapes)])
    for i, s in enumerate(shapes):
        horovod = sum(out_grad(r, s, salt=i) for r in range(size)) * 2.0 / (size if op_name == "Average" else 1)
        all_x = [inputs(r, s, salt=i).requires_grad_() for r in range(size)]
        total = sum(x * 2.0 for x in all_x) / (size if op_name == "Average" else 1)
        sum((out_grad(r, s, salt=i) * total).sum() for r in range(size)).backward()
        check("grouped_allreduce %s member %d vs reference" % (op_name, i), xs_here[i].grad, all_x[rank].grad)
        check("grouped_allreduce %s member %d vs horovod" % (op_name, i), xs_here[i].grad, horovod)

# ---- grouped_allgather: each member as allgather ----
xs_here = [inputs(rank, (rows_of(rank), 2), salt=1).requires_grad_(), inputs(rank, (rank + 1,), salt=2).requires_grad_()]
outs = hvd.grouped_allgather(xs_here)
torch.autograd.backward(outs, [out_grad(rank, o.shape, salt=i) for i, o in enumerate(outs)])
all_a = [inputs(r, (rows_of(r), 2), salt=1).requires_grad_() for r in range(size)]
all_b = [inputs(r, (r + 1,), salt=2).requires_grad_() for r in range(size)]
ga, gb = torch.cat(all_a), torch.cat(all_b)
(sum((out_grad(r, ga.shape, salt=0) * ga).sum() + (out_grad(r, gb.shape, salt=1) * gb).sum()
     for r in range(size)) / size).backward()
check("grouped_allgather member 0 vs reference", xs_here[0].grad, all_a[rank].grad)
check("grouped_allgather member 1 vs reference", xs_here[1].grad, all_b[rank].grad)


# ---- reducescatter: rows split as Horovod (the first d0 % n ranks one more); horovod:
# allgather of g, times n for Sum, times the factors ----
def share(rows: int, r: int):
    base, extra = divmod(rows, size)
    return r * base + min(r, extra), base + (1 if r < extra else 0)


for op_name, op in (("Sum", hvd.Sum), ("Average", hvd.Average)):
    for rows, pre, post in ((2 * size, 1.0, 1.0), (2 * size + 1, 0.5, 3.0), (1, 1.0, 2.0)):
        shape = (rows, 3)
        make_x = lambda r, shape=shape: inputs(r, shape, salt=3)  # noqa: E731
        make_g = lambda r, y: out_grad(r, y.shape, salt=3)  # noqa: E731

        def forward_all(xs, op_name=op_name, rows=rows, pre=pre, post=post):
            total = sum(x * pre for x in xs) / (size if op_name == "Average" else 1) * post
            return [total[share(rows, r)[0]:sum(share(rows, r))] for r in range(size)]
        want = reference(make_x, forward_all, make_g, float(size))
        got = distributed(make_x, lambda x, op=op, pre=pre, post=post: hvd.reducescatter(
            x, op=op, prescale_factor=pre, postscale_factor=post), make_g)
        gathered = torch.cat([out_grad(r, (share(rows, r)[1], 3), salt=3) for r in range(size)])
        horovod = gathered * (size if op_name == "Sum" else 1) * pre * post
        what = "reducescatter %s rows=%d pre=%s post=%s" % (op_name, rows, pre, post)
        check(what + " vs reference", got, want)
        check(what + " vs horovod", got, horovod)

# ---- grouped_reducescatter: each member as reducescatter ----
xs_here = [inputs(rank, (size, 2), salt=4).requires_grad_(), inputs(rank, (2 * size + 1,), salt=5).requires_grad_()]
outs = hvd.grouped_reducescatter(xs_here, op=hvd.Sum)
torch.autograd.backward(outs, [out_grad(rank, o.shape, salt=i) for i, o in enumerate(outs)])
for i, x in enumerate(xs_here):
    rows = x.shape[0]
    gathered = torch.cat([out_grad(r, (share(rows, r)[1],) + tuple(x.shape[1:]), salt=i) for r in range(size)])
    check("grouped_reducescatter member %d vs horovod" % i, x.grad, gathered * size)


# ---- alltoall: rank k sends splits(k)[r] rows to rank r; horovod: alltoall back with the received splits ----
def splits_of(k: int) -> List[int]:
    return [(k + 2 * r) % 3 for r in range(size)]


for given in (True, False):
    split_fn = splits_of if given else (lambda k: [2] * size)
    make_x = lambda r, split_fn=split_fn: inputs(r, (sum(split_fn(r)), 2), salt=6)  # noqa: E731
    make_g = lambda r, y: out_grad(r, y.shape, salt=6)  # noqa: E731

    def forward_all(xs, split_fn=split_fn):
        out = []
        for r in range(size):
            pieces = []
            for k in range(size):
                start = sum(split_fn(k)[:r])
                pieces.append(xs[k][start:start + split_fn(k)[r]])
            out.append(torch.cat(pieces))
        return out

    def op(x, given=given, split_fn=split_fn):
        if given:
            output, received = hvd.alltoall(x, splits=split_fn(rank))
            assert received.tolist() == [split_fn(k)[rank] for k in range(size)], received
            return output
        return hvd.alltoall(x)
    want = reference(make_x, forward_all, make_g, 1.0)
    got = distributed(make_x, op, make_g)
    check("alltoall splits=%s vs reference" % given, got, want)

# ---- a loss through allgather then a nonlinearity (a contrastive loss's shape) ----
make_x = lambda r: inputs(r, (rows_of(r), 4), salt=5)  # noqa: E731


def contrastive(r: int, gathered: torch.Tensor) -> torch.Tensor:
    logits = gathered @ gathered.t()
    return torch.nn.functional.cross_entropy(logits, torch.arange(gathered.shape[0]) % 3 + r % 2)


xs = [make_x(r).requires_grad_() for r in range(size)]
gathered = torch.cat(xs)
(sum(contrastive(r, gathered) for r in range(size)) / size).backward()
x = make_x(rank).requires_grad_()
contrastive(rank, hvd.allgather(x)).backward()
check("contrastive loss through allgather vs reference", x.grad, xs[rank].grad)

print("GRADS %d" % checks)
sys.stdout.flush()
hvd.shutdown()
