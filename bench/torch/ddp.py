#!/usr/bin/python3
"""DistributedDataParallel on backend "kolo" against the same script on "gloo"
(bench/torch/ddp_worker.py: one changed string): MLP, LeNet and resnet18 (synthetic
data, 32x32 images), 1 and 2 ranks launched with torchrun's variables, one torch thread
per rank, plain DDP and DDP with the PowerSGD comm hook (rank 2). Runs are interleaved
(every repetition runs every case once, the backend order alternating); the table gives
medians over repetitions of throughput (samples/s, all ranks), median step time and the
kolo/gloo ratio. Target (issue #33): kolo >= 1.2x gloo's 2-rank throughput on every model.
Not in CI; run under the heavy lock on a shared machine.

    flock -o /tmp/kolo-heavy.lock bench/torch/ddp.py              # the full table (medians of 3)
    bench/torch/ddp.py --quick                                     # a smoke run
    bench/torch/ddp.py --models resnet18 --repeats 5 --hooks none
Needs the build's _kolo_c10d.so (libtorch-dev installed)."""
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
    env = {k: v for k, v in os.environ.items() if not k.startswith("KOLO_")}
    env["PYTHONPATH"] = os.path.join(ROOT, "python")
    env["KOLO_LIBRARY"] = os.path.join(build, "lib", "libkolo.so")
    env["OMP_NUM_THREADS"] = "1"
    return env


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_one(build, backend, model, hook, ranks, steps, warmup, timeout=900):
    worker = [PYTHON, os.path.join(HERE, "ddp_worker.py"), "--backend", backend, "--model", model, "--hook", hook,
              "--batch", str(BATCH[model]), "--steps", str(steps), "--warmup", str(warmup)]
    env = environment(build)
    env.update({"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port()), "WORLD_SIZE": str(ranks)})
    procs = [subprocess.Popen(worker, env=dict(env, RANK=str(r), LOCAL_RANK=str(r)), stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for r in range(ranks)]
    outs = [p.communicate(timeout=timeout) for p in procs]
    out, code = outs[0][0], max(p.returncode for p in procs)
    match = re.search(r"RATE ([\d.]+) STEP_MS ([\d.]+) CPU_MS ([\d.]+)", out)
    if code or not match:
        raise RuntimeError("%s %s %s x%d failed (rc %s):\n%s%s" % (backend, model, hook, ranks, code, out[-2000:],
                                                                   "".join(o[1][-2000:] for o in outs)))
    return float(match.group(1)), float(match.group(2))


def first_error(text):
    """The line of a failed run's output that says what went wrong."""
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    for marker in ("what():", "Error"):  # a C++ exception's own words first
        for ln in lines:
            if marker in ln:
                return ln[:200]
    return lines[0][:200] if lines else "failed"


def cell(value, key, failures, pattern="%.1f"):
    """A table cell: the median, with how many runs failed."""
    failed = len(failures.get(key, [])) if key else 0
    text = "failed" if value != value else pattern % value
    return text + (" (%d failed)" % failed if failed and value == value else "")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", default="mlp,lenet,resnet18")
    parser.add_argument("--hooks", default="none,powersgd")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--ranks", default="1,2")
    parser.add_argument("--build", default=os.path.join(ROOT, "build"))
    parser.add_argument("--quick", action="store_true", help="1 repeat, few steps (a smoke run)")
    args = parser.parse_args()
    models, hooks = args.models.split(","), args.hooks.split(",")
    ranks_list = [int(r) for r in args.ranks.split(",")]
    repeats = 1 if args.quick else args.repeats
    with open("/proc/loadavg") as f:
        load_before = f.read().split()[:3]
    results, failures = {}, {}
    started = time.monotonic()
    for repeat in range(repeats):
        order = ["kolo", "gloo"] if repeat % 2 == 0 else ["gloo", "kolo"]
        for model in models:
            for hook in hooks:
                for ranks in ranks_list:
                    if hook != "none" and ranks == 1:
                        continue
                    for backend in order:
                        steps, warmup = (3, 1) if args.quick else (STEPS[model], 5)
                        try:
                            rate, step_ms = run_one(args.build, backend, model, hook, ranks, steps, warmup)
                        except (RuntimeError, subprocess.TimeoutExpired) as e:
                            # a backend's crash is a figure too (gloo aborts on PowerSGD + resnet18 here)
                            failures.setdefault((model, hook, ranks, backend), []).append(first_error(str(e)))
                            print("# repeat %d %-8s %-8s x%d %-4s FAILED: %s" % (
                                repeat + 1, model, hook, ranks, backend, first_error(str(e))), file=sys.stderr,
                                flush=True)
                            continue
                        results.setdefault((model, hook, ranks, backend), []).append((rate, step_ms))
                        print("# repeat %d %-8s %-8s x%d %-4s %9.1f samples/s %8.2f ms/step" % (
                            repeat + 1, model, hook, ranks, backend, rate, step_ms), file=sys.stderr, flush=True)
    with open("/proc/loadavg") as f:
        load_after = f.read().split()[:3]

    def median(key, index=0):
        values = [r[index] for r in results.get(key, [])]
        return statistics.median(values) if values else float("nan")

    print("DDP backend kolo vs gloo: medians of %d interleaved repeats, 1 torch thread per rank, batch per rank %s; "
          "load average %s before, %s after; %.0f s" % (repeats, ", ".join("%s %d" % (m, BATCH[m]) for m in models),
                                                       "/".join(load_before), "/".join(load_after),
                                                       time.monotonic() - started))
    print()
    print("| model | comm hook | ranks | kolo samples/s | gloo samples/s | kolo/gloo | target >= 1.2x | kolo ms/step "
          "| gloo ms/step |")
    print("|---|---|---|---|---|---|---|---|---|")
    verdicts = []
    for model in models:
        for hook in hooks:
            for ranks in ranks_list:
                key = (model, hook, ranks)
                if not any(key + (b,) in results or key + (b,) in failures for b in ("kolo", "gloo")):
                    continue
                k, g = median(key + ("kolo",)), median(key + ("gloo",))
                verdict = "-"
                if ranks > 1:
                    ok = k >= 1.2 * g or (g != g and k == k)  # gloo failed every run, kolo did not
                    verdict = "met" if ok else "MISSED"
                    verdicts.append(("%s %s x%d" % (model, hook, ranks), ok))
                print("| %s | %s | %d | %s | %s | %s | %s | %s | %s |" % (
                    model, hook, ranks, cell(k, key + ("kolo",), failures), cell(g, key + ("gloo",), failures),
                    "%.2fx" % (k / g) if k == k and g == g else "-", verdict,
                    cell(median(key + ("kolo",), 1), None, {}, "%.2f"), cell(median(key + ("gloo",), 1), None, {}, "%.2f")))
    for key, errors in sorted(failures.items()):
        print("- %s %s x%d %s failed %d of %d runs: %s" % (key + (len(errors), repeats, errors[0])))
    missed = [what for what, ok in verdicts if not ok]
    print()
    print("Targets: %d of %d met%s%s" % (len(verdicts) - len(missed), len(verdicts),
                                         "; missed: " + ", ".join(missed) if missed else "",
                                         " (a --quick run's figures mean nothing)" if args.quick else ""))


if __name__ == "__main__":
    main()
