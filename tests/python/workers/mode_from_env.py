"""A Horovod-style script (hvd.DistributedOptimizer) that knows nothing of
modes: it trains in whatever mode the environment (a kolo job's KOLO_MODE*)
asks for, on different data on each rank, then prints 'MODE {json}': the mode
it ran, its rounds, whether the replicas differed after the first step (no
gradient all-reduce: not SYNC), whether they are equal at the end, and
hvd.lr_scale() (the learning rate's factor in that mode)."""
import json

import torch

import kolo.torch as hvd

hvd.init()
torch.manual_seed(0)
torch.set_num_threads(1)
model = torch.nn.Linear(4, 2)
optimizer = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                     named_parameters=model.named_parameters())
hvd.broadcast_parameters(model.state_dict(), root_rank=0)
generator = torch.Generator().manual_seed(hvd.rank())


def replicas_equal():
    weights = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    return bool(torch.equal(hvd.allreduce(weights, op=hvd.Max), hvd.allreduce(weights, op=hvd.Min)))


first_step_equal = None
for step in range(6):
    optimizer.zero_grad()
    model(torch.randn(3, 4, generator=generator)).square().mean().backward()
    optimizer.step()
    if step == 0:
        first_step_equal = replicas_equal()
rounds = getattr(optimizer, "_kolo_rounds", None)
report = {"mode": "SYNC", "rounds": None, "sync_every": 1}
if rounds is not None:
    optimizer.synchronize()  # every rank ends with the same model
    report = {"mode": rounds.spec.mode, "rounds": rounds.stats["rounds"], "sync_every": rounds.spec.sync_every,
              "compression": rounds.spec.compression}
report.update(first_step_equal=first_step_equal, end_equal=replicas_equal(), lr_scale=hvd.lr_scale())
print("MODE " + json.dumps(report), flush=True)
hvd.shutdown()
