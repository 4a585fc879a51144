"""A model split in two pipeline stages across ranks, with data parallelism over the
pipelines, written as a Horovod script with process sets: kolo.torch runs it with
only the import line changed.

Ranks pair up into pipelines (0,1), (2,3), ...: the even rank of a pair holds the
first half of the classifier (stage 0), the odd rank the second half (stage 1).
Each pair is a process set over which stage 0 sends its activations forward and
stage 1 sends their gradient back (hvd.broadcast from the stage that has them);
the ranks holding the same stage form a process set too, over which that stage's
gradients are averaged (DistributedOptimizer(process_set=...)) and its initial
weights broadcast. So every collective runs among the ranks that need it, at the
same time as the other sets' collectives. The data are synthetic: points of four
interleaved spirals, which the untrained classifier gets right a quarter of the
time; the test asks for 90% on held-out points.

    kolorun -np 4 python3 examples/pytorch/model_parallel_sets.py
"""
import argparse
import math

import torch
import torch.nn.functional as F

import kolo.torch as hvd  # was: import horovod.torch as hvd

parser = argparse.ArgumentParser(description="pipeline model parallelism with process sets (Horovod style)")
parser.add_argument("--steps", type=int, default=300)
parser.add_argument("--batch-size", type=int, default=64, help="samples per pipeline and step")
parser.add_argument("--lr", type=float, default=0.01)
parser.add_argument("--seed", type=int, default=42)

CLASSES, HIDDEN = 4, 64


def spirals(n, generator):
    """n points of CLASSES interleaved spirals in the plane, and their classes."""
    labels = torch.randint(0, CLASSES, (n,), generator=generator)
    radius = torch.rand(n, generator=generator) * 0.9 + 0.1
    angle = labels * (2 * math.pi / CLASSES) + radius * 3.0 + 0.15 * torch.randn(n, generator=generator)
    return torch.stack([radius * torch.cos(angle), radius * torch.sin(angle)], 1), labels


def main():
    args = parser.parse_args()
    torch.manual_seed(args.seed)
    torch.set_num_threads(1)
    hvd.init()
    size, rank = hvd.size(), hvd.rank()
    if size % 2:
        raise SystemExit("run on an even number of ranks: each pipeline is two ranks")
    pipelines = size // 2
    stage, pipeline = rank % 2, rank // 2

    def process_set(ranks):
        """Every rank adds every set, in the same order (Horovod: HOROVOD_DYNAMIC_PROCESS_SETS=1);
        all the ranks are the global set, which exists already."""
        return hvd.global_process_set if len(ranks) == size else hvd.add_process_set(ranks)

    pairs = [process_set([2 * p, 2 * p + 1]) for p in range(pipelines)]
    stages = [process_set(list(range(s, size, 2))) for s in range(2)]
    pair, same_stage = pairs[pipeline], stages[stage]
    first, second = 2 * pipeline, 2 * pipeline + 1

    if stage == 0:
        model = torch.nn.Sequential(torch.nn.Linear(2, HIDDEN), torch.nn.Tanh(), torch.nn.Linear(HIDDEN, HIDDEN),
                                    torch.nn.Tanh())
    else:
        model = torch.nn.Sequential(torch.nn.Linear(HIDDEN, HIDDEN), torch.nn.Tanh(), torch.nn.Linear(HIDDEN, CLASSES))
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
    hvd.broadcast_parameters(model.state_dict(), root_rank=stage, process_set=same_stage)  # ranks 0 or 1
    hvd.broadcast_optimizer_state(optimizer, root_rank=stage, process_set=same_stage)
    optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters(),
                                         process_set=same_stage)

    data = torch.Generator().manual_seed(args.seed + 1 + pipeline)  # both stages of a pipeline: the same batch

    def forward(points):
        """Stage 1's logits for points (None on stage 0), and the activations in between."""
        if stage == 0:
            hidden = model(points)
            hvd.broadcast(hidden.detach(), root_rank=first, name="activations", process_set=pair)
            return None, hidden
        hidden = hvd.broadcast(torch.empty(len(points), HIDDEN), root_rank=first, name="activations",
                               process_set=pair).requires_grad_()
        return model(hidden), hidden

    for step in range(1, args.steps + 1):
        points, labels = spirals(args.batch_size, data)
        optimizer.zero_grad()
        logits, hidden = forward(points)
        if stage == 1:
            loss = F.cross_entropy(logits, labels)
            loss.backward()
            hvd.broadcast(hidden.grad, root_rank=second, name="gradients", process_set=pair)
        else:
            grad = hvd.broadcast(torch.empty_like(hidden), root_rank=second, name="gradients", process_set=pair)
            hidden.backward(grad)
        optimizer.step()
        if step % 100 == 0 and stage == 1:
            print("step %d pipeline %d loss %.4f" % (step, pipeline, loss.item()), flush=True)

    test = torch.Generator().manual_seed(args.seed + 1000 + pipeline)
    points, labels = spirals(500, test)
    with torch.no_grad():
        logits, _ = forward(points)
    correct = torch.tensor([float((logits.argmax(1) == labels).sum()) if stage == 1 else 0.0])
    correct = hvd.allreduce(correct, op=hvd.Sum, name="correct")
    if rank == 1:
        print("Accuracy: %.2f%%" % (100.0 * correct.item() / (500 * pipelines)), flush=True)


if __name__ == "__main__":
    main()
