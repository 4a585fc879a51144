"""hvd.SyncBatchNorm on N real ranks, each with its share of one global batch,
against torch's BatchNorm on the whole batch in this one process: the outputs,
the input gradients (of the sum of every rank's loss, as torch's and Horovod's
SyncBatchNorm give), the running statistics, and eval mode. Prints 'OK'."""
import sys

import torch

import kolo.torch as hvd

hvd.init()
rank, size = hvd.rank(), hvd.size()
ROWS = [3, 2, 4, 1]  # rows per rank: shares may differ


def rows(r):
    return ROWS[r % 4]


for shape_tail, cls in (((3,), torch.nn.BatchNorm1d), ((3, 5), torch.nn.BatchNorm1d), ((3, 2, 2), torch.nn.BatchNorm2d)):
    generator = torch.Generator().manual_seed(len(shape_tail))
    total = sum(rows(r) for r in range(size))
    full = torch.randn((total,) + shape_tail, generator=generator, dtype=torch.float64) * 3 + 1
    weights = torch.randn((total,) + shape_tail, generator=generator, dtype=torch.float64)
    start = sum(rows(r) for r in range(rank))
    mine = slice(start, start + rows(rank))

    torch.manual_seed(0)
    sync = hvd.SyncBatchNorm(3, momentum=0.3).double()
    torch.nn.init.uniform_(sync.weight)
    torch.nn.init.uniform_(sync.bias)
    reference = cls(3, momentum=0.3).double()
    reference.load_state_dict(sync.state_dict())

    x = full[mine].clone().requires_grad_()
    y = sync(x)
    ((y * weights[mine]) ** 2).sum().backward()
    x_all = full.clone().requires_grad_()
    y_all = reference(x_all)
    ((y_all * weights) ** 2).sum().backward()  # the sum of every rank's loss
    assert torch.allclose(y, y_all[mine], atol=1e-10), (shape_tail, y, y_all[mine])
    assert torch.allclose(x.grad, x_all.grad[mine], atol=1e-9), (shape_tail, x.grad, x_all.grad[mine])
    assert torch.allclose(sync.running_mean, reference.running_mean, atol=1e-12)
    assert torch.allclose(sync.running_var, reference.running_var, atol=1e-12)
    sync.eval()
    reference.eval()
    assert torch.allclose(sync(full[mine]), reference(full)[mine], atol=1e-12)
print("OK %d" % size)
sys.stdout.flush()
hvd.shutdown()
