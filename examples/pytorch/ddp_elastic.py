"""An elastic DistributedDataParallel script on backend "kolo": run as a kolo exec job, it
goes on in the same processes when a worker is lost or joins (kolo.torch.distributed's
elastic_run: the state rolls back to its last commit, the default group moves onto the next
ring, and a new DDP wrapper is built there).

    build/bin/kolo submit --name ddp-elastic --workers 2:3 \\
        --exec /usr/bin/python3 $PWD/examples/pytorch/ddp_elastic.py

Trains an MLP on a fixed synthetic task for --steps steps (each step's batch depends only on
the step and the rank, so a step redone after a re-form sees the same data), committing after
every step; with --result-dir writes rank<r>.json: the steps, the size at the end, this
process's pid, the re-forms it went through and a checksum of the weights."""
import argparse
import json
import os
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

import kolo.elastic
import kolo.torch.distributed as kolo_dist
from kolo.torch.elastic import TorchState

parser = argparse.ArgumentParser(description="elastic DDP on kolo")
parser.add_argument("--steps", type=int, default=200)
parser.add_argument("--batch-size", type=int, default=32)
parser.add_argument("--step-sleep", type=float, default=0.0, help="seconds to pause after each step")
parser.add_argument("--result-dir", default=os.environ.get("RESULT_DIR"))
args = parser.parse_args()

torch.set_num_threads(1)
if args.result_dir:  # one file per process that ever started (a restarted one makes another)
    open(os.path.join(args.result_dir, "started-%d" % os.getpid()), "w").close()
dist.init_process_group(backend="kolo")
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 10))
optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
teacher = torch.nn.Linear(32, 10)
state = TorchState(model=model, optimizer=optimizer, step=0)


@kolo_dist.elastic_run
def train(state: TorchState) -> float:
    ddp = DDP(state.model)  # a new wrapper on every ring: its group and buckets are for life
    rank = dist.get_rank()
    loss = torch.tensor(0.0)
    while state.step < args.steps:
        data = torch.Generator().manual_seed(state.step * 1000 + rank)
        x = torch.randn(args.batch_size, 32, generator=data)
        y = teacher(x).argmax(1).detach()
        state.optimizer.zero_grad()
        loss = torch.nn.functional.cross_entropy(ddp(x), y)
        loss.backward()
        state.optimizer.step()
        state.step += 1
        state.commit()
        if rank == 0 and state.step % 20 == 0:
            print("step %d of %d on %d ranks, loss %.4f" % (state.step, args.steps, dist.get_world_size(),
                                                           loss.item()), flush=True)
        if args.step_sleep:
            time.sleep(args.step_sleep)
    return loss.item()


final_loss = train(state)
rank, size = dist.get_rank(), dist.get_world_size()
checksum = float(sum(p.detach().double().sum() for p in model.parameters()))
print("rank %d of %d: %d steps, %d re-forms, final loss %.4f, weights checksum %.9f"
      % (rank, size, state.step, kolo.elastic.reconfigurations(), final_loss, checksum), flush=True)
if args.result_dir:
    with open(os.path.join(args.result_dir, "rank%d.json" % rank), "w") as f:
        json.dump({"rank": rank, "size": size, "steps": state.step, "pid": os.getpid(),
                   "reforms": kolo.elastic.reconfigurations(), "checksum": checksum}, f)
dist.destroy_process_group()
