"""Job-log benchmark: what capturing and serving a job's output costs, side by side
with the peer (the same bytes written straight to a file, and read back with cat).

    /usr/bin/python3 bench/logs/run.py [--mb 64] [--runs 3]

Starts a real etcd, kolo-server and one kolo-worker (build/bin), then, interleaved,
RUNS times: a process writes MB megabytes of 100-byte lines (a) to a file (the peer:
what a training script pays without kolo) and (b) to stdout under kolo-worker's
capture (timed by the process itself); then the job's logs are read back through
kolo-server (HTTP, non-follow) and compared with `cat` of the files the worker wrote.
Prints medians and the machine load (the machine is shared: read figures with it)."""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(SRC, "tests", "integration"))
os.environ.setdefault("KOLO_BIN_DIR", os.path.join(SRC, "build", "bin"))
os.environ.setdefault("KOLO_TEST_DIR", os.path.join(SRC, "build", "tests"))
os.environ.setdefault("KOLO_SOURCE_DIR", SRC)

from kolo_cluster import Cluster  # noqa: E402

WRITER = r'''
import os, sys, time
mb = int(sys.argv[1]); out = open(sys.argv[2], "w") if len(sys.argv) > 2 else sys.stdout
line = "x" * 99 + "\n"; block = line * 1000
t = time.perf_counter()
for _ in range(mb * 10):
    out.write(block)
out.flush()
elapsed = time.perf_counter() - t
print("WROTE %.6f" % elapsed, file=sys.stderr, flush=True)
'''


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--mb", type=int, default=64)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    work = tempfile.mkdtemp(prefix="kolo-bench-logs-")
    writer = os.path.join(work, "writer.py")
    with open(writer, "w") as f:
        f.write(WRITER)
    cluster = Cluster()
    try:
        cluster.add_worker("b0", "127.0.0.1", "--log-job-size", "%dM" % (args.mb * 2 + 16))
        rows = {"write: to a file (peer)": [], "write: captured by kolo-worker": [],
                "read: cat of the worker's files (peer)": [], "read: GET /v1/jobs/<id>/logs": []}
        for run in range(args.runs):
            # (a) the peer: straight to a file
            out = subprocess.run(["/usr/bin/python3", writer, str(args.mb), os.path.join(work, "peer.out")],
                                 capture_output=True, text=True, check=True)
            rows["write: to a file (peer)"].append(float(out.stderr.split()[1]))
            # (b) under the agent's capture
            job = "bench-%d" % run
            cluster.submit({"name": "bench", "id": job, "min_workers": 1,
                            "exec": {"argv": ["/usr/bin/python3", writer, str(args.mb)]}})
            cluster.wait_phase(job, "SUCCEEDED", timeout=600)
            files = os.path.join(cluster.workers["b0"].dir, "logs", job)
            t = time.perf_counter()
            size = len(subprocess.run("cat %s/*.log" % files, shell=True, capture_output=True, check=True).stdout)
            rows["read: cat of the worker's files (peer)"].append(time.perf_counter() - t)
            t = time.perf_counter()
            got = subprocess.run(["curl", "-sS", "http://127.0.0.1:%d/v1/jobs/%s/logs?rank=0" %
                                  (cluster.server.http_port, job)], capture_output=True, check=True).stdout
            rows["read: GET /v1/jobs/<id>/logs"].append(time.perf_counter() - t)
            wrote = [l for l in got.decode(errors="replace").splitlines() if l.startswith("WROTE")]
            rows["write: captured by kolo-worker"].append(float(wrote[-1].split()[1]))
            assert size >= args.mb * 1000 * 1000 and len(got) >= args.mb * 1000 * 1000, (size, len(got))
        load = open("/proc/loadavg").read().split()[:3]
        print("job logs, %d MB of 100-byte lines, median of %d runs (load %s)" % (args.mb, args.runs, " ".join(load)))
        print("%-42s %10s %10s" % ("", "seconds", "MB/s"))
        for name, values in rows.items():
            median = statistics.median(values)
            print("%-42s %10.3f %10.1f" % (name, median, args.mb / median))
    finally:
        cluster.stop()


if __name__ == "__main__":
    main()
