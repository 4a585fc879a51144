#!/usr/bin/python3
"""kolo.torch against PyTorch's DistributedDataParallel (gloo): same model, same
per-rank batch, one torch thread per rank, 1 and 2 ranks on this host. Runs are
interleaved (every repetition runs every model x ranks x backend once, the
backend order alternating), and the table gives medians over repetitions:
throughput (samples/s, all ranks), median step time, the kolo/DDP ratio and each
backend's scaling efficiency (2-rank throughput / (2 x 1-rank throughput)), and
rank 0's CPU time per step (all its threads: compute plus what the backend costs,
whatever else the machine runs).

    bench/torch/run.py                 # the full table (~10 min on 2 quiet cores)
    bench/torch/run.py --quick         # a smoke run
    bench/torch/run.py --models resnet18 --repeats 7
Needs the release build (build/bin/kolorun, build/lib/libkolo.so)."""
import argparse
import os
import re
import socket
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
PYTHON = "/usr/bin/python3"
BATCH = {"mlp": 64, "lenet": 64, "resnet18": 16}
STEPS = {"mlp": 200, "lenet": 60, "resnet18": 12}


def environment(build):
    env = dict(os.environ)
    for name in list(env):
        if name.startswith("KOLO_") and name not in ("KOLO_LIBRARY",):
            del env[name]
    env["PYTHONPATH"] = os.path.join(ROOT, "python")
    env.setdefault("KOLO_LIBRARY", os.path.join(build, "lib", "libkolo.so"))
    env["OMP_NUM_THREADS"] = "1"
    return env


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_one(build, backend, model, ranks, steps, warmup, timeout=900, overlap=False):
    worker = [PYTHON, os.path.join(HERE, "worker.py"), "--backend", backend, "--model", model, "--batch",
              str(BATCH[model]), "--steps", str(steps), "--warmup", str(warmup)] + (["--overlap"] if overlap else [])
    env = environment(build)
    if backend == "kolo":
        proc = subprocess.run([os.path.join(build, "bin", "kolorun"), "-np", str(ranks)] + worker, env=env,
                              capture_output=True, text=True, timeout=timeout)
        out, code = proc.stdout, proc.returncode
    else:
        env.update({"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port()), "WORLD_SIZE": str(ranks)})
        procs = [subprocess.Popen(worker, env=dict(env, RANK=str(r), LOCAL_RANK=str(r)), stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True) for r in range(ranks)]
        outs = [p.communicate(timeout=timeout) for p in procs]
        out = outs[0][0]
        code = max(p.returncode for p in procs)
        if code:
            out += "".join(o[1] for o in outs)
    match = re.search(r"RATE ([\d.]+) STEP_MS ([\d.]+) CPU_MS ([\d.]+)", out)
    if code or not match:
        raise RuntimeError("%s %s x%d failed (rc %s):\n%s" % (backend, model, ranks, code, out[-3000:]))
    extra = re.search(r"OVERLAP compute_ms ([\d.]+) comm_ms ([\d.]+)", out)
    if extra:
        OVERLAP.setdefault(model, []).append((float(extra.group(1)), float(extra.group(2)), float(match.group(2))))
    return float(match.group(1)), float(match.group(2)), float(match.group(3))


OVERLAP = {}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", default="mlp,lenet,resnet18")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--ranks", default="1,2")
    parser.add_argument("--build", default=os.path.join(ROOT, "build"))
    parser.add_argument("--quick", action="store_true", help="1 repeat, few steps (a smoke run)")
    args = parser.parse_args()
    models = args.models.split(",")
    ranks_list = [int(r) for r in args.ranks.split(",")]
    repeats = 1 if args.quick else args.repeats
    with open("/proc/loadavg") as f:
        load_before = f.read().split()[:3]
    results = {}
    started = time.monotonic()
    for repeat in range(repeats):
        order = ["kolo", "ddp"] if repeat % 2 == 0 else ["ddp", "kolo"]
        for model in models:
            for ranks in ranks_list:
                for backend in order:
                    steps = 3 if args.quick else STEPS[model]
                    warmup = 1 if args.quick else 5
                    rate, step_ms, cpu_ms = run_one(args.build, backend, model, ranks, steps, warmup,
                                                    overlap=backend == "kolo" and ranks == 2)
                    results.setdefault((model, ranks, backend), []).append((rate, step_ms, cpu_ms))
                    print("# repeat %d %-8s x%d %-4s %9.1f samples/s %8.2f ms/step %8.2f CPU ms/step" % (
                        repeat + 1, model, ranks, backend, rate, step_ms, cpu_ms), file=sys.stderr, flush=True)
    with open("/proc/loadavg") as f:
        load_after = f.read().split()[:3]

    def median(model, ranks, backend, index=0):
        values = [r[index] for r in results.get((model, ranks, backend), [])]
        return statistics.median(values) if values else float("nan")

    print("kolo.torch vs DDP (gloo): medians of %d interleaved repeats, 1 torch thread per rank, batch per rank "
          "%s; load average %s before, %s after; %.0f s" % (repeats, ", ".join("%s %d" % (m, BATCH[m]) for m in models),
                                                           "/".join(load_before), "/".join(load_after),
                                                           time.monotonic() - started))
    print()
    print("| model | ranks | kolo samples/s | DDP samples/s | kolo/DDP | kolo ms/step | DDP ms/step "
          "| kolo CPU ms/step | DDP CPU ms/step |")
    print("|---|---|---|---|---|---|---|---|---|")
    for model in models:
        for ranks in ranks_list:
            k, d = median(model, ranks, "kolo"), median(model, ranks, "ddp")
            print("| %s | %d | %.1f | %.1f | %.2fx | %.2f | %.2f | %.2f | %.2f |" % (
                model, ranks, k, d, k / d, median(model, ranks, "kolo", 1), median(model, ranks, "ddp", 1),
                median(model, ranks, "kolo", 2), median(model, ranks, "ddp", 2)))
    if 1 in ranks_list and len(ranks_list) > 1:
        print()
        print("| model | ranks | kolo scaling efficiency | DDP scaling efficiency |")
        print("|---|---|---|---|")
        for model in models:
            for ranks in ranks_list:
                if ranks == 1:
                    continue
                ke = median(model, ranks, "kolo") / (ranks * median(model, 1, "kolo"))
                de = median(model, ranks, "ddp") / (ranks * median(model, 1, "ddp"))
                print("| %s | %d | %.2f | %.2f |" % (model, ranks, ke, de))
    if OVERLAP:
        print()
        print("Overlap at 2 ranks (kolo, rank 0 medians): compute alone, the gradients' all-reduce alone, and the")
        print("kolo step; a step near max(compute, all-reduce) overlaps, near their sum does not.")
        print()
        print("| model | compute ms | all-reduce ms | max | sum | kolo step ms |")
        print("|---|---|---|---|---|---|")
        for model in models:
            rows = OVERLAP.get(model)
            if not rows:
                continue
            compute = statistics.median(r[0] for r in rows)
            comm = statistics.median(r[1] for r in rows)
            step = statistics.median(r[2] for r in rows)
            print("| %s | %.2f | %.2f | %.2f | %.2f | %.2f |" % (model, compute, comm, max(compute, comm),
                                                               compute + comm, step))


if __name__ == "__main__":
    main()
