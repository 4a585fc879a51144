"""An embedding model with sparse gradients (nn.Embedding(sparse=True)) trained
by DistributedOptimizer on N ranks, each with its share of every batch, against
the same model trained in this one process on the whole batches with dense
gradients: after the steps the parameters agree, with sparse_as_dense (argv[1]
'dense') and without it (Horovod's all-gather of indices and values). Also
checks sparse_allreduce_async itself. Prints 'OK <steps>'."""
import sys

import torch

import kolo.torch as hvd

hvd.init()
rank, size = hvd.rank(), hvd.size()
mode = sys.argv[1]
STEPS, PER_RANK, VOCAB = 4, 3, 17


def model(sparse: bool) -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Embedding(VOCAB, 4, sparse=sparse), torch.nn.Flatten(),
                               torch.nn.Linear(8, 1))


def batch(step: int):
    generator = torch.Generator().manual_seed(step)
    tokens = torch.randint(0, VOCAB, (PER_RANK * size, 2), generator=generator)
    return tokens, torch.randn(PER_RANK * size, 1, generator=generator)


# ---- sparse_allreduce_async: every rank's entries, averaged ----
grad = torch.sparse_coo_tensor([[rank, VOCAB - 1]], torch.tensor([[1.0 + rank, 2.0], [3.0, 4.0]]), (VOCAB, 2))
reduced = hvd.synchronize(hvd.sparse_allreduce_async(grad, name="probe", op=hvd.Average)).coalesce().to_dense()
want = sum(torch.sparse_coo_tensor([[r, VOCAB - 1]], torch.tensor([[1.0 + r, 2.0], [3.0, 4.0]]), (VOCAB, 2)).to_dense()
           for r in range(size)) / size
assert torch.allclose(reduced, want), (reduced, want)

# ---- training ----
net = model(sparse=True)
optimizer = hvd.DistributedOptimizer(torch.optim.SGD(net.parameters(), lr=0.5),
                                     named_parameters=net.named_parameters(), sparse_as_dense=mode == "dense")
reference = model(sparse=False)
reference_optimizer = torch.optim.SGD(reference.parameters(), lr=0.5)
for step in range(STEPS):
    tokens, target = batch(step)
    mine = slice(rank * PER_RANK, (rank + 1) * PER_RANK)
    optimizer.zero_grad()
    torch.nn.functional.mse_loss(net(tokens[mine]), target[mine]).backward()
    assert net[0].weight.grad.is_sparse
    optimizer.step()
    assert net[0].weight.grad.is_sparse
    reference_optimizer.zero_grad()
    torch.nn.functional.mse_loss(reference(tokens), target).backward()
    reference_optimizer.step()
for (name, got), want in zip(net.named_parameters(), reference.parameters()):
    assert torch.allclose(got, want, atol=1e-6), (name, got, want)
print("OK %d" % STEPS)
sys.stdout.flush()
hvd.shutdown()
