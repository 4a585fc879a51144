"""Adasum on N real ranks against the formula written out here (Horovod's
pairwise combination, levels of pairs (0,1), (2,3), ... then their results):
allreduce(op=Adasum) of tensors, and DistributedOptimizer(op=Adasum), whose
parameters move by the Adasum of every rank's own optimizer step. Prints 'OK'."""
import sys

import torch

import kolo.torch as hvd

hvd.init()
rank, size = hvd.rank(), hvd.size()


def combine(a, b):
    dot = (a * b).sum()
    return (1 - dot / (2 * (a * a).sum())) * a + (1 - dot / (2 * (b * b).sum())) * b


def reference(values):
    level = list(values)
    while len(level) > 1:
        level = [combine(level[i], level[i + 1]) if i + 1 < len(level) else level[i] for i in range(0, len(level), 2)]
    return level[0]


def value(r, shape, salt=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(100 * r + salt), dtype=torch.float64)


for shape in ((5,), (3, 4)):
    got = hvd.allreduce(value(rank, shape), op=hvd.Adasum)
    want = reference([value(r, shape).flatten() for r in range(size)]).reshape(shape)
    assert torch.allclose(got, want, atol=1e-12), (shape, got, want)
# pre/postscale, float32, in place, and grouped (each tensor with its own coefficients)
x = value(rank, (6,)).float()
hvd.allreduce_(x, op=hvd.Adasum, prescale_factor=2.0, postscale_factor=0.5)
assert torch.allclose(x, reference([value(r, (6,)).float().double() * 2 for r in range(size)]).float() * 0.5,
                      atol=1e-5), x
pair = hvd.grouped_allreduce([value(rank, (4,), 1), value(rank, (2,), 2)], op=hvd.Adasum)
for i, (tensor, salt) in enumerate(zip(pair, (1, 2))):
    n = tensor.numel()
    assert torch.allclose(tensor, reference([value(r, (n,), salt) for r in range(size)]), atol=1e-12), i
# Adasum's two limits: identical vectors average, orthogonal ones add
same = hvd.allreduce(torch.tensor([1.0, 2.0, 3.0], dtype=torch.float64), op=hvd.Adasum)
assert torch.allclose(same, torch.tensor([1.0, 2.0, 3.0], dtype=torch.float64)), same
basis = torch.zeros(size, dtype=torch.float64)
basis[rank] = rank + 1.0
assert torch.allclose(hvd.allreduce(basis, op=hvd.Adasum), torch.arange(1, size + 1, dtype=torch.float64))

# ---- DistributedOptimizer(op=Adasum): the delta optimizer ----
torch.manual_seed(0)
model = torch.nn.Linear(3, 2).double()
start = [p.detach().clone() for p in model.parameters()]
optimizer = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9),
                                     named_parameters=model.named_parameters(), op=hvd.Adasum)
assert isinstance(optimizer, torch.optim.SGD)
inputs = [value(r, (4, 3), 7) for r in range(size)]
model(inputs[rank]).pow(2).sum().backward()
optimizer.step()
deltas = []
for r in range(size):  # every rank's own step, as its own SGD would take it
    local = torch.nn.Linear(3, 2).double()
    with torch.no_grad():
        for p, s in zip(local.parameters(), start):
            p.copy_(s)
    local(inputs[r]).pow(2).sum().backward()
    deltas.append([-0.1 * p.grad for p in local.parameters()])
for i, p in enumerate(model.parameters()):
    want = start[i] + reference([d[i].flatten() for d in deltas]).reshape(p.shape)
    assert torch.allclose(p.detach(), want, atol=1e-12), (i, p, want)
print("OK %d" % size)
sys.stdout.flush()
hvd.shutdown()
