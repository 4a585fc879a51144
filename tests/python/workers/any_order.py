"""Ranks hand the engine the same named operations in different orders (as
autograd may), and one rank skips a parameter in backward (a branch it did not
take): results are still exact. Prints 'OK <n>'."""
import torch

import kolo.torch as hvd

hvd.init()
rank, size = hvd.rank(), hvd.size()
names = ["grad.%d" % i for i in range(12)]
order = names if rank % 2 == 0 else list(reversed(names))
handles = {n: hvd.allreduce_async(torch.full((100 + i,), float(rank + i)), name=n, op=hvd.Sum)
           for i, n in zip([names.index(n) for n in order], order)}
for i, n in enumerate(names):
    want = float(sum(r + i for r in range(size)))
    got = hvd.synchronize(handles[n])
    assert got.shape == (100 + i,) and bool((got == want).all()), (n, got[:3], want)

# a dynamic graph: rank 1 never uses the second layer's bias in backward
torch.manual_seed(0)
model = torch.nn.ModuleDict({"a": torch.nn.Linear(4, 4), "b": torch.nn.Linear(4, 4)})
optimizer = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                     named_parameters=model.named_parameters())
hvd.broadcast_parameters(model.state_dict(), 0)
x = torch.ones(2, 4)
out = model["a"](x)
out = model["b"](out) if rank != 1 else out @ model["b"].weight.t()
out.sum().backward()
optimizer.step()
digest = torch.cat([p.detach().flatten() for p in model.parameters()])
assert torch.equal(hvd.allreduce(digest, op=hvd.Max), digest)  # replicas identical after the step
print("OK 2", flush=True)
