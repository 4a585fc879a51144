#!/usr/bin/python3
"""How long a newcomer waits for a 100 MB state (issue 28): 3 ranks under kolorun; ranks
0 and 1 hold a model of 12.5 M float parameters (50 MB) and SGD momentum (50 MB) after
one step, the last rank is a newcomer (another model, an optimizer that never stepped).
Times TorchState.sync(): the model's and the optimizer's tensors in place
(kolo/torch/state_sync.py), with KOLO_STATE_SYNC=root each broadcast from rank 0 around
the ring ("root"), with KOLO_STATE_SYNC=sources only to the ranks whose bytes differ, from the nearest rank
before them that holds rank 0's ("sources"); then the commit of what arrived. Against the
sync before issue 28 ("pickled": broadcast_optimizer_state, rank 0's torch.save of the
state dict sent as one object and torch.load on every rank; then the deepcopy commit).
Then the newcomer's first step (which waits for the commit's background copy).
Medians over --repeats (the ways interleaved), the slowest rank of each.

    bench/commit/joiner.py [--repeats 3] [--build build] [--ways pickled,root,sources]
"""
import argparse
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))

WORKER = r"""
import copy, sys, time, torch
import kolo.torch as hvd
from kolo.torch.functions import broadcast_optimizer_state, broadcast_parameters
hvd.init(); torch.set_num_threads(1)
joiner = hvd.rank() == hvd.size() - 1
torch.manual_seed(1 if joiner else 0)
model = torch.nn.Sequential(*[torch.nn.Linear(1768, 1768) for _ in range(4)])  # 12.5 M parameters
optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
x = torch.randn(8, 1768)
def step():
    optimizer.zero_grad(); model(x).sum().backward(); optimizer.step()
if not joiner:
    step()
state = hvd.elastic.TorchState(model, optimizer, step=0)
hvd.allreduce(torch.ones(1), name="ready")
start = time.perf_counter()
if sys.argv[1] == "pickled":  # the previous TorchState.sync(): pickled optimizer state, deepcopy commit
    broadcast_parameters(model.state_dict(), root_rank=0); broadcast_optimizer_state(optimizer, root_rank=0)
    copy.deepcopy(model.state_dict()); copy.deepcopy(optimizer.state_dict())
else:
    state.sync()
synced = time.perf_counter()
step()
done = time.perf_counter()
print("TIMES %.4f %.4f" % (synced - start, done - start), flush=True)
hvd.shutdown()
"""


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--build", default=os.path.join(ROOT, "build"))
    parser.add_argument("--ways", default="pickled,root,sources",
                        help="pickled: the sync before issue 28's first change; root: TorchState.sync() with "
                             "KOLO_STATE_SYNC=root (every tensor broadcast from rank 0 around the ring); sources: "
                             "TorchState.sync() (only to the newcomer, from the nearest survivor)")
    args = parser.parse_args()
    env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "python"), OMP_NUM_THREADS="1",
               KOLO_LIBRARY=os.path.join(args.build, "lib", "libkolo.so"))
    ways = args.ways.split(",")
    results = {way: [] for way in ways}
    for repeat in range(args.repeats):
        for way in (ways if repeat % 2 == 0 else ways[::-1]):  # interleaved, alternating order
            run_env = dict(env, KOLO_STATE_SYNC=way) if way in ("root", "sources") else env
            out = subprocess.run([os.path.join(args.build, "bin", "kolorun"), "-np", "3", "/usr/bin/python3", "-c",
                                  WORKER, "pickled" if way == "pickled" else "inplace"], env=run_env,
                                 capture_output=True, text=True, timeout=600)
            times = [tuple(float(v) for v in line.split("TIMES ")[1].split()) for line in out.stdout.splitlines()
                     if "TIMES " in line]
            if out.returncode != 0 or len(times) != 3:
                sys.exit("kolorun failed (%d): %s %s" % (out.returncode, out.stdout[-2000:], out.stderr[-2000:]))
            results[way].append((max(t[0] for t in times), max(t[1] for t in times)))
    print("%s, load average %.1f, %d repeats" % (time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                                                os.getloadavg()[0], args.repeats))
    print("| state sync of a 100 MB state (3 ranks, 1 newcomer) | sync (s) | to the newcomer's first step done (s) |")
    print("|---|---|---|")
    for way, rows in results.items():
        print("| %s | %.3f (%.3f-%.3f) | %.3f (%.3f-%.3f) |" % (
            way, statistics.median(r[0] for r in rows), min(r[0] for r in rows), max(r[0] for r in rows),
            statistics.median(r[1] for r in rows), min(r[1] for r in rows), max(r[1] for r in rows)))


if __name__ == "__main__":
    main()
