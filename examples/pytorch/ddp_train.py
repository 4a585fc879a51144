"""A plain torch.distributed + DistributedDataParallel script on backend "kolo": the
same file runs under torchrun, under kolorun and as a kolo exec job.

    python3 -m kolo.torch.torchrun --nproc_per_node=2 examples/pytorch/ddp_train.py
    build/bin/kolorun -np 2 /usr/bin/python3 examples/pytorch/ddp_train.py
    build/bin/kolo submit --name ddp --workers 2 --exec /usr/bin/python3 $PWD/examples/pytorch/ddp_train.py

(python3 -m kolo.torch.torchrun is torchrun with a fix for Debian's torch 1.13 on Python
3.11; see docs/PYTHON.md.) Trains an MLP on a fixed synthetic classification task
(each rank its own shard), prints the loss, and with --result-dir writes rank<r>.json:
rank, size, the final loss and a checksum of the weights."""
import argparse
import json
import os

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

import kolo.torch.distributed  # noqa: F401  registers backend "kolo"

parser = argparse.ArgumentParser(description="DDP on kolo")
parser.add_argument("--backend", default="kolo")
parser.add_argument("--steps", type=int, default=30)
parser.add_argument("--batch-size", type=int, default=32)
parser.add_argument("--result-dir", default=os.environ.get("RESULT_DIR"))
args = parser.parse_args()

torch.set_num_threads(1)
dist.init_process_group(backend=args.backend)  # the one changed string: was "gloo"
rank, size = dist.get_rank(), dist.get_world_size()

torch.manual_seed(0)  # the same initial weights everywhere (DDP also broadcasts rank 0's)
model = DDP(torch.nn.Sequential(torch.nn.Linear(32, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10)))
optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
teacher = torch.nn.Linear(32, 10)  # seed 0 too: every rank labels with the same teacher
data = torch.Generator().manual_seed(1000 + rank)

loss = torch.tensor(0.0)
for step in range(args.steps):
    x = torch.randn(args.batch_size, 32, generator=data)
    y = teacher(x).argmax(1).detach()
    optimizer.zero_grad()
    loss = torch.nn.functional.cross_entropy(model(x), y)
    loss.backward()
    optimizer.step()
    if rank == 0 and step % 10 == 0:
        print("step %d loss %.4f" % (step, loss.item()), flush=True)

checksum = float(sum(p.detach().double().sum() for p in model.parameters()))
print("rank %d of %d: final loss %.4f, weights checksum %.9f" % (rank, size, loss.item(), checksum), flush=True)
if args.result_dir:
    with open(os.path.join(args.result_dir, "rank%d.json" % rank), "w") as f:
        json.dump({"rank": rank, "size": size, "loss": loss.item(), "checksum": checksum,
                   "backend": dist.get_backend(), "kolo_job": bool(os.environ.get("KOLO_AGENT_SOCKET"))}, f)
dist.destroy_process_group()
