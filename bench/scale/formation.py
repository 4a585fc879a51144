#!/usr/bin/python3
"""The data plane's formation at many ranks (issue #35), on one machine: N tiny elastic
processes (tests' elastic_loop: one 8-byte all-reduce per step, a commit and a REPORT after
each) driven by this script acting as their agent over the agent protocol
(common/agent_proto.h, the lines kolo-worker's agent sends), for N in --sizes:

  form       RING of epoch 1 sent to every rank -> every rank said FORMED
  first      -> every rank reported step 1 (the state broadcast from rank 0, the first
             all-reduce and commit)
  reform     a middle rank SIGKILLed -> every survivor said FORMED on the ring of N-1
             (the agent sends that RING as soon as the first survivor reports FAILED, so
             this is the data plane's part: detection + re-form, no scheduler)
  reform_step  -> every survivor reported a step on the new ring

Prints one JSON line per size, then a table.
Usage: bench/scale/formation.py [--build build] [--sizes 16,64,128,256]"""
import argparse
import json
import os
import secrets
import selectors
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def free_ports(n):
    socks, ports = [], []
    for _ in range(n):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        socks.append(s)
        ports.append(s.getsockname()[1])
    for s in socks:
        s.close()
    return ports


class Agent:
    """The agent side for n processes on one unix socket."""

    def __init__(self, path, n):
        self.sel = selectors.DefaultSelector()
        self.server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.server.bind(path)
        self.server.listen(4096)
        self.sel.register(self.server, selectors.EVENT_READ)
        self.conns, self.buf, self.pid_of = {}, {}, {}
        self.n = n

    def poll(self, timeout, on_line):
        for key, _ in self.sel.select(timeout):
            if key.fileobj is self.server:
                c, _ = self.server.accept()
                self.sel.register(c, selectors.EVENT_READ)
                self.buf[c] = b""
                continue
            c = key.fileobj
            try:
                data = c.recv(65536)
            except OSError:
                data = b""
            if not data:
                self.sel.unregister(c)
                continue
            self.buf[c] += data
            while b"\n" in self.buf[c]:
                line, self.buf[c] = self.buf[c].split(b"\n", 1)
                words = line.decode().split(" ", 1)
                if words[0] == "HELLO":
                    self.pid_of[c] = int(words[1].split()[0])
                on_line(c, words[0], words[1] if len(words) > 1 else "")

    def send(self, conn, line):
        conn.sendall((line + "\n").encode())


def ring_line(epoch, rank, addresses, secret):
    n = len(addresses)
    return "RING %d %d %d %d %d 60000 %s %s %s" % (epoch, rank, n, rank, n, secret, addresses[rank],
                                                  " ".join(addresses))


def run(args, n):
    tmp = tempfile.mkdtemp(prefix="kolo-form-")
    sock = os.path.join(tmp, "agent.sock")
    agent = Agent(sock, n)
    env = dict(os.environ, KOLO_AGENT_SOCKET=sock, KOLO_TIMEOUT="60")
    program = os.path.join(args.build, "tests/elastic_loop")
    procs = []
    res = {"ranks": n}
    try:
        t_spawn = time.monotonic()
        for _ in range(n):
            procs.append(subprocess.Popen([program, "1000000000", "1", "1", str(args.step_ms)], env=env,
                                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        by_pid = {p.pid: i for i, p in enumerate(procs)}
        conn_of = {}
        state = {"formed": {}, "stepped": {}, "failed_at": None}

        def on_line(c, verb, rest):
            now = time.monotonic()
            if verb == "HELLO":
                i = by_pid.get(agent.pid_of[c])
                if i is not None:
                    conn_of[i] = c
            elif verb == "FORMED":
                state["formed"].setdefault(int(rest.split()[0]), {})[c] = now
            elif verb == "REPORT":
                state["stepped"].setdefault(state["epoch"], {}).setdefault(c, now)
            elif verb == "FAILED" and state["failed_at"] is None:
                state["failed_at"] = now

        def pump(what, done, timeout=120):
            deadline = time.monotonic() + timeout
            while not done():
                if time.monotonic() > deadline:
                    raise RuntimeError("%d ranks: timed out waiting for %s" % (n, what))
                agent.poll(0.05, on_line)

        state["epoch"] = 0
        pump("every HELLO", lambda: len(conn_of) == n)
        res["start_s"] = round(time.monotonic() - t_spawn, 2)
        secret = secrets.token_hex(16)
        addresses = ["127.0.0.1:%d" % p for p in free_ports(n)]
        state["epoch"] = 1
        t_ring = time.monotonic()
        for i in range(n):
            agent.send(conn_of[i], ring_line(1, i, addresses, secret))
        pump("FORMED 1", lambda: len(state["formed"].get(1, {})) == n)
        t_formed = max(state["formed"][1].values())
        pump("a step at epoch 1", lambda: len(state["stepped"].get(1, {})) == n)
        t_first = max(state["stepped"][1].values())
        res["form_ms"] = round((t_formed - t_ring) * 1000)
        res["first_allreduce_ms"] = round((t_first - t_formed) * 1000)
        victim = n // 2
        t_kill = time.monotonic()
        procs[victim].kill()
        pump("a FAILED report", lambda: state["failed_at"] is not None, 60)
        survivors = [i for i in range(n) if i != victim]
        addresses2 = [addresses[i] for i in survivors]
        state["epoch"] = 2
        t_ring2 = time.monotonic()
        secret2 = secrets.token_hex(16)
        for r, i in enumerate(survivors):
            agent.send(conn_of[i], ring_line(2, r, addresses2, secret2))
        pump("FORMED 2", lambda: len(state["formed"].get(2, {})) == n - 1)
        t_formed2 = max(state["formed"][2].values())
        pump("a step at epoch 2", lambda: len(state["stepped"].get(2, {})) == n - 1)
        t_step2 = max(state["stepped"][2].values())
        res.update({"detect_ms": round((state["failed_at"] - t_kill) * 1000),
                    "reform_ms": round((t_formed2 - t_ring2) * 1000),
                    "kill_to_formed_ms": round((t_formed2 - t_kill) * 1000),
                    "kill_to_step_ms": round((t_step2 - t_kill) * 1000),
                    "load_average": os.getloadavg()[0]})
        return res
    finally:
        for p in procs:
            if p.poll() is None:
                p.send_signal(signal.SIGKILL)
        for p in procs:
            p.wait()
        shutil.rmtree(tmp, ignore_errors=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--sizes", default="16,64,128,256")
    ap.add_argument("--step-ms", type=int, default=50)
    args = ap.parse_args()
    rows = []
    for n in [int(x) for x in args.sizes.split(",")]:
        rows.append(run(args, n))
        print(json.dumps(rows[-1]), flush=True)
    print("\n| ranks | processes up s | form ms | first all-reduce ms | detect ms | re-form ms | kill -> step ms |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        print("| %d | %s | %d | %d | %d | %d | %d |" % (r["ranks"], r["start_s"], r["form_ms"], r["first_allreduce_ms"],
                                                       r["detect_ms"], r["reform_ms"], r["kill_to_step_ms"]))


if __name__ == "__main__":
    sys.exit(main())
