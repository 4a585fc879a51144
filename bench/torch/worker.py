"""One rank of a kolo.torch-vs-DDP throughput run (started by bench/torch/run.py).

argv: --backend kolo|ddp --model mlp|lenet|resnet18 --batch B --steps S --warmup W
kolo ranks run under kolorun; ddp ranks get RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT
and use torch.distributed (gloo) with DistributedDataParallel. Rank 0 prints
RATE <samples/s of all ranks> STEP_MS <median step ms> CPU_MS <CPU ms per step>'
(the process's CPU time, all threads, over the timed steps: what a step costs
regardless of how busy the machine is)."""
import argparse
import os
import statistics
import sys
import time

import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "examples", "pytorch"))

parser = argparse.ArgumentParser()
parser.add_argument("--backend", required=True, choices=["kolo", "ddp"])
parser.add_argument("--model", required=True, choices=["mlp", "lenet", "resnet18"])
parser.add_argument("--batch", type=int, default=64)
parser.add_argument("--steps", type=int, default=30)
parser.add_argument("--warmup", type=int, default=5)
parser.add_argument("--image-size", type=int, default=32)
parser.add_argument("--overlap", action="store_true",
                    help="kolo only: also time compute alone and the gradients' all-reduce alone")
args = parser.parse_args()
torch.set_num_threads(1)
torch.manual_seed(0)


class LeNet(torch.nn.Module):
    """The built-in trainer's LeNet (docs/TRAINER.md), 61,706 parameters."""

    def __init__(self):
        super().__init__()
        self.conv1 = torch.nn.Conv2d(1, 6, 5, padding=2)
        self.conv2 = torch.nn.Conv2d(6, 16, 5)
        self.fc1 = torch.nn.Linear(400, 120)
        self.fc2 = torch.nn.Linear(120, 84)
        self.fc3 = torch.nn.Linear(84, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        x = F.relu(self.fc1(x.flatten(1)))
        return self.fc3(F.relu(self.fc2(x)))


def build():
    if args.model == "mlp":
        import fashion
        return fashion.MLP(128), "fashion"
    if args.model == "lenet":
        return LeNet(), "fashion"
    import torchvision.models
    return torchvision.models.resnet18(num_classes=10), "synthetic"


def batches(kind, rank):
    if kind == "fashion":
        import fashion
        data = fashion.dataset(True)
        x, y = data.tensors
        n = args.batch
        count = args.warmup + args.steps
        return [(x[(i * n * 2 + rank * n) % 59000:][:n], y[(i * n * 2 + rank * n) % 59000:][:n]) for i in range(count)]
    x = torch.randn(args.batch, 3, args.image_size, args.image_size)
    y = torch.randint(0, 10, (args.batch,))
    return [(x, y)] * (args.warmup + args.steps)


model, kind = build()
if args.backend == "kolo":
    import kolo.torch as hvd
    hvd.init()
    rank, size = hvd.rank(), hvd.size()
    optimizer = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9),
                                         named_parameters=model.named_parameters())
    hvd.broadcast_parameters(model.state_dict(), 0)
    barrier = hvd.barrier
    net = model
else:
    import torch.distributed as dist
    dist.init_process_group("gloo")
    rank, size = dist.get_rank(), dist.get_world_size()
    net = torch.nn.parallel.DistributedDataParallel(model)
    optimizer = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9)
    barrier = dist.barrier

data = batches(kind, rank)
times = []
barrier()
for i, (x, y) in enumerate(data):
    if i == args.warmup:
        barrier()
        started = time.perf_counter()
        cpu_started = time.process_time()
    step_start = time.perf_counter()
    optimizer.zero_grad()
    loss = F.cross_entropy(net(x), y)
    loss.backward()
    optimizer.step()
    if i >= args.warmup:
        times.append(time.perf_counter() - step_start)
cpu = time.process_time() - cpu_started
barrier()
elapsed = time.perf_counter() - started
if args.overlap and args.backend == "kolo":
    # compute alone: the same steps with the plain optimizer (both ranks computing at once)
    plain = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    optimizer._kolo_hooks_enabled = False  # the DistributedOptimizer's hooks stay quiet meanwhile
    compute = []
    for x, y in data[args.warmup:]:
        began = time.perf_counter()
        plain.zero_grad()
        F.cross_entropy(net(x), y).backward()
        plain.step()
        compute.append(time.perf_counter() - began)
    optimizer._kolo_hooks_enabled = True
    # communication alone: every gradient, all-reduced as the optimizer does (one named op each)
    grads = [p.grad for p in model.parameters()]
    comm = []
    for _ in range(args.steps):
        barrier()
        began = time.perf_counter()
        for handle in [hvd.allreduce_async_(g, name="overlap.%d" % i) for i, g in enumerate(grads)]:
            hvd.synchronize(handle)
        comm.append(time.perf_counter() - began)
    if rank == 0:
        print("OVERLAP compute_ms %.3f comm_ms %.3f" % (1000 * statistics.median(compute),
                                                        1000 * statistics.median(comm)), flush=True)
if rank == 0:
    print("RATE %.2f STEP_MS %.3f CPU_MS %.3f" % (size * args.batch * args.steps / elapsed,
                                                 1000 * statistics.median(times), 1000 * cpu / args.steps), flush=True)
if args.backend == "kolo":
    hvd.shutdown()
else:
    dist.destroy_process_group()
