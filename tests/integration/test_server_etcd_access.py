"""kolo-server and kolo-worker against an etcd that requires TLS client certificates, and
one with user/password auth (issue #12 item 12): --etcd-ca/--etcd-cert/--etcd-key/--etcd-user/
--etcd-password-file reach every etcd client of each binary (the server's job store, its
leader election and scheduler; the agent), so a job is stored, scheduled, run and finished.
Without the credentials, or with a wrong password, the binaries fail with a clear reason;
bad flag combinations stop them at startup. Real etcd (tests/support/etcd_harness with
TLS), a throwaway CA made with the openssl CLI, real processes on 127.0.0.1."""
import base64
import json
import os
import shutil
import subprocess
import tempfile
import time
import unittest

from kolo_cluster import Worker
from test_server_support import BIN, Etcd, Server, curl, main, wait_for

CERTS = r"""set -e
K='-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes'
openssl req -x509 $K -keyout ca.key -out ca.crt -days 1 -subj /CN=kolo-test-ca 2>/dev/null
printf 'subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth,clientAuth\n' > server.ext
printf 'extendedKeyUsage=clientAuth\n' > client.ext
for n in server client; do
  openssl req $K -keyout $n.key -out $n.csr -subj /CN=$n 2>/dev/null
  openssl x509 -req -in $n.csr -CA ca.crt -CAkey ca.key -CAcreateserial -out $n.crt -days 1 -extfile $n.ext 2>/dev/null
done
"""


def gateway(url, path, body, token=None):
    """One etcd JSON-gateway call over plain HTTP (setting up users)."""
    args = ["curl", "-sS", "--max-time", "10", "-X", "POST", "--data-binary", json.dumps(body)]
    if token:
        args += ["-H", "Authorization: " + token]
    out = subprocess.run(args + [url + "/v3/" + path], capture_output=True, text=True, timeout=20)
    return json.loads(out.stdout or "{}")


class Cluster:
    """etcd (given) + kolo-server + kolo-workers, all with the same etcd flags."""

    def __init__(self, etcd, url, flags, root):
        self.etcd, self.url, self.flags, self.root = etcd, url, flags, root
        self.server = Server(url, "--leader-ttl", "2", *flags)
        self.workers = []

    def worker(self, worker_id, port, *flags):
        w = Worker(self.url, worker_id, "127.0.0.1", port, self.root, *flags)
        self.workers.append(w)
        return w

    def listed(self, worker_id):
        code, reply = curl(self.server.http_port, "/v1/workers")
        return code == 200 and any(w["id"] == worker_id for w in reply.get("workers", []))

    def run_a_job(self, test, port):
        """Leader elected, a worker registered, a job stored, scheduled, run and finished."""
        http = self.server.http_port
        wait_for(lambda: curl(http, "/readyz")[1].get("is_leader"), 30, "leader elected")
        before = int(time.time() * 1000)
        w = self.worker("w1", port, *self.flags)
        wait_for(lambda: self.listed("w1") or w.proc.poll() is not None, 30, "w1 registered")
        test.assertIsNone(w.proc.poll(), w.read_log())
        # #12 item 10: the worker's registration time is real (it was always 0)
        listed = [x for x in curl(http, "/v1/workers")[1]["workers"] if x["id"] == "w1"][0]
        test.assertTrue(before - 1000 <= int(listed.get("registered_unix_ms", 0)) <= time.time() * 1000 + 1000, listed)
        code, job = curl(http, "/v1/jobs", "POST", json.dumps(
            {"name": "access", "id": "access-1", "min_workers": 1, "exec": {"argv": ["/bin/true"]}}))
        test.assertEqual(code, 200, job)
        wait_for(lambda: curl(http, "/v1/jobs/access-1")[1]["status"]["phase"] == "SUCCEEDED", 60, "job succeeded")

    def refused(self, test, worker_id, port, flags):
        """A worker with these etcd flags exits non-zero and never registers."""
        w = self.worker(worker_id, port, *flags)
        try:
            w.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            test.fail("%s kept running without access to etcd:\n%s" % (worker_id, w.read_log()))
        test.assertNotEqual(w.proc.returncode, 0)
        test.assertFalse(self.listed(worker_id))

    def stop(self):
        for w in self.workers:
            w.kill()
        self.server.terminate()


class EtcdTlsTest(unittest.TestCase):
    """etcd serving https:// and requiring client certificates."""

    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp(prefix="kolo-etcd-tls-")
        subprocess.run(["sh", "-c", CERTS], cwd=cls.dir, check=True, timeout=60)
        cls.p = staticmethod(lambda name: os.path.join(cls.dir, name))
        cls.etcd = Etcd(tls=(cls.p("server.crt"), cls.p("server.key"), cls.p("ca.crt")))
        flags = ["--etcd-ca", cls.p("ca.crt"), "--etcd-cert", cls.p("client.crt"), "--etcd-key", cls.p("client.key")]
        cls.cluster = Cluster(cls.etcd, cls.etcd.tls_url, flags, cls.dir)

    @classmethod
    def tearDownClass(cls):
        cls.cluster.stop()
        cls.etcd.stop()
        shutil.rmtree(cls.dir, True)

    def test_a_job_runs_with_the_server_and_worker_on_tls_with_client_certificates(self):
        self.cluster.run_a_job(self, 17961)

    def test_a_worker_without_its_certificate_or_the_ca_does_not_register(self):
        self.cluster.refused(self, "nocert", 17962, ["--etcd-ca", self.p("ca.crt")])
        self.cluster.refused(self, "noca", 17963, ["--etcd-cert", self.p("client.crt"),
                                                   "--etcd-key", self.p("client.key")])

    def test_bad_etcd_flags_stop_both_binaries_at_startup_with_the_reason(self):
        empty = self.p("empty")
        open(empty, "w").close()
        cases = (
            (["--etcd-user", "root"], "--etcd-user needs --etcd-password-file"),
            (["--etcd-cert", self.p("client.crt")], "--etcd-cert needs --etcd-key"),
            (["--etcd-user", "root", "--etcd-password-file", empty], "empty"),
            (["--etcd-ca", self.p("none.crt")], "--etcd-ca " + self.p("none.crt")),
        )
        for flags, reason in cases:
            for binary, extra in (("kolo-server", ["--grpc-listen", "127.0.0.1:0", "--http-listen", "off"]),
                                  ("kolo-worker", ["--advertise", "127.0.0.1:17965"])):
                out = subprocess.run([os.path.join(BIN, binary), "--etcd", self.etcd.tls_url] + extra + flags,
                                     capture_output=True, text=True, timeout=20)
                self.assertNotEqual(out.returncode, 0, (binary, flags))
                self.assertIn(reason, out.stderr, (binary, flags))


class EtcdAuthTest(unittest.TestCase):
    """etcd with user/password auth on. (etcd 3.4's JSON gateway refuses requests that
    carry a client certificate once auth is on, "CommonName of client sending a request
    against gateway will be ignored": TLS client certificates and auth cannot be combined
    there, so auth is tested on its own.)"""

    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp(prefix="kolo-etcd-auth-")
        cls.p = staticmethod(lambda name: os.path.join(cls.dir, name))
        cls.etcd = Etcd()
        for path, body in (("auth/user/add", {"name": "root", "password": "s3cret"}),
                           ("auth/role/add", {"name": "root"}),
                           ("auth/user/grant", {"user": "root", "role": "root"}),
                           ("auth/enable", {})):
            reply = gateway(cls.etcd.url, path, body)
            assert "error" not in reply, (path, reply)
        with open(cls.p("password"), "w") as f:
            f.write("  s3cret\n")
        with open(cls.p("wrong"), "w") as f:
            f.write("guess\n")
        flags = ["--etcd-user", "root", "--etcd-password-file", cls.p("password")]
        cls.cluster = Cluster(cls.etcd, cls.etcd.url, flags, cls.dir)

    @classmethod
    def tearDownClass(cls):
        cls.cluster.stop()
        cls.etcd.stop()
        shutil.rmtree(cls.dir, True)

    def test_a_job_runs_with_the_server_and_worker_logged_in_and_etcd_holds_it(self):
        self.cluster.run_a_job(self, 17971)
        token = gateway(self.etcd.url, "auth/authenticate", {"name": "root", "password": "s3cret"})["token"]
        key = base64.b64encode(b"/kolo/v1/jobs/access-1/spec").decode()
        self.assertEqual(gateway(self.etcd.url, "kv/range", {"key": key}, token).get("count"), "1")
        self.assertIn("error", gateway(self.etcd.url, "kv/range", {"key": key}))  # no token: refused

    def test_a_worker_without_credentials_or_with_a_wrong_password_does_not_register(self):
        self.cluster.refused(self, "nocreds", 17972, [])
        self.cluster.refused(self, "wrongpw", 17973, ["--etcd-user", "root", "--etcd-password-file", self.p("wrong")])


if __name__ == "__main__":
    main()
