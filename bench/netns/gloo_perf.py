#!/usr/bin/python3
"""PyTorch's gloo all-reduce timed like kolo-allreduce-perf (float32 sum, nccl-tests rows:
size, count, type, redop, time us, algbw, busbw, wrong), for bench/netns/run.py.

Usage (one process per rank): gloo_perf.py RANK SIZE MASTER_ADDR:PORT -b 4K -e 64M -f 4 -w 3 -n 10
GLOO_SOCKET_IFNAME picks the interface (run.py sets eth0, the namespace's link)."""
import os
import sys
import time

import torch
import torch.distributed as dist


def parse_size(text):
    scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1].upper(), 1)
    return int(text[:-1] if scale > 1 else text) * scale


def main():
    rank, size, master = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
    opts = dict(zip(sys.argv[4::2], sys.argv[5::2]))
    low, high = parse_size(opts["-b"]), parse_size(opts["-e"])
    factor, warmup, iters = int(opts["-f"]), int(opts["-w"]), int(opts["-n"])
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method="tcp://" + master, rank=rank, world_size=size)
    if rank == 0:
        print("# gloo_perf: %d ranks, float32 sum, torch %s" % (size, torch.__version__))
    nbytes = low
    while nbytes <= high:
        count = nbytes // 4
        data = torch.full((count,), float(rank + 1))
        for _ in range(warmup):
            dist.all_reduce(data)
        dist.barrier()
        times = []
        for _ in range(iters):
            data.fill_(float(rank + 1))
            start = time.perf_counter()
            dist.all_reduce(data)
            times.append(time.perf_counter() - start)
        wrong = int((data != size * (size + 1) / 2).sum())
        slowest = torch.tensor([sorted(times)[len(times) // 2]], dtype=torch.float64)
        dist.all_reduce(slowest, op=dist.ReduceOp.MAX)  # like kolo-allreduce-perf: max of medians
        seconds = float(slowest[0])
        algbw = nbytes / seconds / 1e9
        busbw = algbw * 2 * (size - 1) / size
        if rank == 0:
            print(" %12d %12d %8s %6s %12.2f %10.3f %10.3f %8d" % (nbytes, count, "float", "sum", seconds * 1e6,
                                                                  algbw, busbw, wrong))
            sys.stdout.flush()
        nbytes *= factor
    dist.barrier()
    dist.destroy_process_group()
    os._exit(0)


if __name__ == "__main__":
    main()
