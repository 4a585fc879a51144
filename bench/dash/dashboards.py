#!/usr/bin/python3
"""Do open dashboards slow the API? Starts etcd and one kolo-server, fills it with 50 jobs of
which 10 report progress every second (written into etcd the way the scheduler writes it, so
the view, the metrics recorder and every stream keep changing), then measures the HTTP API
(wrk: GET /v1/jobs/{id} over 8 connections) and gRPC GetJob latency (kolo-bench-control, one
client) with no dashboard open and with N dashboards open, interleaved, several rounds, and
prints one table with the medians. A dashboard here is what the page holds open on a job's
page plus the jobs table: one GET /v1/stream?jobs=1&workers=1 and one GET /v1/stream?job=<id>,
read as fast as they come (raw sockets: the browser's own cost is not the server's).
Usage: bench/dash/run.sh [BUILD_DIR]   (env: DASHBOARDS=20 ROUNDS=3 SECONDS_RUN=8)"""
import base64
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BUILD = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "build")
BIN = os.path.join(BUILD, "bin")
DASHBOARDS = int(os.environ.get("DASHBOARDS", "20"))
ROUNDS = int(os.environ.get("ROUNDS", "3"))
SECONDS_RUN = int(os.environ.get("SECONDS_RUN", "8"))
LIVE_JOBS = 10


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(fn, timeout, what):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        v = fn()
        if v:
            return v
        time.sleep(0.1)
    raise RuntimeError("timed out waiting for " + what)


def http(port, path, body=None):
    req = urllib.request.Request("http://127.0.0.1:%d%s" % (port, path), data=body and json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=10) as resp:
        return json.load(resp)


class Cluster:
    def __init__(self, work):
        self.procs = []
        c, p = free_port(), free_port()
        self.etcd_url = "http://127.0.0.1:%d" % c
        self.procs.append(subprocess.Popen(
            ["etcd", "--name", "bench", "--data-dir", os.path.join(work, "etcd"), "--listen-client-urls", self.etcd_url,
             "--advertise-client-urls", self.etcd_url, "--listen-peer-urls", "http://127.0.0.1:%d" % p,
             "--initial-advertise-peer-urls", "http://127.0.0.1:%d" % p,
             "--initial-cluster", "bench=http://127.0.0.1:%d" % p],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        wait_for(lambda: self._etcd_ok(), 30, "etcd")
        ports = os.path.join(work, "ports")
        self.server = subprocess.Popen(
            [os.path.join(BIN, "kolo-server"), "--etcd", self.etcd_url, "--grpc-listen", "127.0.0.1:0",
             "--http-listen", "127.0.0.1:0", "--port-file", ports, "--log-level", "warn"],
            stdout=open(os.path.join(work, "server.log"), "w"), stderr=subprocess.STDOUT)
        self.procs.append(self.server)
        wait_for(lambda: os.path.exists(ports), 30, "kolo-server")
        values = dict(line.split("=", 1) for line in open(ports).read().split())
        self.http_port, self.grpc_port = int(values["http_port"]), int(values["grpc_port"])

    def _etcd_ok(self):
        try:
            with urllib.request.urlopen(self.etcd_url + "/health", timeout=2) as r:
                return r.status == 200
        except OSError:
            return False

    def put(self, key, value):
        body = json.dumps({"key": base64.b64encode(key.encode()).decode(),
                           "value": base64.b64encode(value.encode()).decode()}).encode()
        urllib.request.urlopen(urllib.request.Request(self.etcd_url + "/v3/kv/put", data=body), timeout=10).read()

    def cpu_seconds(self):
        fields = open("/proc/%d/stat" % self.server.pid).read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def stop(self):
        for p in reversed(self.procs):
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
                try:
                    p.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()


class Progress(threading.Thread):
    """LIVE_JOBS jobs advancing one status write per job per second, like the scheduler."""

    def __init__(self, cluster, ids):
        super().__init__(daemon=True)
        self.cluster, self.ids, self.stop = cluster, ids, threading.Event()

    def run(self):
        step = 0
        while not self.stop.is_set():
            step += 50
            for i, job in enumerate(self.ids):
                self.cluster.put("/kolo/v1/jobs/%s/status" % job, json.dumps({
                    "phase": "PENDING", "epoch": 1, "created_unix_ms": 1000 + i,
                    "members": [{"worker_id": "w%d" % k, "rank": k} for k in range(2)],
                    "updated_unix_ms": int(time.time() * 1000),
                    "progress": {"step": step, "total_steps": 100000, "loss": 1.0 / (1 + step / 100),
                                 "accuracy": min(0.9, step / 20000), "samples_per_sec": 5000 + i}}))
            self.stop.wait(1.0)


class Dashboard:
    """The streams one open dashboard holds, read and counted (events, bytes)."""

    def __init__(self, port, job):
        self.events = 0
        self.bytes = 0
        self.socks = []
        for query in ("jobs=1&workers=1", "job=" + job):
            s = socket.create_connection(("127.0.0.1", port), timeout=30)
            s.sendall(("GET /v1/stream?%s HTTP/1.1\r\nHost: bench\r\nAccept: text/event-stream\r\n\r\n" % query).encode())
            self.socks.append(s)
            threading.Thread(target=self._read, args=(s,), daemon=True).start()

    def _read(self, s):
        try:
            while True:
                data = s.recv(65536)
                if not data:
                    return
                self.bytes += len(data)
                self.events += data.count(b"\nevent: ")
        except OSError:
            return

    def close(self):
        for s in self.socks:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()


def wrk(port, ids):
    env = dict(os.environ, KOLO_BENCH_IDS=",".join(ids))
    out = subprocess.run(["wrk", "-t1", "-c8", "-d%ds" % SECONDS_RUN, "--latency", "-s",
                          os.path.join(ROOT, "bench", "control", "get_job.lua"), "http://127.0.0.1:%d" % port],
                         capture_output=True, text=True, env=env, timeout=SECONDS_RUN + 30).stdout

    def ms(label):
        m = re.search(r"^\s+%s\s+([\d.]+)(us|ms|s)\b" % label, out, re.M)
        if not m:
            return float("nan")
        return float(m.group(1)) * {"us": 1e-3, "ms": 1.0, "s": 1e3}[m.group(2)]
    rps = re.search(r"Requests/sec:\s+([\d.]+)", out)
    return float(rps.group(1)) if rps else float("nan"), ms("50%"), ms("99%")


def grpc_latency(port):
    out = subprocess.run([os.path.join(BIN, "kolo-bench-control"), "--server", "127.0.0.1:%d" % port, "--threads", "1",
                          "--jobs", "5", "--seconds", "3"], capture_output=True, text=True, timeout=60).stdout
    m = re.search(r"^GetJob\s.*p50\s+([\d.]+) ms\s+p90\s+[\d.]+ ms\s+p99\s+([\d.]+) ms", out, re.M)
    return (float(m.group(1)), float(m.group(2))) if m else (float("nan"), float("nan"))


def median(values):
    v = sorted(x for x in values if x == x)
    return v[len(v) // 2] if v else float("nan")


def main():
    work = tempfile.mkdtemp(prefix="kolo-bench-dash-")
    cluster = None
    rows = []
    try:
        cluster = Cluster(work)
        ids = []
        for i in range(50):
            job = http(cluster.http_port, "/v1/jobs", {
                "id": "bench-dash-%02d" % i, "name": "bench %d" % i, "min_workers": 64,
                "builtin": {"model": "mlp", "epochs": 1}})
            ids.append(job["id"])
        progress = Progress(cluster, ids[:LIVE_JOBS])
        progress.start()
        time.sleep(2)
        print("kolo-server pid %d, %d CPUs, load %s; 50 jobs, %d changing every second; wrk GET /v1/jobs/{id}, "
              "8 connections, %d s per round" % (cluster.server.pid, os.cpu_count(),
                                                  " ".join(open("/proc/loadavg").read().split()[:3]), LIVE_JOBS,
                                                  SECONDS_RUN))
        for r in range(ROUNDS):
            for n in (0, DASHBOARDS):
                boards = [Dashboard(cluster.http_port, ids[i % LIVE_JOBS]) for i in range(n)]
                time.sleep(1.0 if n else 0.2)
                # the dashboards' own cost: server CPU with no API load
                idle0, i0 = cluster.cpu_seconds(), time.monotonic()
                time.sleep(4)
                idle = 100 * (cluster.cpu_seconds() - idle0) / (time.monotonic() - i0)
                events0 = sum(b.events for b in boards)
                bytes0 = sum(b.bytes for b in boards)
                cpu0, t0 = cluster.cpu_seconds(), time.monotonic()
                rps, p50, p99 = wrk(cluster.http_port, ids)
                g50, g99 = grpc_latency(cluster.grpc_port)
                elapsed = time.monotonic() - t0
                cpu = 100 * (cluster.cpu_seconds() - cpu0) / elapsed
                ev = (sum(b.events for b in boards) - events0) / elapsed
                kb = (sum(b.bytes for b in boards) - bytes0) / elapsed / 1024
                open_streams = 2 * n
                for b in boards:
                    b.close()
                rows.append((n, r + 1, rps, p50, p99, g50, g99, cpu, ev, kb, idle, open_streams))
                print("  round %d, %2d dashboards: %8.0f req/s  p50 %6.2f ms  p99 %6.2f ms | gRPC GetJob p50 %6.2f "
                      "p99 %6.2f ms | server CPU %5.1f%% (%4.1f%% without API load) | %6.1f events/s, %7.1f KiB/s to "
                      "dashboards" % (r + 1, n, rps, p50, p99, g50, g99, cpu, idle, ev, kb), flush=True)
                time.sleep(0.5)
        progress.stop.set()
        points = http(cluster.http_port, "/v1/jobs/%s/metrics" % ids[0])["points"]
        print()
        print("| dashboards open | HTTP GetJob req/s | HTTP p50 ms | HTTP p99 ms | gRPC GetJob p50 ms | gRPC p99 ms | "
              "server CPU % under load | server CPU % without API load | events/s, KiB/s to dashboards |")
        print("|---|---|---|---|---|---|---|---|---|")
        for n in (0, DASHBOARDS):
            mine = [row for row in rows if row[0] == n]
            cols = [median([row[k] for row in mine]) for k in range(2, 11)]
            print("| %d (%d streams) | %.0f | %.2f | %.2f | %.2f | %.2f | %.1f | %.1f | %.1f, %.0f |" %
                  (n, 2 * n, cols[0], cols[1], cols[2], cols[3], cols[4], cols[5], cols[8], cols[6], cols[7]))
        print("(medians of %d interleaved rounds; a live job's history had %d points at the end; load now %s)" %
              (ROUNDS, len(points), " ".join(open("/proc/loadavg").read().split()[:3])))
    finally:
        if cluster:
            cluster.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
