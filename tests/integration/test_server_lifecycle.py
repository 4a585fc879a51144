"""kolo-server's documented life cycle against a real etcd, where it had no test:
- /readyz and /healthz answer without the API token (they are probes);
- at startup the server retries an etcd that does not answer for 30 s, then exits 1
  with a one-line reason; an etcd that comes up within that time is used; SIGTERM
  while it waits exits 0 at once;
- a leader that was paused (SIGSTOP) past its lease and resumed writes nothing as a
  leader: a job submitted while it slept stays PENDING until the next real leader
  takes over, although the resumed replica sees the job and an idle worker for it."""
import os
import signal
import socket
import subprocess
import tempfile
import time
import unittest

from test_server_support import BIN, Client, Etcd, Server, curl, main, pb, wait_for

TOKEN = "lifecycle-token-0123456789"
TTL = 3


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def process_state(pid):
    with open("/proc/%d/stat" % pid) as f:
        return f.read().rsplit(")", 1)[1].split()[0]


def freeze(pid):
    os.kill(pid, signal.SIGSTOP)
    wait_for(lambda: process_state(pid) == "T", 5, "process %d stopped" % pid)
    time.sleep(0.05)  # let its other threads follow


def is_leader(server):
    code, body = curl(server.http_port, "/readyz")
    return code == 200 and isinstance(body, dict) and body.get("is_leader")


class ProbeTest(unittest.TestCase):
    def setUp(self):
        self.etcd = Etcd()
        self.dir = tempfile.mkdtemp(prefix="kolo-life-")
        token_file = os.path.join(self.dir, "token")
        with open(token_file, "w") as f:
            f.write(TOKEN)
        self.server = Server(self.etcd.url, "--token-file", token_file)

    def tearDown(self):
        self.server.kill()
        self.etcd.stop()

    def test_the_probes_answer_without_the_token(self):
        port = self.server.http_port
        self.assertEqual(curl(port, "/v1/jobs")[0], 401)
        code, body = wait_for(lambda: (lambda r: r if r[0] == 200 else None)(curl(port, "/readyz")), 15,
                              "ready without a token")
        self.assertTrue(body["ready"])
        self.assertTrue(body["etcd"])
        self.assertEqual(curl(port, "/healthz"), (200, {"status": "ok"}))


class StartupTest(unittest.TestCase):
    def start_raw(self, etcd_url):
        self.dir = tempfile.mkdtemp(prefix="kolo-start-")
        self.port_file = os.path.join(self.dir, "ports")
        self.proc = subprocess.Popen(
            [os.path.join(BIN, "kolo-server"), "--etcd", etcd_url, "--grpc-listen", "127.0.0.1:0",
             "--http-listen", "127.0.0.1:0", "--port-file", self.port_file,
             "--data-dir", os.path.join(self.dir, "data")],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        return time.monotonic()

    def tearDown(self):
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()

    def test_without_etcd_the_server_retries_30_s_then_exits_1_with_a_reason(self):
        started = self.start_raw("http://127.0.0.1:%d" % free_port())
        time.sleep(20)
        self.assertIsNone(self.proc.poll(), "still retrying after 20 s")
        code = self.proc.wait(timeout=30)
        took = time.monotonic() - started
        out = self.proc.stdout.read()
        print("gave up after %.1f s" % took)
        self.assertEqual(code, 1)
        self.assertGreaterEqual(took, 28)
        self.assertLess(took, 45)
        self.assertIn("giving up", out)
        self.assertFalse(os.path.exists(self.port_file))

    def test_sigterm_while_waiting_for_etcd_exits_0_at_once(self):
        self.start_raw("http://127.0.0.1:%d" % free_port())
        time.sleep(1.5)
        sent = time.monotonic()
        self.proc.send_signal(signal.SIGTERM)
        self.assertEqual(self.proc.wait(timeout=5), 0)
        self.assertLess(time.monotonic() - sent, 2)

    def test_an_etcd_that_comes_up_within_the_window_is_used(self):
        etcd = Etcd()
        try:
            etcd.command("stop")
            self.start_raw(etcd.url)
            time.sleep(3)
            self.assertIsNone(self.proc.poll())
            etcd.command("start")
            wait_for(lambda: os.path.exists(self.port_file), 30, "the server ready after etcd came up")
            with open(self.port_file) as f:
                ports = dict(line.split("=", 1) for line in f.read().split())
            code, _ = wait_for(lambda: (lambda r: r if r[0] == 200 else None)(
                curl(int(ports["http_port"]), "/readyz")), 15, "ready")
            self.assertEqual(code, 200)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
            etcd.stop()


class Worker:
    """One kolo-worker process on 127.0.0.1 with a free data-plane port."""

    def __init__(self, etcd_url, worker_id, directory):
        self.log = open(os.path.join(directory, worker_id + ".log"), "w")
        self.proc = subprocess.Popen(
            [os.path.join(BIN, "kolo-worker"), "--etcd", etcd_url, "--id", worker_id,
             "--advertise", "127.0.0.1:%d" % free_port(), "--lease-ttl", "2",
             "--work-dir", os.path.join(directory, worker_id)],
            stdout=self.log, stderr=subprocess.STDOUT)

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        self.log.close()


class DeposedLeaderTest(unittest.TestCase):
    def setUp(self):
        self.etcd = Etcd()
        self.dir = tempfile.mkdtemp(prefix="kolo-fence-")
        self.servers = []
        self.frozen = []
        self.worker = None

    def tearDown(self):
        for pid in self.frozen:
            try:
                os.kill(pid, signal.SIGCONT)
            except ProcessLookupError:
                pass
        for s in self.servers:
            s.kill()
        if self.worker:
            self.worker.kill()
        self.etcd.stop()

    def start(self, name):
        s = Server(self.etcd.url, "--leader-ttl", str(TTL), "--name", name)
        self.servers.append(s)
        return s

    def test_a_paused_leader_that_wakes_deposed_writes_nothing(self):
        a = self.start("a")
        wait_for(lambda: is_leader(a), 15, "a leads")
        b = self.start("b")
        c = self.start("c")
        self.worker = Worker(self.etcd.url, "w1", self.dir)
        wait_for(lambda: len(curl(c.http_port, "/v1/workers")[1].get("workers", [])) == 1, 15,
                 "the worker registered")

        freeze(a.proc.pid)  # a sleeps as leader
        self.frozen.append(a.proc.pid)
        new_leader = wait_for(lambda: next((s for s in (b, c) if is_leader(s)), None), TTL + 10,
                              "a new leader while a sleeps")
        standby = c if new_leader is b else b
        freeze(new_leader.proc.pid)  # the new leader sleeps too, still holding its lease
        self.frozen.append(new_leader.proc.pid)
        paused_at = time.monotonic()

        # A job that fits the idle worker, submitted through the replica that does not lead.
        client = Client(standby.grpc_target)
        job = pb.JobSpec(id="fenced", name="fenced", min_workers=1, max_workers=1, mode=pb.SYNC)
        job.exec.argv.extend(["/bin/sleep", "30"])
        client.call("SubmitJob", job)

        os.kill(a.proc.pid, signal.SIGCONT)  # the deposed leader wakes up with work to do
        self.frozen.remove(a.proc.pid)
        wait_for(lambda: curl(a.http_port, "/v1/jobs/fenced")[0] == 200, 5, "a sees the job")
        # Until the new leader's lease runs out nobody may schedule the job.
        while True:
            status = client.call("GetJob", pb.GetJobRequest(id="fenced")).status
            if is_leader(standby):
                break
            self.assertEqual((status.phase, status.epoch), (pb.PENDING, 0), "scheduled by a replica that does not lead")
            self.assertLess(time.monotonic() - paused_at, TTL + 10, "the standby never took over")
            time.sleep(0.05)
        print("job stayed PENDING %.2f s after the deposed leader woke" % (time.monotonic() - paused_at))
        self.assertFalse(is_leader(a))
        # The real next leader schedules it (epoch 1; /bin/sleep forms no ring, so it stays
        # PENDING: RUNNING means the ring formed).
        wait_for(lambda: client.call("GetJob", pb.GetJobRequest(id="fenced")).status.epoch == 1,
                 20, "the job scheduled under the new leader")
        self.assertEqual(client.call("GetJob", pb.GetJobRequest(id="fenced")).status.phase, pb.PENDING)
        client.close()


if __name__ == "__main__":
    main()
