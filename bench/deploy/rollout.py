#!/usr/bin/env python3
"""What a worker leaving costs a running job, the way Kubernetes makes workers leave: the
chart is rendered with helm and its pods run as local processes (tests/deploy/kubelet.py),
with a real etcd, under an elastic job (elastic_loop: 3 workers, min 2, commit every 5
steps, 10 ms per step). Interleaved, several rounds:

- drain: the rendered preStop (kolo drain), SIGTERM, a new pod under the same name, ready;
- kill:  SIGKILL (a node failure: no preStop), a new pod under the same name, ready.

Prints per kind the medians of: steps the job's processes redid (discarded) at the re-form
without the worker and at the one that takes the new pod back, seconds from the leave until
the job runs without it, until the new pod is ready (registered) and until the job has it
back, and how the job counted it (drains / reconfigurations). Usage: bench/deploy/rollout.py
[--rounds N] (build first: cmake --build build). Prints the machine's load with the table."""
import argparse
import os
import signal
import statistics
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "tests", "deploy"))
sys.path.insert(0, os.path.join(ROOT, "tests", "integration"))
os.environ.setdefault("KOLO_BIN_DIR", os.path.join(ROOT, "build", "bin"))
os.environ.setdefault("KOLO_TEST_DIR", os.path.join(ROOT, "build", "tests"))

import kubelet  # noqa: E402
from kubelet import wait_for  # noqa: E402
from test_rollout import WORKERS, Cluster  # noqa: E402


def reforms(path, since):
    """Discarded steps of the REFORM lines after line `since`: (lines, new since)."""
    try:
        with open(path) as f:
            lines = f.read().splitlines()
    except OSError:
        return [], since
    return [int(l.split()[2]) for l in lines[since:]], len(lines)


def one(c, job, kind, ordinal, results):
    """One worker leaves (drain or kill) and comes back; returns the figures."""
    name = "%s-%d" % (WORKERS, ordinal)
    before = c.job(job)["status"]
    seen = results["seen"]
    pod = c.sts.pods[ordinal]
    if kind == "drain":
        _, _, exit_s = pod.terminate()
    else:
        t = time.monotonic()
        pod.proc.send_signal(signal.SIGKILL)
        pod.proc.wait()
        exit_s = time.monotonic() - t
    left_at = time.monotonic()
    wait_for(lambda: name not in c.members(job) and c.job(job)["status"]["phase"] == "RUNNING", 120,
             "the job to re-form without %s" % name, interval=0.05)
    reformed_s = time.monotonic() - left_at
    time.sleep(0.5)  # let every member write its REFORM line
    at_leave, results["seen"] = reforms(results["reform"], seen)
    new = c.sts.start(ordinal)
    new.wait_ready(timeout=120)
    ready_s = time.monotonic() - left_at
    wait_for(lambda: name in c.members(job) and c.job(job)["status"]["phase"] == "RUNNING", 120,
             "the job to take %s back" % name, interval=0.05)
    back_s = time.monotonic() - left_at
    time.sleep(0.5)
    at_join, results["seen"] = reforms(results["reform"], results["seen"])
    after = c.job(job)["status"]
    return {"redone_leave": max(at_leave) if at_leave else 0, "redone_join": max(at_join) if at_join else 0,
            "exit_s": exit_s, "reformed_s": reformed_s, "ready_s": ready_s, "back_s": back_s,
            "drains": after.get("drains", 0) - before.get("drains", 0),
            "reconfigurations": after.get("reconfigurations", 0) - before.get("reconfigurations", 0)}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    out = tempfile.mkdtemp(prefix="kolo-bench-rollout-")
    figures = {"drain": [], "kill": []}
    c = Cluster(workers=3, lease_ttl=3)
    try:
        steps = 1000000  # long enough for every round; cancelled at the end
        c.submit("bench", 2, 3, steps, 10, out)
        wait_for(lambda: len(c.members("bench")) == 3 and c.job("bench")["status"]["phase"] == "RUNNING", 60,
                 "the job to run on 3 workers")
        state = {"seen": 0, "reform": os.path.join(out, "reform")}
        for r in range(args.rounds):
            for kind in ("drain", "kill"):
                figures[kind].append(one(c, "bench", kind, 2 - r % 3, state))
        c.api("/v1/jobs/bench:cancel", "POST", {"reason": "benchmark over"})
    finally:
        c.close()
    load = open("/proc/loadavg").read().split()[:3]
    print("worker leaving a running job, %d rounds interleaved, medians (load %s)" % (args.rounds, " ".join(load)))
    cols = [("redone_leave", "redone@leave", "%12g"), ("redone_join", "redone@join", "%11g"),
            ("reformed_s", "re-formed (s)", "%13.2f"), ("ready_s", "ready (s)", "%9.2f"),
            ("back_s", "back in job (s)", "%15.2f"), ("drains", "drains", "%6g"),
            ("reconfigurations", "reconfigurations", "%16g")]
    print("%-6s " % "how" + " ".join(("%" + f[1:].rstrip("gf").split(".")[0] + "s") % h for _, h, f in cols))
    for kind, rows in figures.items():
        print("%-6s " % kind + " ".join(f % statistics.median(r[k] for r in rows) for k, _, f in cols))
    print("drain = the chart's preStop + SIGTERM; kill = SIGKILL (lease TTL 3 s: the new pod waits for it)")


if __name__ == "__main__":
    main()
