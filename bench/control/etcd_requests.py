#!/usr/bin/python3
"""How much kolo-server asks of etcd: requests by gRPC method and the watchers it holds, read
from etcd's own /metrics (grpc_server_handled_total, etcd_debugging_mvcc_watcher_total), for
(1) a leading kolo-server alone and idle for --idle seconds (the scheduler's tick passes) and
(2) one job's whole life (submit -> SUCCEEDED on --workers kolo-workers, an exec job that sleeps
--job-seconds), with the kolo-workers' own requests measured apart (they are not kolo-server's).
When kolo-server's /metrics has kolo_etcd_* and kolo_scheduler_passes_total (since #18's shared
client), it also prints kolo-server's own per-handle counts and requests per pass.

  /usr/bin/python3 bench/control/etcd_requests.py [--build build] [--idle 10] [--workers 2]

Short (about 40 s); etcd and every process it starts are its own and stopped at the end."""
import argparse
import os
import re
import sys
import time
import urllib.request

parser = argparse.ArgumentParser()
parser.add_argument("--build", default="build")
parser.add_argument("--idle", type=float, default=10.0)
parser.add_argument("--workers", type=int, default=2)
parser.add_argument("--job-seconds", type=float, default=3.0)
args = parser.parse_args()

root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
os.environ.setdefault("KOLO_BIN_DIR", os.path.join(args.build, "bin"))
os.environ.setdefault("KOLO_TEST_DIR", os.path.join(args.build, "tests"))
os.environ.setdefault("KOLO_SOURCE_DIR", root)
sys.path.insert(0, os.path.join(root, "tests", "integration"))
from kolo_cluster import Cluster  # noqa: E402

LINE = re.compile(r'^([a-zA-Z_:]+)(\{[^}]*\})?\s+([0-9.eE+-]+)$')


def metrics(url):
    """{(name, labels): value} of a Prometheus text page."""
    with urllib.request.urlopen(url, timeout=10) as resp:
        text = resp.read().decode()
    out = {}
    for line in text.splitlines():
        m = LINE.match(line.strip())
        if m:
            out[(m.group(1), m.group(2) or "")] = float(m.group(3))
    return out


def etcd_requests(page):
    """Requests by method: unary calls handled, plus messages received on streams (keep-alives)."""
    by = {}
    for (name, labels), value in page.items():
        method = re.search(r'grpc_method="([^"]+)"', labels)
        kind = re.search(r'grpc_type="([^"]+)"', labels)
        if not method:
            continue
        if name == "grpc_server_handled_total" and kind and kind.group(1) == "unary":
            by[method.group(1)] = by.get(method.group(1), 0) + value
        elif name == "grpc_server_msg_received_total" and kind and kind.group(1) != "unary":
            by[method.group(1) + "(stream msgs)"] = by.get(method.group(1) + "(stream msgs)", 0) + value
    return by


def watchers(page):
    return int(page.get(("etcd_debugging_mvcc_watcher_total", ""), -1))


def delta(a, b):
    return {k: b.get(k, 0) - a.get(k, 0) for k in sorted(set(a) | set(b)) if b.get(k, 0) - a.get(k, 0)}


def server_counts(port):
    """kolo-server's own counters, if it has them: ({(handle, kind): n}, passes)."""
    with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port, timeout=10) as resp:
        text = resp.read().decode()
    req, passes = {}, None
    for line in text.splitlines():
        m = re.match(r'kolo_etcd_requests_total\{handle="([^"]+)",kind="([^"]+)"\} (\d+)', line)
        if m:
            req[(m.group(1), m.group(2))] = int(m.group(3))
        m = re.match(r'kolo_scheduler_passes_total (\d+)', line)
        if m:
            passes = int(m.group(1))
    return req, passes


def show(title, d):
    print("%-44s %s" % (title, ", ".join("%s %d" % (k, v) for k, v in d.items()) or "none"))


cluster = Cluster()
try:
    url = cluster.etcd.url + "/metrics"
    port = cluster.server.http_port
    time.sleep(3.0)  # the election settles (--leader-ttl 2), the scheduler leads
    load = os.getloadavg()[0]
    print("load %.1f; etcd watchers with kolo-server alone: %d" % (load, watchers(metrics(url))))
    a, (sa, pa) = etcd_requests(metrics(url)), server_counts(port)
    time.sleep(args.idle)
    b, (sb, pb_) = etcd_requests(metrics(url)), server_counts(port)
    show("idle %.0f s, kolo-server alone (etcd's count):" % args.idle, delta(a, b))
    if pa is not None:
        print("  scheduler passes: %d; kolo-server's own requests by handle: %s" % (
            pb_ - pa, ", ".join("%s/%s %d" % (h, k, sb[(h, k)] - sa.get((h, k), 0))
                                for h, k in sorted(sb) if sb[(h, k)] - sa.get((h, k), 0))))

    for i in range(args.workers):
        cluster.add_worker("w%d" % i)
    time.sleep(2.0)
    w0 = etcd_requests(metrics(url))
    time.sleep(args.idle)
    w1 = etcd_requests(metrics(url))
    workers_idle = delta(w0, w1)
    show("idle %.0f s with %d workers (all, etcd's count):" % (args.idle, args.workers), workers_idle)
    print("etcd watchers with %d workers: %d" % (args.workers, watchers(metrics(url))))

    a, (sa, pa) = etcd_requests(metrics(url)), server_counts(port)
    t0 = time.time()
    cluster.submit({"name": "lifecycle", "id": "life-1", "min_workers": args.workers,
                    "exec": {"argv": ["/bin/sh", "-c", "sleep %g" % args.job_seconds]}})
    cluster.wait_phase("life-1", "SUCCEEDED", timeout=60)
    elapsed = time.time() - t0
    b, (sb, pb_) = etcd_requests(metrics(url)), server_counts(port)
    show("one job's life (%.1f s, all, etcd's count):" % elapsed, delta(a, b))
    if pa is not None:
        print("  scheduler passes: %d; kolo-server's own requests by handle: %s" % (
            pb_ - pa, ", ".join("%s/%s %d" % (h, k, sb[(h, k)] - sa.get((h, k), 0))
                                for h, k in sorted(sb) if sb[(h, k)] - sa.get((h, k), 0))))
    print("load %.1f at the end" % os.getloadavg()[0])
finally:
    cluster.stop()
