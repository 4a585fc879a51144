"""Trains a small MLP for a few steps on fixed data with DistributedOptimizer:
each of N ranks takes GLOBAL/N samples of every global batch. argv: optimizer
name (sgd|adam), global batch, steps, out path, [options: fp16, passes2,
predivide]. Rank 0 writes the final flattened weights (torch.save)."""
import sys

import torch

import kolo.torch as hvd

name, global_batch, steps, out = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
options = set(sys.argv[5:])
torch.manual_seed(0)
torch.set_num_threads(1)
hvd.init()
rank, size = hvd.rank(), hvd.size()
model = torch.nn.Sequential(torch.nn.Linear(20, 32), torch.nn.Tanh(), torch.nn.Linear(32, 5))
if rank != 0:  # different start: broadcast_parameters must fix it
    for p in model.parameters():
        torch.nn.init.uniform_(p)
generator = torch.Generator().manual_seed(1)
inputs = torch.randn(steps, global_batch, 20, generator=generator)
targets = torch.randint(0, 5, (steps, global_batch), generator=generator)
base = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9) if name == "sgd" else \
    torch.optim.Adam(model.parameters(), lr=0.01)
passes = 2 if "passes2" in options else 1
optimizer = hvd.DistributedOptimizer(
    base, named_parameters=model.named_parameters(),
    compression=hvd.Compression.fp16 if "fp16" in options else hvd.Compression.none,
    backward_passes_per_step=passes, gradient_predivide_factor=2.0 if "predivide" in options else 1.0)
hvd.broadcast_parameters(model.state_dict(), root_rank=0)
hvd.broadcast_optimizer_state(optimizer, root_rank=0)
share = global_batch // size
for step in range(steps):
    x = inputs[step, rank * share:(rank + 1) * share]
    y = targets[step, rank * share:(rank + 1) * share]
    optimizer.zero_grad()
    chunk = share // passes
    for k in range(passes):
        part = slice(k * chunk, (k + 1) * chunk)
        # mean over the rank's share: each pass contributes its part / passes
        loss = torch.nn.functional.cross_entropy(model(x[part]), y[part]) / passes
        loss.backward()
    optimizer.step()
if rank == 0:
    torch.save(torch.cat([p.detach().flatten() for p in model.parameters()]), out)
print("DONE", flush=True)
