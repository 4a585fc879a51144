"""kolo-worker's --http-listen endpoint against a real etcd, as Kubernetes' probes use it:
/healthz answers from the start, /readyz is 503 until the worker is registered in etcd and
200 after (also when a pod restarted under its name must first wait for its previous
registration's lease to expire), /metrics shows the registration, and a bad address is
refused at startup."""
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import unittest

from test_server_support import BIN, Etcd, main, wait_for

LEASE_TTL = 3


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get(port, path, source=None):
    """(status, body) of GET http://127.0.0.1:port/path with curl (from source, an address
    of this host, if given); (0, "") when nothing answers."""
    out = subprocess.run(["curl", "-s", "--max-time", "3", "-o", "-", "-w", "\n%{http_code}"] +
                         (["--interface", source] if source else []) +
                         ["http://127.0.0.1:%d%s" % (port, path)], capture_output=True, text=True, timeout=10)
    body, _, code = out.stdout.rpartition("\n")
    return int(code or 0), body


class Worker:
    def __init__(self, etcd_url, worker_id, http_port, *extra):
        self.dir = tempfile.mkdtemp(prefix="kolo-wh-")
        self.log_path = os.path.join(self.dir, "worker.log")
        self.log = open(self.log_path, "w")
        self.port = http_port
        self.proc = subprocess.Popen(
            [os.path.join(BIN, "kolo-worker"), "--etcd", etcd_url, "--advertise", "127.0.0.1:%d" % free_port(),
             "--id", worker_id, "--lease-ttl", str(LEASE_TTL), "--work-dir", os.path.join(self.dir, "w"),
             "--http-listen", "127.0.0.1:%d" % http_port] + list(extra),
            stdout=self.log, stderr=subprocess.STDOUT)

    def stop(self, sig=signal.SIGTERM):
        """Signals the worker and waits; returns (exit code, its log)."""
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if not self.log.closed:
            self.log.close()
        text = ""
        if os.path.exists(self.log_path):
            with open(self.log_path) as f:
                text = f.read()
        shutil.rmtree(self.dir, True)
        return self.proc.returncode, text


class WorkerHealthTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.etcd = Etcd()

    @classmethod
    def tearDownClass(cls):
        cls.etcd.stop()

    def test_readiness_follows_the_registration_across_a_restart_under_the_same_id(self):
        port = free_port()
        first = Worker(self.etcd.url, "health-0", port)
        try:
            wait_for(lambda: get(port, "/readyz")[0] == 200, 30, "the first worker to be ready")
            code, text = get(port, "/metrics")
            self.assertEqual(code, 200)
            self.assertIn("kolo_worker_registered 1\n", text)
            self.assertIn('kolo_worker_state{state="idle"} 1\n', text)
            self.assertIn("kolo_worker_registrations_total 1\n", text)
            # A pod killed without its preStop: the new process under the same name must wait
            # for the old lease to expire, and is not ready meanwhile.
            first.stop(signal.SIGKILL)
            killed_at = time.monotonic()
            second = Worker(self.etcd.url, "health-0", port)
            try:
                wait_for(lambda: get(port, "/healthz")[0] == 200, 15, "the new worker's liveness")
                code, body = get(port, "/readyz")
                self.assertEqual(code, 503, body)
                self.assertIn('"ready":false', body)
                wait_for(lambda: get(port, "/readyz")[0] == 200, LEASE_TTL + 20, "the new worker to be ready")
                waited = time.monotonic() - killed_at
                self.assertGreater(waited, LEASE_TTL * 0.5, "ready before the old registration could expire")
                self.assertIn('"ready":true', get(port, "/readyz")[1])
                self.assertEqual(get(port, "/nope")[0], 404)
                code, _ = get(port, "/metrics")
                self.assertEqual(code, 200)
            finally:
                code, log = second.stop(signal.SIGTERM)
                self.assertEqual(code, 0, log)
            self.assertEqual(get(port, "/healthz")[0], 0, "the endpoint outlived the process")
        finally:
            first.stop(signal.SIGKILL)

    def test_a_worker_that_cannot_reach_etcd_is_live_but_not_ready(self):
        port = free_port()
        dead = "http://127.0.0.1:%d" % free_port()
        w = Worker(dead, "health-1", port)
        try:
            wait_for(lambda: get(port, "/healthz")[0] == 200 or w.proc.poll() is not None, 15, "liveness")
            if w.proc.poll() is None:
                self.assertEqual(get(port, "/readyz")[0], 503)
        finally:
            w.stop(signal.SIGKILL)

    def test_idle_strangers_leave_the_probes_and_the_log_server_room(self):
        # issue #30: 70 idle connections from anyone used to take all 64 slots of each port
        port, logs_port = free_port(), free_port()
        w = Worker(self.etcd.url, "health-3", port, "--logs-listen", "127.0.0.1:%d" % logs_port)
        idle = []
        try:
            wait_for(lambda: get(port, "/healthz")[0] == 200, 15, "liveness")
            for target, count in ((port, 100), (logs_port, 70)):
                for _ in range(count):
                    idle.append(socket.create_connection(("127.0.0.1", target), timeout=5))
            time.sleep(0.5)
            self.assertEqual(get(port, "/healthz")[0], 200)  # 100 from one address: room left
            for target, count in ((port, 200), (logs_port, 100)):
                for _ in range(count):
                    idle.append(socket.create_connection(("127.0.0.1", target), timeout=5))
            time.sleep(0.5)
            # another address (the kubelet's, a kolo-server's) is answered whatever one holds
            self.assertEqual(get(port, "/healthz", "127.0.0.2")[0], 200)
            self.assertEqual(get(logs_port, "/v1/logs/x", "127.0.0.2")[0], 401)  # answered: no token
        finally:
            for s in idle:
                s.close()
            w.stop(signal.SIGKILL)

    def test_a_bad_or_busy_listen_address_stops_the_worker_with_a_reason(self):
        with socket.socket() as taken:
            taken.bind(("127.0.0.1", 0))
            taken.listen(1)
            for address in ("nope", "127.0.0.1:%d" % taken.getsockname()[1]):
                out = subprocess.run([os.path.join(BIN, "kolo-worker"), "--etcd", self.etcd.url, "--advertise",
                                      "127.0.0.1:%d" % free_port(), "--id", "health-2", "--http-listen", address],
                                     capture_output=True, text=True, timeout=20)
                self.assertEqual(out.returncode, 1, out.stderr)
                self.assertIn("cannot serve --http-listen %s" % address, out.stderr)


if __name__ == "__main__":
    main()
