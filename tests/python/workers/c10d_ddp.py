"""One rank of test_torch_backend's DDP checks. The default process group is backend
"kolo", a second one over the same ranks is gloo; every case trains two copies of one
model (same seed, same per-rank data) with DistributedDataParallel, one on each group,
and the weights must agree (allclose: the ranks' sums may round in another order).
Cases: small buckets (several all-reduces overlapping backward), static_graph, no_sync
accumulation, the fp16 and PowerSGD comm hooks, Join with uneven inputs.
Prints "CASE <name> <max abs difference>" per case and "OK"."""
from __future__ import annotations

import sys
from typing import Callable, List, Optional, Tuple

import torch
import torch.distributed as dist
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as powersgd
from torch.distributed.algorithms.join import Join
from torch.nn.parallel import DistributedDataParallel as DDP

import kolo.torch.distributed  # noqa: F401  (registers backend "kolo")


def model() -> torch.nn.Module:
    torch.manual_seed(7)
    return torch.nn.Sequential(torch.nn.Linear(20, 64), torch.nn.ReLU(), torch.nn.Linear(64, 32),
                               torch.nn.ReLU(), torch.nn.Linear(32, 4))


def batches(rank: int, count: int) -> List[Tuple[torch.Tensor, torch.Tensor]]:
    generator = torch.Generator().manual_seed(100 + rank)
    return [(torch.randn(8, 20, generator=generator), torch.randint(0, 4, (8,), generator=generator))
            for _ in range(count)]


def train(ddp: DDP, data: List[Tuple[torch.Tensor, torch.Tensor]], accumulate: int = 1,
          join: bool = False) -> None:
    optimizer = torch.optim.SGD(ddp.parameters(), lr=0.1, momentum=0.9)
    loss_fn = torch.nn.CrossEntropyLoss()

    def steps() -> None:
        for i, (x, y) in enumerate(data):
            last = (i + 1) % accumulate == 0
            if last:
                loss_fn(ddp(x), y).backward()
                optimizer.step()
                optimizer.zero_grad()
            else:
                with ddp.no_sync():
                    loss_fn(ddp(x), y).backward()

    if join:
        with Join([ddp]):
            steps()
    else:
        steps()


def compare(name: str, make: Callable[[Optional[dist.ProcessGroup]], DDP], gloo: dist.ProcessGroup,
            run: Callable[[DDP], None], tolerance: float = 1e-5) -> None:
    ours, theirs = make(None), make(gloo)
    run(ours)
    run(theirs)
    worst = max((a - b).abs().max().item() for a, b in zip(ours.parameters(), theirs.parameters()))
    start = model()
    moved = max((a - b).abs().max().item() for a, b in zip(ours.parameters(), start.parameters()))
    print("CASE %s %.3g" % (name, worst), flush=True)
    assert moved > 1e-3, "%s: the weights did not train (%g)" % (name, moved)
    assert worst <= tolerance, "%s: kolo and gloo weights differ by %g" % (name, worst)
    # every rank holds the same weights
    flat = torch.cat([p.detach().reshape(-1) for p in ours.parameters()])
    low, high = flat.clone(), flat.clone()
    dist.all_reduce(low, op=dist.ReduceOp.MIN)
    dist.all_reduce(high, op=dist.ReduceOp.MAX)
    assert torch.equal(low, high), "%s: ranks disagree" % name


def check_no_sync_keeps_gradients_local(rank: int) -> None:
    ddp = DDP(model())
    x, y = batches(rank, 1)[0]
    with ddp.no_sync():
        torch.nn.functional.cross_entropy(ddp(x), y).backward()
    grad = next(ddp.parameters()).grad.detach().reshape(-1)
    low, high = grad.clone(), grad.clone()
    dist.all_reduce(low, op=dist.ReduceOp.MIN)
    dist.all_reduce(high, op=dist.ReduceOp.MAX)
    assert not torch.equal(low, high), "no_sync: gradients were all-reduced"
    print("CASE no_sync_local 0", flush=True)


def main() -> None:
    dist.init_process_group(backend="kolo")
    rank, size = dist.get_rank(), dist.get_world_size()
    gloo = dist.new_group(backend="gloo")
    data = batches(rank, 6)

    def plain(**kwargs) -> Callable[[Optional[dist.ProcessGroup]], DDP]:
        return lambda group: DDP(model(), process_group=group, **kwargs)

    # ~2 KB buckets: each layer's gradients go out while backward still runs
    compare("buckets", plain(bucket_cap_mb=0.002), gloo, lambda d: train(d, data))
    compare("static_graph", plain(static_graph=True, bucket_cap_mb=0.002), gloo, lambda d: train(d, data))
    compare("no_sync", plain(), gloo, lambda d: train(d, data, accumulate=3))
    check_no_sync_keeps_gradients_local(rank)

    def fp16(group: Optional[dist.ProcessGroup]) -> DDP:
        ddp = DDP(model(), process_group=group)
        ddp.register_comm_hook(group, default_hooks.fp16_compress_hook)
        return ddp

    compare("fp16_hook", fp16, gloo, lambda d: train(d, data), tolerance=1e-3)

    def power(group: Optional[dist.ProcessGroup]) -> DDP:
        ddp = DDP(model(), process_group=group)
        state = powersgd.PowerSGDState(process_group=group, matrix_approximation_rank=1,
                                       start_powerSGD_iter=2, random_seed=5)
        ddp.register_comm_hook(state, powersgd.powerSGD_hook)
        return ddp

    compare("powersgd_hook", power, gloo, lambda d: train(d, data), tolerance=1e-4)
    # uneven inputs: rank r has 3 + r batches; the others shadow its extra steps
    uneven = batches(rank, 3 + rank)
    compare("join", plain(), gloo, lambda d: train(d, uneven, join=True))
    dist.destroy_process_group()
    print("OK", flush=True)


if __name__ == "__main__":
    torch.set_num_threads(1)
    main()
    sys.exit(0)
