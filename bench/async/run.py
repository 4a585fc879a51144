#!/usr/bin/python3
"""kolo's training modes against SYNC and PyTorch DDP (gloo) between hosts that
are network namespaces (tests/support/netns.sh), one rank per host, each link
limited by tc: time to a target test accuracy on Fashion-MNIST, final accuracy,
bytes each rank sent (its eth0's tx_bytes: everything on the wire), and the
steps per second of the ranks that are not slowed, for kolo SYNC, DDP, ASYNC,
LOCAL_SGD, DILOCO and DILOCO with int8 outer gradients (each also _OVERLAP: the
round's average folded in one round late, KOLO_MODE_MAX_STALENESS=1); runs interleaved,
medians over --repeats; with --slow every run is followed by the same with
rank 3 at half speed (its forward and backward doubled: worker.py).

The mode reaches each rank as a kolo job's would: the KOLO_MODE* environment,
read by libkolo (kolo_mode_from_env) when bench/async/worker.py builds
hvd.DistributedOptimizer; the worker's code is the same in every mode.

Usage: bench/async/run.py [--rates 100mbit,1gbit] [--repeats 3] [--steps 300] [--lr-decay] [--inner-steps H]
                          [--configs SYNC,DDP,...] [--slow [--slow-rates 100mbit] [--slow-configs ...]]
                          [--ranks 4]
Needs root (namespaces) and a build (KOLO_BIN_DIR, default build/bin)."""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tests", "support"))
from netns import HostSet, NamespacesUnavailable  # noqa: E402

WORKER = os.path.join(ROOT, "bench", "async", "worker.py")
PYTHON = "/usr/bin/python3"

# label -> (KOLO_MODE* environment, worker arguments)
CONFIGS = {
    "SYNC": ({}, []),
    "DDP": ({}, ["--ddp"]),
    "ASYNC": ({"KOLO_MODE": "ASYNC", "KOLO_MODE_SYNC_EVERY": "10", "KOLO_MODE_MAX_STALENESS": "1"}, []),
    "LOCAL_SGD": ({"KOLO_MODE": "LOCAL_SGD", "KOLO_MODE_SYNC_EVERY": "30"}, []),
    "DILOCO": ({"KOLO_MODE": "DILOCO", "KOLO_MODE_SYNC_EVERY": "30"}, []),
    "DILOCO_INT8": ({"KOLO_MODE": "DILOCO", "KOLO_MODE_SYNC_EVERY": "30", "KOLO_MODE_COMPRESSION": "int8"}, []),
    # H fixed at 60 (not --inner-steps): the bytes target's config
    "DILOCO_INT8_H60": ({"KOLO_MODE": "DILOCO", "KOLO_MODE_SYNC_EVERY": "60", "KOLO_MODE_COMPRESSION": "int8"}, []),
    # the round's average overlapped with the next round (folded in one round late)
    "LOCAL_SGD_OVERLAP": ({"KOLO_MODE": "LOCAL_SGD", "KOLO_MODE_SYNC_EVERY": "30", "KOLO_MODE_MAX_STALENESS": "1"}, []),
    "DILOCO_OVERLAP": ({"KOLO_MODE": "DILOCO", "KOLO_MODE_SYNC_EVERY": "30", "KOLO_MODE_MAX_STALENESS": "1"}, []),
    "DILOCO_INT8_OVERLAP": ({"KOLO_MODE": "DILOCO", "KOLO_MODE_SYNC_EVERY": "30", "KOLO_MODE_COMPRESSION": "int8",
                             "KOLO_MODE_MAX_STALENESS": "1"}, []),
}
# the configs whose H is --inner-steps
INNER_STEPS = ("LOCAL_SGD", "DILOCO", "DILOCO_INT8", "LOCAL_SGD_OVERLAP", "DILOCO_OVERLAP", "DILOCO_INT8_OVERLAP")


def run_once(hosts, n, label, args, slow):
    mode_env, extra = CONFIGS[label]
    if label in INNER_STEPS:
        mode_env = dict(mode_env, KOLO_MODE_SYNC_EVERY=str(args.inner_steps))
    procs = []
    for rank in range(n):
        env = ["env", "KOLO_RANK=%d" % rank, "KOLO_SIZE=%d" % n, "KOLO_LOCAL_RANK=0", "KOLO_LOCAL_SIZE=1",
               "KOLO_HOST=%s" % hosts.addresses[rank], "KOLO_RENDEZVOUS=%s:29500" % hosts.addresses[0],
               "KOLO_SECRET=bench", "KOLO_TIMEOUT=300", "BENCH_MASTER=%s" % hosts.addresses[0],
               "BENCH_LABEL=%s" % label, "GLOO_SOCKET_IFNAME=eth0", "OMP_NUM_THREADS=1",
               "PYTHONPATH=%s" % os.path.join(ROOT, "python")] + ["%s=%s" % kv for kv in mode_env.items()]
        argv = [PYTHON, WORKER, "--steps", str(args.steps), "--target", str(args.target)] + extra
        if slow:
            argv += ["--slow-rank", str(n - 1)]
        if args.lr_decay:
            argv += ["--lr-decay"]
        procs.append(subprocess.Popen(hosts.command(rank, env + argv), stdout=subprocess.PIPE,
                                      stderr=subprocess.STDOUT, text=True))
    outputs = [p.communicate(timeout=1800)[0] for p in procs]
    if any(p.returncode for p in procs):
        raise RuntimeError("%s failed:\n%s" % (label, "\n".join(o[-3000:] for o in outputs)))
    results = []
    for text in outputs:
        line = [ln for ln in text.splitlines() if ln.startswith("RESULT ")][-1]
        results.append(json.loads(line[len("RESULT "):]))
    return sorted(results, key=lambda r: r["rank"])


def summary(results, slow):
    rank0 = results[0]
    fast = [r for r in results if not (slow and r["rank"] == len(results) - 1)]
    return {"reached_s": rank0["reached_s"], "final": rank0["final"],
            "mbytes": statistics.mean(r["tx_bytes"] for r in results) / 1e6,
            "loop_kb_per_step": statistics.mean(r["loop_tx_bytes"] / r["steps"] for r in results) / 1e3,
            "steps_per_s": statistics.mean(r["steps_per_s"] for r in fast),
            "blocked_s": statistics.mean(r.get("blocked_seconds", 0.0) for r in fast),
            # the share of the loop the unslowed ranks spent waiting for others (the straggler's cost,
            # apart from the CPU a sleeping rank frees for the others on a shared machine)
            "loop_blocked_pct": statistics.mean(100.0 * r.get("loop_blocked_s", 0.0) / r["train_s"] for r in fast),
            "staleness": max(r.get("staleness", 0) for r in results)}


def median(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def fmt(value, pattern):
    return "-" if value is None else pattern % value


def table(rate, slow, rows, configs, base, finals=None):
    print("\n### %s, 4 hosts x 1 rank%s\n" % (rate, ", rank 3 at half speed" if slow else ""))
    print("| mode | time to target (s) | final accuracy | MB sent per rank | kB per step in the loop |"
          " steps/s (unslowed ranks) | of undisturbed | accuracy vs undisturbed | blocked s |"
          " loop blocked | staleness |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for label in configs:
        runs = rows[label]
        reached = [r["reached_s"] for r in runs]
        speed = median([r["steps_per_s"] for r in runs])
        ref = base.get(label) if base else None
        final = median([r["final"] for r in runs])
        ref_final = finals.get(label) if finals else None
        print("| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |" % (
            label, fmt(median(reached), "%.1f") + ("" if all(v is not None for v in reached) else
                                                   " (%d/%d reached)" % (sum(v is not None for v in reached),
                                                                         len(reached))),
            fmt(median([r["final"] for r in runs]), "%.4f"), fmt(median([r["mbytes"] for r in runs]), "%.1f"),
            fmt(median([r["loop_kb_per_step"] for r in runs]), "%.1f"),
            fmt(speed, "%.2f"), fmt(100 * speed / ref if ref and speed else None, "%.0f%%"),
            fmt(100 * (final - ref_final) if final is not None and ref_final is not None else None, "%+.1f pt"),
            fmt(median([r["blocked_s"] for r in runs]), "%.1f"),
            fmt(median([r.get("loop_blocked_pct") for r in runs]), "%.1f%%"),
            fmt(median([r["staleness"] for r in runs]), "%d")))
    sys.stdout.flush()


def measure(hosts, rate, configs, args):
    """Every repeat runs every config once, undisturbed and then (--slow) with
    the last rank slowed, so the slow/undisturbed ratios compare runs taken
    minutes apart on a machine whose load drifts."""
    slowed = args.slow and rate in args.slow_rates.split(",")
    slow_configs = (args.slow_configs.split(",") if args.slow_configs else configs) if slowed else []
    rows = {(label, False): [] for label in configs}
    rows.update({(label, True): [] for label in slow_configs})
    for repeat in range(args.repeats):
        for label in configs:  # interleaved
            for slow in ([False, True] if label in slow_configs else [False]):
                began = time.monotonic()
                results = run_once(hosts, args.ranks, label, args, slow)
                rows[(label, slow)].append(summary(results, slow))
                print("# %s %s%s run %d: %s (%.0f s)" % (rate, label, " slow" if slow else "", repeat + 1,
                                                        json.dumps(rows[(label, slow)][-1]),
                                                        time.monotonic() - began), flush=True)
    undisturbed = {label: rows[(label, False)] for label in configs}
    table(rate, False, undisturbed, configs, None)
    if slow_configs:
        base = {label: median([r["steps_per_s"] for r in undisturbed[label]]) for label in configs}
        finals = {label: median([r["final"] for r in undisturbed[label]]) for label in configs}
        table(rate, True, {label: rows[(label, True)] for label in slow_configs}, slow_configs, base, finals)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--rates", default="100mbit,1gbit")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--target", type=float, default=0.80)
    parser.add_argument("--configs", default=",".join(CONFIGS))
    parser.add_argument("--slow", action="store_true", help="also run with the last rank at half speed")
    parser.add_argument("--slow-rates", default="100mbit", help="the rates at which --slow runs")
    parser.add_argument("--slow-configs", default="", help="the configs --slow runs (default: --configs)")
    parser.add_argument("--ranks", type=int, default=4)
    parser.add_argument("--lr-decay", action="store_true", help="every config's learning rate falls linearly to 0")
    parser.add_argument("--inner-steps", type=int, default=30, help="H of LOCAL_SGD and DILOCO (steps per round)")
    args = parser.parse_args()
    configs = args.configs.split(",")
    print("bench/async: %d steps of batch 64 per rank, target %.2f, medians of %d, configs %s, H %d%s"
          % (args.steps, args.target, args.repeats, ", ".join(configs), args.inner_steps,
             ", lr decayed linearly to 0" if args.lr_decay else ""), flush=True)
    for rate in args.rates.split(","):
        try:
            hosts = HostSet(args.ranks, rate)
        except NamespacesUnavailable as error:
            print("SKIP: %s" % error)
            return 77
        try:
            measure(hosts, rate, configs, args)
        finally:
            hosts.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
