"""A real kolo cluster on 127.0.0.1 for the Python package tests: etcd (through
the test_server_etcd helper), one kolo-server and kolo-workers as child
processes, the HTTP/JSON API through urllib. Every wait has a deadline; stop()
kills everything it started (also registered with atexit)."""
from __future__ import annotations

import atexit
import glob
import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from typing import Any, Callable, Dict, List, Optional

import kolotest

TTL = "2"


def wait_for(predicate: Callable[[], Any], timeout: float, what: str, interval: float = 0.1) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError("timed out after %.0fs waiting for %s" % (timeout, what))


class Cluster:
    def __init__(self) -> None:
        self.dir = tempfile.mkdtemp(prefix="kolo-pyc-")
        self.procs: List[subprocess.Popen] = []
        self.workers: Dict[str, subprocess.Popen] = {}
        self.logs: List[Any] = []
        self.held: List[socket.socket] = []  # the workers' data-plane ports (kolotest.free_port)
        atexit.register(self.stop)
        self.etcd = subprocess.Popen(
            [os.path.join(kolotest.TESTS, "test_server_etcd")], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )
        self.procs.append(self.etcd)
        self.etcd_url = self.etcd.stdout.readline().strip()
        if not self.etcd_url.startswith("http://"):
            self.stop()
            raise RuntimeError("the etcd helper did not start")
        port_file = os.path.join(self.dir, "server.ports")
        self.server = self._spawn(
            "server",
            [
                os.path.join(kolotest.BIN, "kolo-server"),
                "--etcd",
                self.etcd_url,
                "--grpc-listen",
                "127.0.0.1:0",
                "--http-listen",
                "127.0.0.1:0",
                "--port-file",
                port_file,
                "--leader-ttl",
                TTL,
                "--grace-ms",
                "200",
                "--data-dir",
                os.path.join(self.dir, "server-data"),
            ],
        )
        wait_for(lambda: os.path.exists(port_file) and "http_port=" in open(port_file).read(), 30, "server ports")
        with open(port_file) as f:
            ports = dict(line.split("=", 1) for line in f.read().split())
        self.http_port = int(ports["http_port"])
        self.grpc_port = int(ports["grpc_port"])
        self.grpc_target = "127.0.0.1:%d" % self.grpc_port
        wait_for(lambda: (self.get("/readyz") or {}).get("is_leader"), 30, "the server to lead")

    def _spawn(self, name: str, argv: List[str], env: Optional[Dict[str, str]] = None) -> subprocess.Popen:
        log = open(os.path.join(self.dir, name + ".log"), "w")
        self.logs.append(log)
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        self.procs.append(proc)
        return proc

    def log(self, name: str) -> str:
        path = os.path.join(self.dir, name + ".log")
        return open(path).read() if os.path.exists(path) else ""

    # ---- HTTP ----

    def request(self, method: str, path: str, body: Optional[dict] = None) -> Any:
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(
            "http://127.0.0.1:%d%s" % (self.http_port, path),
            data=data,
            method=method,
            headers={"Content-Type": "application/json"},
        )
        try:
            with urllib.request.urlopen(request, timeout=10) as response:
                return json.loads(response.read() or b"null")
        except urllib.error.HTTPError as error:
            raise AssertionError("%s %s: HTTP %d %s" % (method, path, error.code, error.read()[:500]))

    def get(self, path: str) -> Any:
        try:
            return self.request("GET", path)
        except (AssertionError, OSError):
            return None

    # ---- workers and jobs ----

    def start_worker(
        self, worker_id: str, env_extra: Optional[Dict[str, str]] = None, args: Optional[List[str]] = None
    ) -> None:
        """Starts kolo-worker worker_id (args: more kolo-worker flags) and waits until it registered."""
        env = kolotest.env(env_extra)
        advertise = "127.0.0.1:%d" % kolotest.free_port(self.held)
        self.workers[worker_id] = self._spawn(
            worker_id,
            [
                os.path.join(kolotest.BIN, "kolo-worker"),
                "--etcd",
                self.etcd_url,
                "--advertise",
                advertise,
                "--id",
                worker_id,
                "--lease-ttl",
                TTL,
                "--work-dir",
                os.path.join(self.dir, worker_id),
                "--stop-grace-ms",
                "500",
            ]
            + (args or []),
            env,
        )

        def registered() -> bool:
            workers = (self.get("/v1/workers") or {}).get("workers", [])
            return any(w.get("id") == worker_id for w in workers)

        wait_for(registered, 30, "worker %s to register" % worker_id)

    def kill_worker(self, worker_id: str) -> None:
        """SIGKILLs the agent (its training process dies with it, PDEATHSIG)."""
        proc = self.workers.pop(worker_id)
        proc.send_signal(signal.SIGKILL)
        proc.wait()

    def submit(self, spec: dict) -> dict:
        return self.request("POST", "/v1/jobs", spec)

    def job(self, job_id: str) -> dict:
        return self.get("/v1/jobs/%s" % job_id) or {}

    def wait_phase(self, job_id: str, phases: List[str], timeout: float) -> dict:
        def reached() -> Optional[dict]:
            job = self.job(job_id)
            return job if job.get("status", {}).get("phase") in phases else None

        try:
            return wait_for(reached, timeout, "job %s to reach %s" % (job_id, phases), 0.2)
        except AssertionError as error:
            raise AssertionError(
                "%s; job is %s\n%s" % (error, json.dumps(self.job(job_id))[:3000], self.logs_tail())
            ) from None

    def wait_jobs_ended(self, timeout: float) -> None:
        """Waits until no job holds a worker (every job SUCCEEDED, FAILED or CANCELLED), so
        the next job sees every worker idle."""

        def ended() -> bool:
            jobs = (self.get("/v1/jobs?page_size=1000") or {}).get("jobs", [])
            return all(j.get("status", {}).get("phase") in ("SUCCEEDED", "FAILED", "CANCELLED") for j in jobs)

        wait_for(ended, timeout, "every job to end", 0.2)

    def logs_tail(self) -> str:
        """The end of the server's and every agent's log, and of every training
        process's output the agents captured (<work-dir>/logs/<job>/)."""
        out = []
        for name in ["server"] + sorted(self.workers):
            out.append("--- %s\n%s" % (name, kolotest.tail(self.log(name), 30)))
        for path in sorted(glob.glob(os.path.join(self.dir, "*", "logs", "*", "*.log"))):
            with open(path, errors="replace") as f:
                out.append("--- %s\n%s" % (os.path.relpath(path, self.dir), kolotest.tail(f.read(), 30)))
        return "\n".join(out)

    def stop(self) -> None:
        for proc in reversed(self.procs):
            if proc is self.etcd:
                continue
            if proc.poll() is None:
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except OSError:
                    proc.kill()
                proc.wait()
        if self.etcd.poll() is None:
            try:
                self.etcd.stdin.close()
                self.etcd.wait(timeout=15)
            except (OSError, subprocess.TimeoutExpired):
                self.etcd.kill()
                self.etcd.wait()
        for log in self.logs:
            log.close()
        for s in self.held:
            s.close()
        self.held = []
        self.procs = []
        if os.environ.get("KOLO_KEEP_CLUSTER"):
            print("cluster files kept in %s" % self.dir)
        else:
            shutil.rmtree(self.dir, True)
