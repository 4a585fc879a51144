"""A real kolo cluster for the Python integration tests: one etcd and kolo-server (from
test_server_support) plus kolo-worker agents, each on its own --advertise address
(127.0.0.1, 127.0.0.2, ... are all loopback, so "another host" is another address).
Every process started here is stopped in stop(), also when a test fails; every wait
has a deadline."""
import atexit
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time

from test_server_support import BIN, Etcd, Server, curl, wait_for


class Worker:
    """One kolo-worker process with its own work dir."""

    def __init__(self, etcd_url, worker_id, host, data_port, root, *extra):
        self.id = worker_id
        self.host = host
        self.dir = os.path.join(root, worker_id)
        os.makedirs(self.dir, exist_ok=True)
        self.log_path = os.path.join(root, worker_id + ".log")
        self.log = open(self.log_path, "a")
        args = [os.path.join(BIN, "kolo-worker"), "--etcd", etcd_url, "--advertise", "%s:%d" % (host, data_port),
                "--id", worker_id, "--work-dir", self.dir, "--lease-ttl", "2", "--stop-grace-ms", "500"]
        self.proc = subprocess.Popen(args + list(extra), stdout=self.log, stderr=subprocess.STDOUT)
        atexit.register(self.kill)

    def read_log(self):
        self.log.flush()
        with open(self.log_path) as f:
            return f.read()

    def kill(self, sig=signal.SIGKILL):
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if not self.log.closed:
            self.log.close()


class Cluster:
    """etcd + one kolo-server + workers; stop() ends everything."""

    def __init__(self, *server_args):
        self.root = tempfile.mkdtemp(prefix="kolo-cluster-")
        self.etcd = Etcd()
        self.workers = {}
        self.next_port = 17000 + (os.getpid() % 500) * 40
        try:
            # under ASan a freed buffer waits in a quarantine (256 MiB by default): keep it small
            # so the server's RSS shows what it holds (test_logs measures it)
            env = dict(os.environ)
            env["ASAN_OPTIONS"] = ":".join(filter(None, [env.get("ASAN_OPTIONS"), "quarantine_size_mb=1"]))
            self.server = Server(self.etcd.url, "--leader-ttl", "2", *server_args, env=env)
        except Exception:
            self.etcd.stop()
            raise

    def add_worker(self, worker_id, host="127.0.0.1", *extra):
        self.next_port += 1
        w = Worker(self.etcd.url, worker_id, host, self.next_port, self.root, *extra)
        self.workers[worker_id] = w
        wait_for(lambda: self.worker_record(worker_id) or w.proc.poll() is not None, 30, "worker %s registered" % worker_id)
        if w.proc.poll() is not None:
            raise RuntimeError("kolo-worker %s exited %s:\n%s" % (worker_id, w.proc.returncode, w.read_log()))
        return w

    def worker_record(self, worker_id):
        code, body = curl(self.server.http_port, "/v1/workers", headers=self.auth_headers())
        if code != 200:
            return None
        return next((w for w in body["workers"] if w["id"] == worker_id), None)

    def auth_headers(self):
        return []

    def etcd_get(self, key):
        """A raw value from etcd's JSON gateway (None if absent)."""
        import base64
        import urllib.request
        body = json.dumps({"key": base64.b64encode(key.encode()).decode()}).encode()
        req = urllib.request.Request(self.etcd.url + "/v3/kv/range", data=body, method="POST")
        with urllib.request.urlopen(req, timeout=10) as resp:
            kvs = json.loads(resp.read()).get("kvs", [])
        return base64.b64decode(kvs[0]["value"]).decode() if kvs else None

    def submit(self, spec):
        code, body = curl(self.server.http_port, "/v1/jobs", "POST", json.dumps(spec), headers=self.auth_headers())
        if code != 200:
            raise AssertionError("submit: %s %s" % (code, body))
        return body

    def job(self, job_id):
        code, body = curl(self.server.http_port, "/v1/jobs/" + job_id, headers=self.auth_headers())
        return body if code == 200 else None

    def wait_phase(self, job_id, phases, timeout=60):
        phases = (phases,) if isinstance(phases, str) else phases
        return wait_for(lambda: (lambda j: j if j and j["status"]["phase"] in phases else None)(self.job(job_id)),
                        timeout, "job %s in %s" % (job_id, phases), interval=0.1)

    def stop(self):
        for w in self.workers.values():
            w.kill(signal.SIGTERM)
        code = self.server.terminate()
        self.etcd.stop()
        shutil.rmtree(self.root, ignore_errors=True)
        return code
