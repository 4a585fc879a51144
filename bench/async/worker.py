"""One rank of bench/async/run.py: Fashion-MNIST on a 784-512-512-10 MLP
(0.67 M parameters, 2.7 MB of float32 gradients: at 100 Mbit a SYNC step is
mostly communication), STEPS steps of batch BATCH per rank, the same script in
every kolo mode (the mode comes from the job's KOLO_MODE* environment through
libkolo, as in a kolo job: hvd.DistributedOptimizer, no code change) or under
PyTorch DDP (gloo) with --ddp.

Rank 0 evaluates its replica on the first EVAL_N test images every
--eval-every steps (the clock is paused meanwhile) and records when it first
reaches --target. --slow-rank R makes rank R's compute half speed: after each step it
sleeps as long as that step's forward and backward took (the documented
slowdown knob; the time optimizer.step() spends waiting for others is not
doubled). Every rank
prints one JSON line: steps, seconds, its own network bytes sent (tx_bytes of
the namespace's eth0) and, on rank 0, the accuracy curve."""
import argparse
import json
import os
import sys
import time

import torch
import torch.nn.functional as F

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "examples", "pytorch"))
import fashion  # noqa: E402

parser = argparse.ArgumentParser()
parser.add_argument("--ddp", action="store_true")
parser.add_argument("--steps", type=int, default=300)
parser.add_argument("--batch", type=int, default=64)
parser.add_argument("--lr", type=float, default=0.05)
parser.add_argument("--eval-every", type=int, default=25)
parser.add_argument("--eval-n", type=int, default=2000)
parser.add_argument("--target", type=float, default=0.80)
parser.add_argument("--slow-rank", type=int, default=-1)
parser.add_argument("--seed", type=int, default=1)
parser.add_argument("--lr-decay", action="store_true", help="the learning rate falls linearly to 0 at the last step")


def tx_bytes():
    try:
        with open("/sys/class/net/eth0/statistics/tx_bytes") as f:
            return int(f.read())
    except OSError:
        return 0


def mlp():
    torch.manual_seed(7)
    return torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(784, 512), torch.nn.ReLU(),
                               torch.nn.Linear(512, 512), torch.nn.ReLU(), torch.nn.Linear(512, 10))


def main():
    args = parser.parse_args()
    torch.set_num_threads(1)
    train = fashion.dataset(True)
    test = fashion.dataset(False)
    tx, ty = test.tensors[0][:args.eval_n], test.tensors[1][:args.eval_n]
    if args.ddp:
        import torch.distributed as dist
        dist.init_process_group("gloo", init_method="tcp://%s:29600" % os.environ["BENCH_MASTER"],
                                rank=int(os.environ["KOLO_RANK"]), world_size=int(os.environ["KOLO_SIZE"]))
        rank, size = dist.get_rank(), dist.get_world_size()
        net = mlp()
        model = torch.nn.parallel.DistributedDataParallel(net)
        optimizer = torch.optim.SGD(model.parameters(), lr=args.lr * size, momentum=0.9)
        mode, rounds = "DDP", None
    else:
        import kolo.torch as hvd
        hvd.init()
        rank, size = hvd.rank(), hvd.size()
        net = model = mlp()
        mode = os.environ.get("BENCH_LABEL", "SYNC")
        optimizer = torch.optim.SGD(net.parameters(), lr=args.lr * hvd.lr_scale(), momentum=0.9)  # x 1 unless SYNC
        optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=net.named_parameters())
        rounds = getattr(optimizer, "_kolo_rounds", None)
        hvd.broadcast_parameters(net.state_dict(), root_rank=0)
    g = torch.Generator().manual_seed(args.seed * 100 + rank)
    x, y = train.tensors
    curve, reached, paused = [], None, 0.0
    start_bytes = tx_bytes()
    began = time.monotonic()
    compute = 0.0
    base_lrs = [group["lr"] for group in optimizer.param_groups]
    for step in range(args.steps):
        t0 = time.monotonic()
        index = torch.randint(0, x.shape[0], (args.batch,), generator=g)
        optimizer.zero_grad()
        loss = F.cross_entropy(model(x[index]), y[index])
        loss.backward()
        computed = time.monotonic() - t0
        optimizer.step()
        compute += time.monotonic() - t0
        if args.lr_decay:  # for the next step: base x (1 - done / steps)
            for group, base in zip(optimizer.param_groups, base_lrs):
                group["lr"] = base * (1.0 - (step + 1) / args.steps)
        if rank == args.slow_rank:
            time.sleep(computed)  # half compute speed
        if rank == 0 and (step + 1) % args.eval_every == 0:
            e0 = time.monotonic()
            with torch.no_grad():
                accuracy = float((net(tx).argmax(1) == ty).float().mean())
            elapsed = e0 - began - paused
            curve.append((step + 1, round(elapsed, 3), round(accuracy, 4)))
            if reached is None and accuracy >= args.target:
                reached = elapsed
            paused += time.monotonic() - e0
    train_s = time.monotonic() - began - paused
    loop_blocked = rounds.stats["blocked_seconds"] if rounds is not None else 0.0  # waits in the loop, not the join
    loop_bytes = tx_bytes() - start_bytes  # the rounds only: before the last join and the evaluation
    if rounds is not None:
        optimizer.synchronize()  # join: every rank ends with the same model
    final = None
    if rank == 0:
        with torch.no_grad():
            final = float((net(test.tensors[0]).argmax(1) == test.tensors[1]).float().mean())
    out = {"rank": rank, "mode": mode, "steps": args.steps, "train_s": round(train_s, 3),
           "steps_per_s": round(args.steps / train_s, 3), "tx_bytes": tx_bytes() - start_bytes,
           "loop_tx_bytes": loop_bytes, "loop_blocked_s": round(loop_blocked, 3),
           "reached_s": reached, "final": final, "curve": curve}
    if rounds is not None:
        out.update(rounds.report())
    print("RESULT " + json.dumps(out), flush=True)
    if args.ddp:
        import torch.distributed as dist
        dist.barrier()
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
