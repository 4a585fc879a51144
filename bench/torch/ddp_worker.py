"""One rank of bench/torch/ddp.py: the same DistributedDataParallel script on backend
gloo or kolo (one changed string), MLP / LeNet / resnet18 on fixed data, optionally
with the PowerSGD comm hook. Ranks get torchrun's variables (RANK, WORLD_SIZE,
MASTER_ADDR, MASTER_PORT). Rank 0 prints 'RATE <samples/s, all ranks> STEP_MS
<median step ms> CPU_MS <process CPU ms per step>'."""
import argparse
import os
import statistics
import sys
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as powersgd
from torch.nn.parallel import DistributedDataParallel as DDP

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "examples", "pytorch"))

import kolo.torch.distributed  # noqa: E402,F401  registers backend "kolo"

parser = argparse.ArgumentParser()
parser.add_argument("--backend", required=True, choices=["kolo", "gloo"])
parser.add_argument("--model", required=True, choices=["mlp", "lenet", "resnet18"])
parser.add_argument("--hook", default="none", choices=["none", "powersgd"])
parser.add_argument("--batch", type=int, default=64)
parser.add_argument("--steps", type=int, default=30)
parser.add_argument("--warmup", type=int, default=5)
args = parser.parse_args()
torch.set_num_threads(1)
torch.manual_seed(0)


def build() -> torch.nn.Module:
    if args.model == "mlp":
        import fashion
        return fashion.MLP(128)
    if args.model == "lenet":
        return torch.nn.Sequential(torch.nn.Conv2d(1, 6, 5, padding=2), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
                                   torch.nn.Conv2d(6, 16, 5), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
                                   torch.nn.Flatten(), torch.nn.Linear(400, 120), torch.nn.ReLU(),
                                   torch.nn.Linear(120, 84), torch.nn.ReLU(), torch.nn.Linear(84, 10))
    import torchvision.models
    return torchvision.models.resnet18(num_classes=10)


def data(rank: int):
    shape = {"mlp": (784,), "lenet": (1, 28, 28), "resnet18": (3, 32, 32)}[args.model]
    generator = torch.Generator().manual_seed(rank)
    x = torch.randn((args.batch,) + shape, generator=generator)
    y = torch.randint(0, 10, (args.batch,), generator=generator)
    return x, y


dist.init_process_group(backend=args.backend)
rank, size = dist.get_rank(), dist.get_world_size()
net = DDP(build())
if args.hook == "powersgd":
    state = powersgd.PowerSGDState(process_group=None, matrix_approximation_rank=2, start_powerSGD_iter=2)
    net.register_comm_hook(state, powersgd.powerSGD_hook)
optimizer = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9)
x, y = data(rank)
times = []
dist.barrier()
for i in range(args.warmup + args.steps):
    if i == args.warmup:
        dist.barrier()
        started = time.perf_counter()
        cpu_started = time.process_time()
    step_start = time.perf_counter()
    optimizer.zero_grad()
    F.cross_entropy(net(x), y).backward()
    optimizer.step()
    if i >= args.warmup:
        times.append(time.perf_counter() - step_start)
cpu = time.process_time() - cpu_started
dist.barrier()
elapsed = time.perf_counter() - started
if rank == 0:
    print("RATE %.2f STEP_MS %.3f CPU_MS %.3f" % (size * args.batch * args.steps / elapsed,
                                                 1000 * statistics.median(times), 1000 * cpu / args.steps), flush=True)
dist.destroy_process_group()
