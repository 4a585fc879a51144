"""The model of the chaos run (bench/chaos/run.py, issue 28): data-parallel
Fashion-MNIST (examples/pytorch/fashion.py's MLP, 784-128-10), SGD with momentum,
a global batch of --global-batch images per step split over the ranks there are,
the batch of step s fixed by s alone (a seeded permutation per epoch), so a redone
step trains on the same images and any ring size trains the same trajectory.

Two backends, one model and one data order:

  --backend kolo      an elastic kolo.torch job (run by kolo-workers): TorchState
                      with commit_every=1 (state.step_done() after every step),
                      @hvd.elastic.run, hvd.DistributedOptimizer;
  --backend torchrun  torch.distributed (gloo) DDP under torchrun: rank 0 saves a
                      checkpoint every --ckpt-every steps (atomically), every
                      process loads it when torchrun (re)starts it.

It trains until step --steps, or until the file --stop-file exists (the runner
makes it: a run by time); all ranks agree every --check-every steps through one
tiny all-reduce, done in both cases so that both cost the same. Every process appends to
<--log-dir>/<pid>.log, one line each, flushed:

    START <pid> <worker> <time_ms>
    RESUME <step> <rank> <size> <time_ms>     (training (re)starts at <step>: a commit / checkpoint)
    STEP <step> <time_ms>                     (step <step> is done: gradients applied)
    END <step> <time_ms>

and rank 0 writes <--log-dir>/result.json at the end: steps, test accuracy.
"""
import argparse
import os
import sys
import time

import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "examples", "pytorch"))
import fashion  # noqa: E402

parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
parser.add_argument("--backend", choices=["kolo", "torchrun"], required=True)
parser.add_argument("--log-dir", required=True)
parser.add_argument("--steps", type=int, default=10 ** 9)
parser.add_argument("--stop-file", default="", help="stop (at a check) once this file exists")
parser.add_argument("--global-batch", type=int, default=128)
parser.add_argument("--lr", type=float, default=0.05)
parser.add_argument("--check-every", type=int, default=20)
parser.add_argument("--ckpt-every", type=int, default=50, help="torchrun: checkpoint every N steps")
parser.add_argument("--seed", type=int, default=42)


def now_ms() -> int:
    return int(time.time() * 1000)


class Log:
    """This process's line log (one write per line, line-buffered)."""

    def __init__(self, directory: str) -> None:
        self.file = open(os.path.join(directory, "%d.log" % os.getpid()), "a", buffering=1)

    def line(self, *fields: object) -> None:
        self.file.write(" ".join(str(f) for f in fields) + " %d\n" % now_ms())


class Batches:
    """The images of global step s: a seeded permutation per epoch, cut in
    global batches; rank r of n takes its share."""

    def __init__(self, data: torch.utils.data.TensorDataset, global_batch: int, seed: int) -> None:
        self.x, self.y = data.tensors
        self.global_batch, self.seed = global_batch, seed
        self.per_epoch = len(self.y) // global_batch
        self.perms = {}

    def get(self, step: int, rank: int, size: int):
        epoch, index = divmod(step, self.per_epoch)
        if epoch not in self.perms:
            generator = torch.Generator().manual_seed(self.seed + epoch)
            self.perms = {epoch: torch.randperm(len(self.y), generator=generator)}
        chosen = self.perms[epoch][index * self.global_batch:(index + 1) * self.global_batch]
        share = chosen[rank * self.global_batch // size:(rank + 1) * self.global_batch // size]
        return self.x[share], self.y[share]


def loss(output: torch.Tensor, target: torch.Tensor, size: int, global_batch: int) -> torch.Tensor:
    """This rank's share of the global batch's mean loss, times size: the ranks'
    average of its gradient is the gradient of the global batch's mean, exactly,
    even when the shares are unequal (128 images on a ring of 3)."""
    return F.nll_loss(output, target, reduction="sum") * (size / global_batch)


def accuracy(model: torch.nn.Module, test: torch.utils.data.TensorDataset) -> float:
    model.eval()
    with torch.no_grad():
        x, y = test.tensors
        return model(x).argmax(1).eq(y).float().mean().item()


class Stop:
    """When to stop: at --steps, or once --stop-file exists."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args

    def local(self, step: int) -> bool:
        return step >= self.args.steps or bool(self.args.stop_file and os.path.exists(self.args.stop_file))


def train_kolo(args: argparse.Namespace, log: Log, data, test) -> None:
    import kolo.torch as hvd
    hvd.init()
    model = fashion.model("mlp")
    optimizer = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9),
                                         named_parameters=model.named_parameters())
    state = hvd.elastic.TorchState(model, optimizer, commit_every=1, step=0, done=False)
    batches, stop = Batches(data, args.global_batch, args.seed), Stop(args)

    @hvd.elastic.run
    def train(state: hvd.elastic.TorchState) -> None:
        log.line("RESUME", state.step, hvd.rank(), hvd.size())
        while not state.done:
            x, y = batches.get(state.step, hvd.rank(), hvd.size())
            optimizer.zero_grad()
            loss(model(x), y, hvd.size(), args.global_batch).backward()
            optimizer.step()
            state.step += 1
            log.line("STEP", state.step)
            if state.step % args.check_every == 0:
                flag = torch.tensor([1.0 if stop.local(state.step) else 0.0])
                state.done = hvd.allreduce(flag, op=hvd.Max, name="chaos.stop").item() > 0
            if state.step % 50 == 0:
                hvd.report(step=state.step)
            state.step_done()  # the commit, every step

    train(state)
    log.line("END", state.step)
    if hvd.rank() == 0:
        write_result(args, state.step, accuracy(model, test), hvd.elastic.reconfigurations())
    hvd.shutdown()


def train_torchrun(args: argparse.Namespace, log: Log, data, test) -> None:
    import torch.distributed as dist
    dist.init_process_group("gloo")
    rank, size = dist.get_rank(), dist.get_world_size()
    model = fashion.model("mlp")
    ddp = torch.nn.parallel.DistributedDataParallel(model)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    path = os.path.join(args.log_dir, "checkpoint.pt")
    step = 0
    if os.path.exists(path):
        saved = torch.load(path)
        model.load_state_dict(saved["model"])
        optimizer.load_state_dict(saved["optimizer"])
        step = saved["step"]
    batches, stop, done = Batches(data, args.global_batch, args.seed), Stop(args), False
    log.line("RESUME", step, rank, size)
    while not done:
        x, y = batches.get(step, rank, size)
        optimizer.zero_grad()
        loss(ddp(x), y, size, args.global_batch).backward()
        optimizer.step()
        step += 1
        log.line("STEP", step)
        if step % args.check_every == 0:
            flag = torch.tensor([1.0 if stop.local(step) else 0.0])
            dist.all_reduce(flag, op=dist.ReduceOp.MAX)
            done = flag.item() > 0
        if rank == 0 and (step % args.ckpt_every == 0 or done):
            torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(), "step": step},
                       path + ".tmp")
            os.replace(path + ".tmp", path)
    log.line("END", step)
    if rank == 0:
        write_result(args, step, accuracy(model, test), 0)
    dist.destroy_process_group()


def write_result(args: argparse.Namespace, steps: int, acc: float, reforms: int) -> None:
    import json
    with open(os.path.join(args.log_dir, "result.json.tmp"), "w") as f:
        json.dump({"steps": steps, "accuracy": acc, "reconfigurations": reforms, "pid": os.getpid()}, f)
    os.replace(os.path.join(args.log_dir, "result.json.tmp"), os.path.join(args.log_dir, "result.json"))


def main() -> None:
    args = parser.parse_args()
    log = Log(args.log_dir)
    log.line("START", os.getpid(), os.environ.get("KOLO_WORKER_ID", os.environ.get("LOCAL_RANK", "-")))
    torch.manual_seed(args.seed)
    torch.set_num_threads(1)
    data, test = fashion.dataset(True), fashion.dataset(False)
    if args.backend == "kolo":
        train_kolo(args, log, data, test)
    else:
        train_torchrun(args, log, data, test)


if __name__ == "__main__":
    main()
