#!/usr/bin/python3
"""What kolo-server's HTTP front end (server/http_front.c) costs a request: GET /v1/jobs
latency through two kolo-server binaries side by side (e.g. one built before the front end
and one after), interleaved round by round, medians of several rounds; the machine is shared,
so only the interleaved comparison means anything.

    bench/control/http_front.py --before OLD/build/bin --after build/bin [--rounds 5] [--requests 400]

Each round, for each binary: a fresh private etcd + kolo-server with 20 jobs, then
`requests` sequential GETs on one keep-alive connection and `requests / 4` GETs each on a
new connection (connect + request + close). Prints one table (microseconds per request)."""
import argparse
import os
import socket
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.dirname(os.path.dirname(HERE))
os.environ.setdefault("KOLO_SOURCE_DIR", SRC)
os.environ.setdefault("KOLO_TEST_DIR", os.path.join(SRC, "build", "tests"))
sys.path.insert(0, os.path.join(SRC, "tests", "integration"))
import test_server_support as support  # noqa: E402

REQ = b"GET /v1/jobs HTTP/1.1\r\nHost: x\r\n\r\n"


def read_answer(conn, buf):
    """Reads one answer with a Content-Length body off conn; returns the bytes left over."""
    while b"\r\n\r\n" not in buf:
        buf += conn.recv(65536)
    head, _, rest = buf.partition(b"\r\n\r\n")
    length = int([line.split(b":")[1] for line in head.split(b"\r\n") if line.lower().startswith(b"content-length")][0])
    while len(rest) < length:
        rest += conn.recv(65536)
    return rest[length:]


def keep_alive(port, n):
    times = []
    with socket.create_connection(("127.0.0.1", port)) as conn:
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        buf = b""
        for _ in range(n):
            t = time.perf_counter()
            conn.sendall(REQ)
            buf = read_answer(conn, buf)
            times.append(time.perf_counter() - t)
    return statistics.median(times) * 1e6


def new_connections(port, n):
    times = []
    for _ in range(n):
        t = time.perf_counter()
        with socket.create_connection(("127.0.0.1", port)) as conn:
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            conn.sendall(REQ)
            read_answer(conn, b"")
        times.append(time.perf_counter() - t)
    return statistics.median(times) * 1e6


def one_round(bin_dir, requests):
    support.BIN = bin_dir
    etcd = support.Etcd()
    try:
        srv = support.Server(etcd.url)
        try:
            for i in range(20):
                support.curl(srv.http_port, "/v1/jobs", "POST", body='{"id":"bench-%d","name":"b","min_workers":1,'
                             '"exec":{"argv":["/bin/true"]}}' % i)
            keep_alive(srv.http_port, 50)  # warm up
            return keep_alive(srv.http_port, requests), new_connections(srv.http_port, requests // 4)
        finally:
            srv.terminate()
    finally:
        etcd.stop()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--before", required=True, help="bin dir of the kolo-server to compare against")
    ap.add_argument("--after", default=os.path.join(SRC, "build", "bin"))
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--requests", type=int, default=400)
    args = ap.parse_args()
    results = {"before": [], "after": []}
    for r in range(args.rounds):
        for name in (("before", "after") if r % 2 == 0 else ("after", "before")):
            results[name].append(one_round(getattr(args, name), args.requests))
    load = open("/proc/loadavg").read().split()[:3]
    print("GET /v1/jobs (20 jobs), median of %d interleaved rounds, load average %s" % (args.rounds, " ".join(load)))
    print("| kolo-server | keep-alive us/request | new connection us/request |")
    print("|---|---|---|")
    for name in ("before", "after"):
        ka = statistics.median(x[0] for x in results[name])
        nc = statistics.median(x[1] for x in results[name])
        print("| %s (%s) | %.0f | %.0f |" % (name, getattr(args, name), ka, nc))


if __name__ == "__main__":
    main()
