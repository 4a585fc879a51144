#!/usr/bin/python3
"""What committing every step costs a kolo.torch elastic job (issue #28): the step
time of the Fashion-MNIST CNN (examples/pytorch/fashion.py's Net, the elastic
example's model, batch 32) and of resnet18 on synthetic 32x32 images (batch 16),
SGD with momentum, one torch thread, with TorchState.commit() after every step
against no commit, in one process. The commit is local (it never communicates),
so a step here is compute only: a distributed step is longer, and the ratio here
is an upper bound of the overhead in a job.

Blocks of steps with and without a commit alternate (so a change of the machine's
load hits both); the table gives the median step time of each, the median time
of commit() itself, and the overhead both ways: commit / step (steady, what the
commit adds) and (step with commit - step without) / step without (noisier on a
shared machine). The old commit (copy.deepcopy of both state dicts) is timed too.
Target: overhead <= 2% of the step time.

    bench/commit/run.py                       # both models
    bench/commit/run.py --models cnn --blocks 4 --steps 10   # a smoke run
"""
import argparse
import copy
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "python"))
sys.path.insert(0, os.path.join(ROOT, "examples", "pytorch"))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from kolo.torch.elastic import TorchState  # noqa: E402


def build(name):
    """(model, optimizer, batch of inputs, targets) for a model name."""
    torch.manual_seed(0)
    if name == "cnn":
        import fashion
        model = fashion.Net()
        x, y = torch.randn(32, 1, 28, 28), torch.randint(0, 10, (32,))
        try:
            data = fashion.dataset(True)
            x, y = data.tensors[0][:32], data.tensors[1][:32]
        except OSError:
            pass  # (no data set here: the same shapes, random)
    else:
        import torchvision.models
        model = torchvision.models.resnet18(num_classes=10)
        x, y = torch.randn(16, 3, 32, 32), torch.randint(0, 10, (16,))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    return model, optimizer, x, y


def step(model, optimizer, x, y):
    optimizer.zero_grad()
    loss = F.cross_entropy(model(x), y)
    loss.backward()
    optimizer.step()


def measure(name, blocks, steps):
    model, optimizer, x, y = build(name)
    state = TorchState(model, optimizer, step=0)
    for _ in range(3):  # warm-up; the optimizer creates its momentum, the commit its slots
        step(model, optimizer, x, y)
        state.step += 1
        state.commit()
    plain, with_commit, commits, deepcopies = [], [], [], []
    for block in range(blocks):
        for committing in ((False, True) if block % 2 == 0 else (True, False)):
            for _ in range(steps):
                start = time.perf_counter()
                step(model, optimizer, x, y)
                state.step += 1
                if committing:
                    before = time.perf_counter()
                    state.commit()
                    commits.append(time.perf_counter() - before)
                (with_commit if committing else plain).append(time.perf_counter() - start)
        before = time.perf_counter()
        copy.deepcopy(model.state_dict())
        copy.deepcopy(optimizer.state_dict())
        deepcopies.append(time.perf_counter() - before)
    params = sum(p.numel() for p in model.parameters())
    return {"model": name, "params": params, "state_mb": state._snapshot.nbytes() / 2 / 1e6,
            "step_ms": 1e3 * statistics.median(plain), "step_commit_ms": 1e3 * statistics.median(with_commit),
            "commit_ms": 1e3 * statistics.median(commits), "deepcopy_ms": 1e3 * statistics.median(deepcopies)}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", default="cnn,resnet18")
    parser.add_argument("--blocks", type=int, default=10, help="blocks of each kind (alternating)")
    parser.add_argument("--steps", type=int, default=0, help="steps per block (default: 30 cnn, 6 resnet18)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    rows = []
    for name in args.models.split(","):
        rows.append(measure(name, args.blocks, args.steps or (30 if name == "cnn" else 6)))
    print("| model | params | state (MB) | step, no commit (ms) | step + commit (ms) | commit() (ms) "
          "| commit / step | step difference | old deepcopy commit (ms) | target <= 2% |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    met = 0
    for r in rows:
        ratio = r["commit_ms"] / r["step_ms"]
        difference = (r["step_commit_ms"] - r["step_ms"]) / r["step_ms"]
        ok = ratio <= 0.02
        met += ok
        print("| %s | %d | %.1f | %.2f | %.2f | %.3f | %.2f%% | %+.2f%% | %.3f | %s |"
              % (r["model"], r["params"], r["state_mb"], r["step_ms"], r["step_commit_ms"], r["commit_ms"],
                 100 * ratio, 100 * difference, r["deepcopy_ms"], "met" if ok else "NOT met"))
    print("Targets: %d of %d met" % (met, len(rows)))


if __name__ == "__main__":
    main()
