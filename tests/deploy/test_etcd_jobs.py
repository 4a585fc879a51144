"""The chart's etcd side with real processes (tests/deploy/kubelet.py): the rendered etcd
StatefulSet's command runs a real etcd with client TLS (client certificates required), peer
TLS, auto-compaction, a quota and a plain metrics listener that the rendered readiness probe
reads; the rendered auth Job turns user/password auth on (twice: an upgrade runs it again);
then only the kolo user may write, and only under /kolo/; the rendered backup CronJob saves
snapshots that `etcdctl snapshot status` accepts and keeps the newest etcd.backup.keep; and
the rendered kolo-server and kolo-worker reach that etcd with the chart's TLS and password
flags and become ready."""
import base64
import json
import os
import subprocess
import sys
import tempfile
import unittest

import kubelet
from kubelet import Pod, Rendering, free_port, wait_for

BIN = os.path.abspath(os.environ.get("KOLO_BIN_DIR", "build/bin"))
RELEASE, NAMESPACE = "ci", "kolo-test"


def openssl(*args, cwd):
    subprocess.run(["openssl"] + list(args), cwd=cwd, check=True, capture_output=True, timeout=60)


def make_pki(d):
    """A CA, etcd's server certificate (names of the chart's Services and 127.0.0.1) and the
    client certificate kolo presents, without a CommonName: etcd's JSON gateway (which kolo
    uses) refuses a client certificate with a CN once auth is on, and etcd would otherwise
    map the CN to a user."""
    openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=kolo-test-ca",
            "-keyout", "ca.key", "-out", "ca.crt", cwd=d)
    sans = {"server": "subjectAltName=DNS:%s-kolo-etcd,DNS:%s-kolo-etcd.%s.svc,DNS:*.%s-kolo-etcd-peer.%s.svc.cluster.local,IP:127.0.0.1"
                      % (RELEASE, RELEASE, NAMESPACE, RELEASE, NAMESPACE),
            "client": "extendedKeyUsage=clientAuth\nsubjectAltName=DNS:kolo-client"}
    for name, ext in sans.items():
        openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", "/O=kolo" if name == "client" else "/CN=etcd",
                "-keyout", name + ".key", "-out", name + ".csr", cwd=d)
        with open(os.path.join(d, name + ".ext"), "w") as f:
            f.write(ext + ("\nextendedKeyUsage=serverAuth,clientAuth\n" if name == "server" else "\n"))
        openssl("x509", "-req", "-in", name + ".csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial",
                "-days", "1", "-extfile", name + ".ext", "-out", name + ".crt", cwd=d)
    def read(n):
        with open(os.path.join(d, n), "rb") as f:
            return f.read()
    return {s + "-secret": {"ca.crt": read("ca.crt"), "tls.crt": read(s + ".crt"), "tls.key": read(s + ".key")}
            for s in ("server", "client")}


class EtcdJobsTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp(prefix="kolo-etcd-jobs-")
        cls.secrets = make_pki(cls.dir)
        cls.client_port, cls.peer_port, cls.metrics_port = free_port(), free_port(), free_port()
        cls.r = Rendering(RELEASE, NAMESPACE, {
            "etcd.clientPort": cls.client_port, "etcd.peerPort": cls.peer_port, "etcd.metricsPort": cls.metrics_port,
            "etcd.tls.enabled": "true", "etcd.tls.serverSecret": "server-secret", "etcd.tls.clientSecret": "client-secret",
            "etcd.auth.enabled": "true", "etcd.backup.keep": 2,
            "coordinator.grpcPort": free_port(), "coordinator.httpPort": free_port(),
        })
        sts = cls.r.find("StatefulSet", RELEASE + "-kolo-etcd")
        cls.etcd = Pod(cls.r, sts, RELEASE + "-kolo-etcd-0", BIN, secrets=cls.secrets).start()
        try:
            cls.etcd.wait_ready(timeout=60)
        except AssertionError:
            kubelet.stop_all()
            raise
        cls.passwords = {k: cls.r.secret_value(RELEASE + "-kolo-etcd-auth", k) for k in ("root-password", "password")}

    @classmethod
    def tearDownClass(cls):
        kubelet.stop_all()

    def etcdctl(self, *args, user=None, cert=True):
        env = dict(os.environ, ETCDCTL_API="3", ETCDCTL_ENDPOINTS="https://127.0.0.1:%d" % self.client_port,
                   ETCDCTL_CACERT=os.path.join(self.dir, "ca.crt"))
        if cert:
            env.update(ETCDCTL_CERT=os.path.join(self.dir, "client.crt"), ETCDCTL_KEY=os.path.join(self.dir, "client.key"))
        if user:
            env["ETCDCTL_USER"] = user
        return subprocess.run(["etcdctl"] + list(args), env=env, capture_output=True, text=True, timeout=30)

    def run_job(self, kind, name):
        obj = self.r.find(kind, name)
        pod = Pod(self.r, obj, name + "-pod", BIN, secrets=self.secrets).start()
        code = pod.wait_exit(timeout=120)
        return code, pod.read_log()

    def test_1_etcd_serves_only_tls_clients_with_a_certificate(self):
        args = " ".join(self.etcd.command())
        for flag in ("--client-cert-auth", "--auto-compaction-mode=periodic", "--quota-backend-bytes=2147483648"):
            self.assertIn(flag, args)
        self.assertTrue(self.etcd.probe("readinessProbe"))
        no_cert = self.etcdctl("endpoint", "health", cert=False)
        self.assertNotEqual(no_cert.returncode, 0, "etcd answered a client without a certificate")
        plain = subprocess.run(["curl", "-s", "--max-time", "3", "http://127.0.0.1:%d/version" % self.client_port],
                               capture_output=True, text=True, timeout=10)
        self.assertNotIn("etcdserver", plain.stdout, "etcd answered plain HTTP on its client port")

    def test_2_the_auth_job_turns_auth_on_and_is_idempotent(self):
        name = RELEASE + "-kolo-etcd-auth"
        for run in ("install", "upgrade"):
            code, log = self.run_job("Job", name)
            self.assertEqual(code, 0, "%s run of the auth job failed:\n%s" % (run, log))
            self.assertIn("etcd auth is on", log)
        root = "root:" + self.passwords["root-password"]
        kolo = "kolo:" + self.passwords["password"]
        # the client certificate alone is no user: it may write nothing
        self.assertNotEqual(self.etcdctl("put", "/kolo/v1/t", "x").returncode, 0)
        self.assertEqual(self.etcdctl("put", "/kolo/v1/t", "x", user=kolo).returncode, 0)
        denied = self.etcdctl("put", "/other", "x", user=kolo)
        self.assertNotEqual(denied.returncode, 0)
        self.assertIn("permission denied", denied.stderr)
        self.assertNotEqual(self.etcdctl("put", "/kolo/v1/t", "x", user="kolo:wrong").returncode, 0)
        self.assertEqual(self.etcdctl("user", "list", user=root).returncode, 0)

    def test_3_the_backup_cronjob_saves_valid_snapshots_and_keeps_the_newest(self):
        name = RELEASE + "-kolo-etcd-backup"
        for _ in range(3):
            code, log = self.run_job("CronJob", name)
            self.assertEqual(code, 0, log)
            self.assertIn("saved /", log)
        backup = kubelet._claims[name]
        snaps = sorted(f for f in os.listdir(backup) if f.startswith("snapshot-"))
        self.assertEqual(len(snaps), 2, snaps)  # etcd.backup.keep
        self.assertFalse([f for f in os.listdir(backup) if f.endswith(".part")])
        status = subprocess.run(["etcdctl", "snapshot", "status", os.path.join(backup, snaps[-1]), "-w", "json"],
                                env=dict(os.environ, ETCDCTL_API="3"), capture_output=True, text=True, timeout=30)
        self.assertEqual(status.returncode, 0, status.stderr)
        self.assertGreater(json.loads(status.stdout)["totalKey"], 0)

    def test_4_kolo_reaches_etcd_with_the_charts_tls_and_password(self):
        coordinator = Pod(self.r, self.r.find("Deployment", RELEASE + "-kolo-coordinator"),
                          RELEASE + "-kolo-coordinator-0", BIN, secrets=self.secrets).start()
        coordinator.wait_ready(timeout=60)
        args = " ".join(coordinator.command())
        for flag in ("--etcd https://", "--etcd-ca ", "--etcd-cert ", "--etcd-key ", "--etcd-user kolo",
                     "--etcd-password-file "):
            self.assertIn(flag, args)
        data, health, logs = free_port(), free_port(), free_port()
        worker = Pod(self.r, self.r.find("StatefulSet", RELEASE + "-kolo-worker"), RELEASE + "-kolo-worker-0", BIN,
                     ports={7100: data, 7101: health, 7102: logs}, secrets=self.secrets,
                     env={"KOLO_WORKER_PORT": str(data), "KOLO_WORKER_HEALTH_PORT": str(health),
                          "KOLO_WORKER_LOGS_PORT": str(logs)})
        worker.start().wait_ready(timeout=60)
        # registered under /kolo/ as the kolo user
        kolo = "kolo:" + self.passwords["password"]
        listed = self.etcdctl("get", "--prefix", "--keys-only", "/kolo/v1/workers/", user=kolo)
        self.assertIn("/kolo/v1/workers/%s-kolo-worker-0" % RELEASE, listed.stdout)


if __name__ == "__main__":
    unittest.main(verbosity=2)
