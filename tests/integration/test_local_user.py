"""The attacks of issue #30 by another local user, played for real: a process running as uid
65534 (`nobody`, through setpriv) against kolo-server and kolo-worker processes of this user
on the same machine. Each attack must fail. Needs root (to become nobody); skipped otherwise."""
import base64
import json
import os
import shutil
import stat
import subprocess
import tempfile
import unittest

from kolo_cluster import Cluster
from test_server_support import BIN, Etcd, Server, curl, main, wait_for

NOBODY = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
ROOT = os.geteuid() == 0 and shutil.which("setpriv") is not None


def as_nobody(*argv, timeout=20):
    return subprocess.run(NOBODY + list(argv), capture_output=True, text=True, timeout=timeout)


def children(pid):
    """The ids of pid's child processes."""
    out = []
    for entry in os.listdir("/proc"):
        try:
            with open("/proc/%s/stat" % entry) as f:
                if int(f.read().rsplit(")", 1)[1].split()[1]) == pid:
                    out.append(int(entry))
        except (OSError, ValueError, IndexError):
            pass
    return out


@unittest.skipUnless(ROOT, "needs root and setpriv to run a process as nobody")
class LocalUserTest(unittest.TestCase):
    def setUp(self):
        self.root = tempfile.mkdtemp(prefix="kolo-local-")
        os.chmod(self.root, 0o755)  # a home-like folder other users may enter

    def tearDown(self):
        shutil.rmtree(self.root, ignore_errors=True)

    def test_another_user_cannot_reach_the_private_etcd_of_etcd_auto(self):
        data = os.path.join(self.root, "data")
        srv = Server("auto", "--data-dir", data)
        try:
            code, _ = curl(srv.http_port, "/v1/jobs", "POST", json.dumps(
                {"id": "local-1", "name": "n", "min_workers": 1,
                 "exec": {"argv": ["true"], "env": {"API_KEY": "local-secret"}}}))
            self.assertEqual(code, 200)
            etcd = [p for p in children(srv.proc.pid) if b"etcd" in open("/proc/%d/cmdline" % p, "rb").read()]
            self.assertEqual(len(etcd), 1)
            # what the other user sees in ps: every URL etcd listens on
            argv = as_nobody("cat", "/proc/%d/cmdline" % etcd[0]).stdout.split("\0")
            urls = {u for arg in argv for u in arg.split(",") if "://" in u}
            self.assertTrue(urls, argv)
            query = json.dumps({"key": base64.b64encode(b"/kolo/").decode(),
                                "range_end": base64.b64encode(b"/kolo0").decode()})
            answers = {}
            for url in urls:
                if url.startswith("unix://"):  # relative to etcd's folder, which the test knows
                    args = ["--unix-socket", os.path.join(data, "run", url[7:]), "http://localhost"]
                else:
                    args = [url]
                out = as_nobody("curl", "-sS", "--max-time", "3", "-X", "POST", "-d", query,
                                *args[:-1], args[-1] + "/v3/kv/range")
                answers[url] = (out.returncode, out.stdout)
            read = [u for u, (_, text) in answers.items() if '"kvs"' in text]
            self.assertEqual(read, [], "nobody read the job store (the job's env included)")
            self.assertTrue(all(rc != 0 for rc, _ in answers.values()), answers)  # not even connected
            # and it does not grow forever: old revisions are compacted, the backend has a quota
            self.assertIn("--auto-compaction-retention", argv)
            self.assertIn("--quota-backend-bytes", argv)
        finally:
            self.assertEqual(srv.terminate(), 0)

    def test_a_default_work_dir_made_first_by_another_user_is_refused(self):
        worker_id = "local-%d" % os.getpid()
        planted = "/tmp/kolo-worker-" + worker_id
        root_only = os.path.join(self.root, "root-only")
        os.mkdir(root_only, 0o700)
        shutil.rmtree(planted, ignore_errors=True)
        self.assertEqual(as_nobody("mkdir", "-m", "0777", planted).returncode, 0)
        self.assertEqual(as_nobody("ln", "-s", root_only, planted + "/logs").returncode, 0)
        etcd = Etcd()
        log = open(os.path.join(self.root, "worker.log"), "w+")
        proc = subprocess.Popen([os.path.join(BIN, "kolo-worker"), "--etcd", etcd.url, "--id", worker_id,
                                 "--advertise", "127.0.0.1:1"], stdout=log, stderr=subprocess.STDOUT)
        try:
            wait_for(lambda: proc.poll() is not None, 10, "kolo-worker refusing the planted work dir")
            log.seek(0)
            self.assertNotEqual(proc.returncode, 0)
            self.assertIn("work dir " + planted, log.read())
            self.assertEqual(os.listdir(root_only), [], "the worker wrote through the planted link")
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            log.close()
            etcd.stop()
            shutil.rmtree(planted, ignore_errors=True)

    def test_another_user_cannot_listen_on_a_workers_ring_port_between_jobs(self):
        cluster = Cluster()
        try:
            w = cluster.add_worker("local-ring")
            port = cluster.next_port  # the worker's --advertise port
            squat = ("import socket; s = socket.socket(); "
                     "s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); "
                     "s.bind(('%s', %d)); s.listen(); print('listening')" % (w.host, port))
            out = as_nobody("/usr/bin/python3", "-c", squat)
            self.assertNotIn("listening", out.stdout, "nobody listens on the ring port: hellos go there")
            self.assertIn("Address already in use", out.stderr)
        finally:
            self.assertEqual(cluster.stop(), 0)

    def test_job_output_on_a_worker_is_private_to_its_user(self):
        cluster = Cluster()
        try:
            os.chmod(cluster.root, 0o755)  # even in a folder everyone may enter
            w = cluster.add_worker("local-out")
            cluster.submit({"id": "local-out", "name": "n", "min_workers": 1,
                            "exec": {"argv": ["/bin/sh", "-c", "echo private-output; echo more >&2"]}})
            cluster.wait_phase("local-out", "SUCCEEDED")
            logs = os.path.join(w.dir, "logs")
            files = []
            for top, dirs, names in os.walk(logs):
                self.assertEqual(stat.S_IMODE(os.stat(top).st_mode), 0o700, top)
                files += [os.path.join(top, n) for n in names]
            self.assertTrue(files)
            for path in files:
                self.assertEqual(stat.S_IMODE(os.stat(path).st_mode), 0o600, path)
                out = as_nobody("cat", path)
                self.assertNotIn("private-output", out.stdout)
                self.assertNotEqual(out.returncode, 0)
        finally:
            self.assertEqual(cluster.stop(), 0)


if __name__ == "__main__":
    main()
