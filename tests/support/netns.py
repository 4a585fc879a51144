"""Python side of tests/support/netns.sh: hosts as network namespaces, and a kolo
cluster spread over them (etcd and kolo-server on host 0, kolo-workers on the others).

Everything started here is stopped by close(), also when a test fails; the set of
namespaces carries this process's pid and is removed by close() or, if this process
is killed, by the next netns.sh up (clean-stale)."""
import json
import os
import shutil
import subprocess
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
NETNS = os.path.join(HERE, "netns.sh")
SKIP = 77


class NamespacesUnavailable(Exception):
    """netns.sh could not make namespaces here (not root); the message says why."""


class HostSet:
    """N hosts h0..h<n-1> with addresses 10.77.0.<i+1>; rate limits each link (e.g. '1gbit')."""

    def __init__(self, n, rate=None):
        self.owner = os.getpid()
        args = [NETNS, "up", str(self.owner), str(n)] + ([rate] if rate else [])
        out = subprocess.run(args, capture_output=True, text=True, timeout=120)
        if out.returncode == SKIP:
            raise NamespacesUnavailable(out.stderr.strip())
        if out.returncode != 0:
            raise RuntimeError("netns.sh up failed: " + out.stderr.strip())
        self.addresses = [line.split()[1] for line in out.stdout.split("\n") if line.strip()]
        self.processes = []

    def command(self, host, argv):
        """argv run inside host (netns.sh exec execs it, so the pid is the program's)."""
        return [NETNS, "exec", str(self.owner), str(host)] + list(argv)

    def popen(self, host, argv, log_path=None, env=None):
        log = open(log_path, "w") if log_path else subprocess.DEVNULL
        proc = subprocess.Popen(self.command(host, argv), stdout=log, stderr=subprocess.STDOUT, env=env)
        if log_path:
            log.close()  # the child holds its own copy
        self.processes.append(proc)
        return proc

    def run(self, host, argv, timeout=30):
        return subprocess.run(self.command(host, argv), capture_output=True, text=True, timeout=timeout)

    def partition(self, host, mode="both", peer=None):
        args = [NETNS, "partition", str(self.owner), str(host), mode] + ([peer] if peer else [])
        subprocess.run(args, check=True, timeout=30)

    def heal(self, host):
        subprocess.run([NETNS, "heal", str(self.owner), str(host)], check=True, timeout=30)

    def close(self):
        for proc in self.processes:
            if proc.poll() is None:
                proc.kill()
        for proc in self.processes:
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
        subprocess.run([NETNS, "down", str(self.owner)], timeout=60)


def wait_for(predicate, timeout, what, interval=0.1):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError("timed out after %.1fs waiting for %s" % (timeout, what))


class Cluster:
    """etcd on one host, kolo-server replicas on others (default: all on host 0), and
    kolo-workers placed by the caller. HTTP calls run curl inside the host of the
    replica chosen with use_server (the first by default)."""

    ETCD_PORT, GRPC_PORT, HTTP_PORT = 2379, 7070, 7080

    def __init__(self, hosts, bin_dir, lease_ttl=2, etcd_host=0, server_hosts=(0,)):
        self.hosts = hosts
        self.bin = bin_dir
        self.lease_ttl = lease_ttl
        self.dir = tempfile.mkdtemp(prefix="kolo-netns-")
        a = hosts.addresses[etcd_host]
        self.etcd_url = "http://%s:%d" % (a, self.ETCD_PORT)
        self.workers = {}
        self.etcd = hosts.popen(etcd_host, ["etcd", "--name", "netns", "--data-dir", os.path.join(self.dir, "etcd"),
                                            "--listen-client-urls", self.etcd_url,
                                            "--advertise-client-urls", self.etcd_url,
                                            "--listen-peer-urls", "http://%s:2380" % a,
                                            "--initial-advertise-peer-urls", "http://%s:2380" % a,
                                            "--initial-cluster", "netns=http://%s:2380" % a],
                                log_path=os.path.join(self.dir, "etcd.log"))
        self.api_host = etcd_host
        wait_for(lambda: '"health":"true"' in self.curl_raw(self.etcd_url + "/health"), 30, "etcd healthy")
        self.servers = []
        for k, host in enumerate(server_hosts):
            address = hosts.addresses[host]
            proc = hosts.popen(host, [os.path.join(bin_dir, "kolo-server"), "--etcd", self.etcd_url,
                                      "--grpc-listen", "%s:%d" % (address, self.GRPC_PORT),
                                      "--http-listen", "%s:%d" % (address, self.HTTP_PORT),
                                      "--name", "server%d" % k, "--leader-ttl", "2",
                                      "--data-dir", os.path.join(self.dir, "server%d" % k)],
                               log_path=os.path.join(self.dir, "server%d.log" % k))
            self.servers.append((host, proc))
            self.use_server(k)
            wait_for(lambda: (self.get("/readyz") or {}).get("leader"), 30, "kolo-server %d ready" % k)
        self.use_server(0)

    def use_server(self, k):
        """Sends the next HTTP calls to replica k, from inside its host."""
        self.api_host = self.servers[k][0]
        self.server_address = self.hosts.addresses[self.api_host]

    def curl_raw(self, url, method="GET", body=None):
        args = ["curl", "-sS", "--max-time", "5", "-X", method, url]
        if body is not None:
            args += ["-H", "Content-Type: application/json", "--data-binary", body]
        out = self.hosts.run(self.api_host, args, timeout=15)
        return out.stdout

    def get(self, path):
        text = self.curl_raw("http://%s:%d%s" % (self.server_address, self.HTTP_PORT, path))
        try:
            return json.loads(text)
        except ValueError:
            return None

    def post(self, path, body):
        text = self.curl_raw("http://%s:%d%s" % (self.server_address, self.HTTP_PORT, path), "POST",
                             json.dumps(body))
        return json.loads(text)

    def start_worker(self, worker_id, host, port):
        address = "%s:%d" % (self.hosts.addresses[host], port)
        self.workers[worker_id] = (host, self.hosts.popen(
            host, [os.path.join(self.bin, "kolo-worker"), "--etcd", self.etcd_url, "--id", worker_id,
                   "--advertise", address, "--lease-ttl", str(self.lease_ttl),
                   "--work-dir", os.path.join(self.dir, worker_id), "--stop-grace-ms", "500"],
            log_path=os.path.join(self.dir, worker_id + ".log")))

    def wait_workers(self, n):
        wait_for(lambda: len((self.get("/v1/workers") or {}).get("workers", [])) == n, 30,
                 "%d workers registered" % n)

    def job(self, job_id):
        return self.get("/v1/jobs/" + job_id)

    def wait_phase(self, job_id, phase, timeout=60, min_epoch=0):
        def reached():
            job = self.job(job_id)
            status = (job or {}).get("status", {})
            if status.get("phase") == phase and int(status.get("epoch", 0)) >= min_epoch:
                return job
            if status.get("phase") in ("SUCCEEDED", "FAILED", "CANCELLED") and status.get("phase") != phase:
                raise AssertionError("job %s ended %s: %s" % (job_id, status.get("phase"), json.dumps(job)))
            return None
        return wait_for(reached, timeout, "job %s %s" % (job_id, phase))

    def close(self):
        shutil.rmtree(self.dir, ignore_errors=True)
