"""#30 item 6: a worker cut off from etcd must not keep running its job while the scheduler
starts it elsewhere. Before the fence, a worker partitioned from etcd for 10 s ran its job beside
the copy the scheduler had restarted on another worker, for 8 s. With the partition fence (on by
default; --partition-fence=off turns it off) the agent holds its process once no lease renewal
has been acknowledged for a TTL less a margin (worker/agent/fence.h): this job's program does not
use libkolo, so it is paused with SIGSTOP (a libkolo process is held inside libkolo instead, its
beat going on: tests/integration/test_elastic.c), and killed when etcd, reachable again, says the
lease is gone. Real etcd, kolo-server and two
kolo-workers; the partition is a TCP proxy between one worker and etcd that stops forwarding."""
import os
import socket
import sys
import threading
import time
import unittest

from kolo_cluster import Cluster, Worker
from test_server_support import curl, main, wait_for

# An exec job's program: appends "<pid> <unix time>" to a file every 50 ms for a minute.
WRITER = ("import os, sys, time\n"
          "end = time.time() + 60\n"
          "while time.time() < end:\n"
          "    with open(sys.argv[1], 'a') as f:\n"
          "        f.write('%d %.3f\\n' % (os.getpid(), time.time()))\n"
          "    time.sleep(0.05)\n")


class Proxy:
    """A TCP forwarder to etcd that can be cut (its listener closed, every connection dropped)
    and healed (listening again on the same port)."""

    def __init__(self, target_port):
        self.target = ("127.0.0.1", target_port)
        self.lock = threading.Lock()
        self.conns = []
        self.listener = None
        probe = socket.socket()
        probe.bind(("127.0.0.1", 0))
        self.port = probe.getsockname()[1]
        probe.close()
        self.heal()

    def heal(self):
        self.is_cut = False
        self.listener = socket.socket()
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.listener.bind(("127.0.0.1", self.port))
        self.listener.listen(64)
        threading.Thread(target=self._accept, args=(self.listener,), daemon=True).start()

    def cut(self):
        with self.lock:
            self.is_cut = True
            try:  # wakes the accept() blocked in _accept (close() alone would not)
                self.listener.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            self.listener.close()
            for s in self.conns:
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                s.close()
            self.conns = []

    def _accept(self, listener):
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return
            with self.lock:
                if self.is_cut or listener is not self.listener:
                    client.close()
                    return
                upstream = socket.create_connection(self.target, timeout=5)
                upstream.settimeout(None)
                self.conns += [client, upstream]
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    @staticmethod
    def _pump(src, dst):
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                dst.sendall(data)
        except OSError:
            pass
        for s in (src, dst):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


def copies(path):
    """{pid: [times]} of the writer's lines."""
    out = {}
    if os.path.exists(path):
        with open(path) as f:
            for line in f:
                parts = line.split()
                if len(parts) == 2:
                    out.setdefault(int(parts[0]), []).append(float(parts[1]))
    return out


class PartitionTest(unittest.TestCase):
    def test_a_worker_cut_off_from_etcd_pauses_its_job_before_another_copy_starts(self):
        c = Cluster()
        try:
            etcd_port = int(c.etcd.url.rsplit(":", 1)[1])
            proxy = Proxy(etcd_port)
            c.next_port += 1
            w1 = Worker("http://127.0.0.1:%d" % proxy.port, "w1", "127.0.0.1", c.next_port, c.root)
            c.workers["w1"] = w1
            wait_for(lambda: c.worker_record("w1"), 30, "w1 registered")
            out = os.path.join(c.root, "copies.txt")
            c.submit({"id": "solo", "name": "solo", "min_workers": 1, "max_workers": 1,
                      "exec": {"argv": [sys.executable, "-c", WRITER, out]}})
            wait_for(lambda: len(copies(out)) == 1 and len(next(iter(copies(out).values()))) > 5, 60,
                     "the job writing on w1")
            first = next(iter(copies(out)))
            c.add_worker("w2", "127.0.0.2")
            proxy.cut()
            cut_at = time.time()
            wait_for(lambda: len(copies(out)) == 2, 60, "the job restarted on w2")
            restarted = time.time() - cut_at
            time.sleep(3)  # both copies would write now, without the fence
            proxy.heal()
            wait_for(lambda: "lease" in w1.read_log() and w1_process_gone(first), 30,
                     "w1's paused process killed once etcd says its lease is gone")
            lines = copies(out)
            second = next(pid for pid in lines if pid != first)
            overlap = max(lines[first]) - min(lines[second])
            print("restarted on w2 %.1f s after the cut; the first copy's last line %.3f s %s the "
                  "second's first" % (restarted, abs(overlap), "after" if overlap > 0 else "before"))
            self.assertLess(max(lines[first]), min(lines[second]), "two copies of the job ran at once")
            log = w1.read_log()
            self.assertIn("is paused until etcd answers", log)
            curl(c.server.http_port, "/v1/jobs/solo:cancel", "POST", "{}")
        finally:
            self.assertEqual(c.stop(), 0)


def w1_process_gone(pid):
    return not os.path.exists("/proc/%d" % pid) or open("/proc/%d/stat" % pid).read().split()[2] == "Z"


if __name__ == "__main__":
    main()
