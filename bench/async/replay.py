#!/usr/bin/python3
"""LOCAL_SGD / DILOCO / SYNC replayed in one process: every rank's model and
optimizer side by side, the rounds' average computed in place (kolo.torch.modes'
rule with pace="fixed": H steps, then the parameters averaged, or the
pseudo-gradient through the outer Nesterov SGD). No network, no kolo: seconds
per run, for choosing learning rates and outer settings (docs/PERFORMANCE.md,
"The learning rate"); the equivalence of this rule with kolo's is what
test_python_modes checks.

    bench/async/replay.py --ranks 2 --epochs 3 --lr 0.01              # the quickstart job, DILOCO
    bench/async/replay.py --ranks 4 --batch 64 --H 30 --steps 600 --model mlp512 --lr 0.2 --sync
"""
import argparse
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "examples", "pytorch"))
import fashion  # noqa: E402


def model(name: str) -> torch.nn.Module:
    if name == "mlp512":  # bench/async/worker.py's
        return torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(784, 512), torch.nn.ReLU(),
                                   torch.nn.Linear(512, 512), torch.nn.ReLU(), torch.nn.Linear(512, 10),
                                   torch.nn.LogSoftmax(1))
    return fashion.model(name)


def flat(m: torch.nn.Module) -> torch.Tensor:
    return torch.cat([p.detach().reshape(-1) for p in m.parameters()])


def write(m: torch.nn.Module, v: torch.Tensor) -> None:
    offset = 0
    with torch.no_grad():
        for p in m.parameters():
            p.copy_(v[offset:offset + p.numel()].view_as(p))
            offset += p.numel()


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--ranks", type=int, default=2)
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--steps", type=int, default=0, help="stop after this many steps per rank (0: epochs)")
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--model", default="mlp", choices=["mlp", "net", "mlp512"])
    p.add_argument("--lr", type=float, default=0.01, help="every rank's inner learning rate (as given: no scaling)")
    p.add_argument("--momentum", type=float, default=0.9)
    p.add_argument("--H", type=int, default=50)
    p.add_argument("--outer-lr", type=float, default=0.7, help="1 with --outer-momentum 0: LOCAL_SGD")
    p.add_argument("--outer-momentum", type=float, default=0.9)
    p.add_argument("--nesterov", type=int, default=1)
    p.add_argument("--sync", action="store_true", help="SYNC: gradients averaged every step")
    p.add_argument("--seed", type=int, default=42)
    a = p.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(a.seed)
    x, y = fashion.dataset(True).tensors
    tx, ty = fashion.dataset(False).tensors
    models = [model(a.model) for _ in range(a.ranks)]
    for m in models[1:]:
        m.load_state_dict(models[0].state_dict())
    opts = [torch.optim.SGD(m.parameters(), lr=a.lr, momentum=a.momentum) for m in models]
    start, buf = flat(models[0]).clone(), None
    steps = 0

    def sync() -> None:
        nonlocal start, buf
        g = start - sum(flat(m) for m in models) / a.ranks
        if a.outer_momentum:
            buf = g.clone() if buf is None else buf.mul_(a.outer_momentum).add_(g)
            g = g + a.outer_momentum * buf if a.nesterov else buf
        start = start - a.outer_lr * g
        for m in models:
            write(m, start)

    for epoch in range(1, a.epochs + 1):
        perm = torch.randperm(len(x), generator=torch.Generator().manual_seed(a.seed + epoch))
        shards = [perm[r::a.ranks] for r in range(a.ranks)]
        for b in range(len(shards[0]) // a.batch):
            for r, (m, o) in enumerate(zip(models, opts)):
                index = shards[r][b * a.batch:(b + 1) * a.batch]
                o.zero_grad()
                F.nll_loss(m(x[index]), y[index]).backward()
            if a.sync:
                with torch.no_grad():
                    for ps in zip(*[m.parameters() for m in models]):
                        mean = sum(q.grad for q in ps) / a.ranks
                        for q in ps:
                            q.grad.copy_(mean)
            for o in opts:
                o.step()
            steps += 1
            if not a.sync and steps % a.H == 0:
                sync()
            if a.steps and steps >= a.steps:
                break
        if a.steps and steps >= a.steps:
            break
    if not a.sync and steps % a.H:
        sync()  # join(): the last partial round
    with torch.no_grad():
        accuracy = (models[0](tx).argmax(1) == ty).float().mean().item()
    print("replay %s: %d steps per rank, test accuracy %.4f" % (vars(a), steps, accuracy), flush=True)


if __name__ == "__main__":
    main()
