#!/usr/bin/python3
"""Joiner benchmark (issue 28, "state for joiners from several peers"): the time
from starting a new kolo-worker to the newcomer's first step on the grown ring,
when the job's state is --state-mb MiB (default 100), with the state sync from
several sources (KOLO_STATE_SYNC=sources; on one host libkolo's auto takes root) against
the old one (KOLO_STATE_SYNC=root: every buffer broadcast from rank 0 around the whole
ring), interleaved.

Real etcd, kolo-server and kolo-workers on 127.0.0.1 (bench/recovery/run.py's
Cluster); the job runs bench/recovery/recovery_loop with KOLO_STATE_MB (one
buffer of that size, one word changed and committed every step) on a ring of 2
(min 2, max 3). Each round starts a third worker and measures:
  join   = kolo-worker started -> the newcomer's first step on the ring of 3
           (registration, WORKER_JOINED, its process starting, the re-form, the
           state sync, one step);
  sync   = WORKER_JOINED -> that step (the part the state sync is in);
then SIGKILLs the newcomer and measures
  loss   = the kill -> rank 0's first step on the ring of 2 again (the survivors
           hold the same commit: the new path moves no state at all).
Variants alternate cluster by cluster (--reps clusters each, --rounds rounds per
cluster). Prints one line per round, the medians per variant, the load, and a
JSON summary on the last line. Run it under flock -o /tmp/kolo-heavy.lock.

Usage: bench/elastic/joiner.py [--build build] [--state-mb 100] [--reps 3] [--rounds 3]"""
import argparse, importlib.util, json, os, shutil, statistics, subprocess, tempfile, time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_spec = importlib.util.spec_from_file_location("recovery_run", os.path.join(ROOT, "bench/recovery/run.py"))
rec = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(rec)

VARIANTS = {"sources": {"KOLO_STATE_SYNC": "sources"}, "root": {"KOLO_STATE_SYNC": "root"}}


class JoinCluster(rec.Cluster):
    """bench/recovery's cluster whose job carries KOLO_STATE_MB and the variant's env."""

    def __init__(self, args, program, tmp, env, job_env):
        self.job_env = job_env
        super().__init__(args, program, tmp, env)

    def submit(self, job):
        env = {"KOLO_STEP_DIR": self.steps, "KOLO_STATE_MB": str(self.args.state_mb)}
        env.update(self.job_env)
        rec.http(self.port, "POST", "/v1/jobs", {
            "id": job, "name": "joiner", "min_workers": 2, "max_workers": 3, "max_reconfigurations": 1000,
            "exec": {"argv": [self.program, "100000000", "1024", str(self.args.step_ms)], "env": env}})


def join_round(c, job):
    """One newcomer: its join, then its loss."""
    j = rec.wait("a ring of 2", lambda: c.ring(job, 2), 120)
    c.settle(job, j)
    j = c.status(job)
    rank0 = j["status"]["members"][0]["worker_id"]
    seen = len(j["events"])
    t0 = rec.now_ms()
    wid = c.start_worker()
    event = rec.wait("WORKER_JOINED", lambda: c.event_after(job, seen, "WORKER_JOINED"), 60)
    t_step = rec.wait("the newcomer's first step", lambda: c.first_step(wid, event["epoch"]), 120)
    j3 = rec.wait("the ring of 3 running", lambda: c.ring(job, 3), 60)
    c.settle(job, j3)
    seen = len(c.status(job)["events"])
    t_kill = rec.now_ms()
    c.workers[wid].kill()
    c.workers[wid].wait()
    lost = rec.wait("WORKER_LOST", lambda: c.event_after(job, seen, "WORKER_LOST"), 60)
    t_back = rec.wait("a step on the ring of 2", lambda: c.first_step(rank0, lost["epoch"]), 120)
    return {"join_ms": t_step - t0, "sync_ms": t_step - event["time_unix_ms"], "loss_ms": t_back - t_kill}


def run_cluster(args, program, variant):
    tmp = tempfile.mkdtemp(prefix="kolo-joiner-")
    c = None
    try:
        c = JoinCluster(args, program, tmp, dict(os.environ), VARIANTS[variant])
        for _ in range(2):
            c.start_worker()
        c.submit("bench")
        rows = []
        for r in range(args.rounds):
            row = join_round(c, "bench")
            rows.append(row)
            print(f"{variant} round {r + 1}: " + ", ".join(f"{k} {v}" for k, v in row.items()), flush=True)
        return rows
    finally:
        if c:
            c.stop()
        shutil.rmtree(tmp, ignore_errors=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--state-mb", type=int, default=100)
    ap.add_argument("--reps", type=int, default=3, help="clusters per variant, alternating")
    ap.add_argument("--rounds", type=int, default=3, help="joins per cluster")
    ap.add_argument("--ttl", type=int, default=2)
    ap.add_argument("--step-ms", type=int, default=10)
    args = ap.parse_args()
    build_dir = tempfile.mkdtemp(prefix="kolo-joiner-build-")
    results = {v: [] for v in VARIANTS}
    try:
        program = os.path.join(build_dir, "recovery_loop")
        subprocess.check_call(["cc", "-O2", "-I", os.path.join(ROOT, "include"),
                               os.path.join(ROOT, "bench/recovery/recovery_loop.c"),
                               "-L", os.path.join(args.build, "lib"), "-lkolo",
                               "-Wl,-rpath," + os.path.join(args.build, "lib"), "-o", program])
        load_before = os.getloadavg()
        for rep in range(args.reps):
            order = ["root", "sources"] if rep % 2 == 0 else ["sources", "root"]
            for variant in order:
                results[variant] += run_cluster(args, program, variant)
        load_after = os.getloadavg()
    finally:
        shutil.rmtree(build_dir, ignore_errors=True)
    print(f"\njoiner, state {args.state_mb} MiB, {args.reps} x {args.rounds} rounds per variant, "
          f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; load average {load_before[0]:.1f} before, "
          f"{load_after[0]:.1f} after, {os.cpu_count()} CPUs")
    print("| sync | join ms (median, min-max) | WORKER_JOINED -> step ms | loss re-form ms |")
    print("|---|---|---|---|")
    for variant, rows in results.items():
        def cell(key):
            values = [r[key] for r in rows]
            return f"{statistics.median(values):.0f} ({min(values)}-{max(values)})"
        print(f"| {variant} | {cell('join_ms')} | {cell('sync_ms')} | {cell('loss_ms')} |")
    print(json.dumps({"state_mb": args.state_mb, "load": [load_before[0], load_after[0]], "results": results}))


if __name__ == "__main__":
    main()
