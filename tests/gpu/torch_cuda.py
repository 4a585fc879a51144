#!/usr/bin/python3
"""kolo.torch on CUDA tensors (for a machine with NVIDIA GPUs, a CUDA build of
PyTorch and kolo built with CUDA + NCCL): every device collective and
DistributedOptimizer on one GPU per rank, checked against the same computation
on host tensors. Exits 77 (skipped) without a usable GPU or a CUDA torch.

    tests/gpu/torch_cuda.py [--ranks N]       (uses build/ unless KOLO_BIN_DIR is set)
Prints 'TORCH-CUDA: OK <checks>' per rank on success."""
import argparse
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


def rank_main() -> None:
    import torch
    import kolo.torch as hvd

    hvd.init()
    rank, size = hvd.rank(), hvd.size()
    torch.cuda.set_device(hvd.local_rank() % torch.cuda.device_count())
    device = torch.device("cuda", torch.cuda.current_device())
    checks = 0

    def same(what, got, want):
        nonlocal checks
        assert got.device.type == "cuda", (what, got.device)
        assert torch.allclose(got.cpu().double(), want.cpu().double(), atol=1e-3), (what, got, want)
        checks += 1

    for dtype in (torch.float32, torch.float64, torch.float16, torch.int32, torch.int64, torch.uint8):
        host = (torch.arange(1000) % 7 + rank).to(dtype)
        # written by a kernel on a side stream just before the call: the stream order must hold
        stream = torch.cuda.Stream()
        with torch.cuda.stream(stream):
            dev = host.to(device, non_blocking=True) * 1
            same("allreduce %s" % dtype, hvd.allreduce(dev, op=hvd.Sum), hvd.allreduce(host, op=hvd.Sum))
        same("broadcast %s" % dtype, hvd.broadcast(host.to(device), root_rank=size - 1),
             hvd.broadcast(host, root_rank=size - 1))
        rows = torch.ones(rank + 1, 3, dtype=dtype) * rank
        same("allgather %s" % dtype, hvd.allgather(rows.to(device)), hvd.allgather(rows))
        even = torch.ones(size * 2, 2, dtype=dtype) * (rank + 1)
        same("reducescatter %s" % dtype, hvd.reducescatter(even.to(device), op=hvd.Sum),
             hvd.reducescatter(even, op=hvd.Sum))
        same("alltoall %s" % dtype, hvd.alltoall(even.to(device)), hvd.alltoall(even))
    same("prescale", hvd.allreduce(torch.ones(5, device=device), op=hvd.Sum, prescale_factor=2.0),
         torch.full((5,), 2.0 * size))

    torch.manual_seed(0)
    gpu_model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4)).to(device)
    cpu_model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
    cpu_model.load_state_dict({k: v.cpu() for k, v in gpu_model.state_dict().items()})
    optimizers = [hvd.DistributedOptimizer(torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9),
                                           named_parameters=[(("gpu." if m is gpu_model else "cpu.") + n, p)
                                                             for n, p in m.named_parameters()])
                  for m in (gpu_model, cpu_model)]
    for step in range(5):
        x = torch.randn(8, 16, generator=torch.Generator().manual_seed(step * size + rank))
        for model, optimizer, inputs in ((gpu_model, optimizers[0], x.to(device)), (cpu_model, optimizers[1], x)):
            optimizer.zero_grad()
            model(inputs).pow(2).mean().backward()
            optimizer.step()
    for (name, g), c in zip(gpu_model.state_dict().items(), cpu_model.state_dict().values()):
        same("DistributedOptimizer %s" % name, g, c)
    print("TORCH-CUDA: OK %d" % checks, flush=True)
    hvd.shutdown()


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--ranks", type=int, default=0)
    parser.add_argument("--rank", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.rank:
        rank_main()
        return 0
    probe = subprocess.run(["/usr/bin/python3", "-c", "import torch; print(torch.cuda.device_count())"],
                           capture_output=True, text=True)
    gpus = int(probe.stdout.strip() or 0) if probe.returncode == 0 else 0
    if gpus < 1:
        print("torch_cuda: skipped: this torch sees no CUDA device (%s)" % (probe.stdout.strip() or probe.stderr[-200:]))
        return 77
    ranks = args.ranks or min(gpus, 2)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.path.join(ROOT, "python")
    bin_dir = env.get("KOLO_BIN_DIR", os.path.join(ROOT, "build", "bin"))
    result = subprocess.run([os.path.join(bin_dir, "kolorun"), "-np", str(ranks), "--timeout", "600",
                             "/usr/bin/python3", os.path.abspath(__file__), "--rank"], env=env)
    return result.returncode


if __name__ == "__main__":
    sys.exit(main())
