"""kolo-server's durability and replicas against a real etcd: a restarted server loses
no job, SIGTERM drains and exits 0 with calls and a watch open, and of two replicas the
survivor leads within the lease TTL + 1 s after the leader is SIGKILLed, while reads on it
keep working."""
import threading
import time
import unittest

import grpc

from test_server_support import Client, Etcd, Server, curl, main, pb, spec, wait_for

TTL = 2


class ReplicaTest(unittest.TestCase):
    def setUp(self):
        self.etcd = Etcd()
        self.servers = []

    def tearDown(self):
        for s in self.servers:
            s.kill()
        self.etcd.stop()

    def start(self, *args, **kw):
        s = Server(self.etcd.url, "--leader-ttl", str(TTL), *args, **kw)
        self.servers.append(s)
        return s

    def test_a_restarted_server_keeps_every_job(self):
        first = self.start()
        client = Client(first.grpc_target)
        for i in range(6):
            client.call("SubmitJob", spec("r-%d" % i, group="restart"))
        client.call("CancelJob", pb.CancelJobRequest(id="r-1", reason="gone"))
        client.call("ScaleJob", pb.ScaleJobRequest(id="r-2", min_workers=2, max_workers=5))
        before = {j.id: j for j in client.call("ListJobs", pb.ListJobsRequest(labels={"group": "restart"})).jobs}
        events_before = {i: client.call("GetJob", pb.GetJobRequest(id=i)).events for i in before}
        client.close()
        self.assertEqual(first.terminate(), 0)
        second = self.start()
        client = Client(second.grpc_target)
        after = {j.id: j for j in client.call("ListJobs", pb.ListJobsRequest(labels={"group": "restart"})).jobs}
        self.assertEqual(after, before)
        for i in before:
            self.assertEqual(client.call("GetJob", pb.GetJobRequest(id=i)).events, events_before[i])
        self.assertEqual(after["r-1"].status.phase, pb.CANCELLED)
        self.assertEqual(after["r-2"].status.max_workers, 5)
        client.close()

    def test_sigterm_drains_and_exits_0_with_calls_and_a_watch_open(self):
        srv = self.start()
        client = Client(srv.grpc_target)
        client.call("SubmitJob", spec("d-1"))
        stream = client.watch("d-1")
        self.assertEqual(next(stream).id, "d-1")
        errors = []
        stop = threading.Event()

        def load():
            c = Client(srv.grpc_target)
            while not stop.is_set():
                try:
                    c.call("GetJob", pb.GetJobRequest(id="d-1"), timeout=5)
                except grpc.RpcError as e:
                    if e.code() not in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.CANCELLED):
                        errors.append(e)
                    break
            c.close()

        threads = [threading.Thread(target=load) for _ in range(3)]
        for t in threads:
            t.start()
        time.sleep(0.3)
        started = time.monotonic()
        self.assertEqual(srv.terminate(timeout=20), 0)
        self.assertLess(time.monotonic() - started, 10)
        stop.set()
        for t in threads:
            t.join(10)
        self.assertEqual(errors, [])
        with self.assertRaises(grpc.RpcError):
            next(stream)
        client.close()
        self.assertIn("stopped", srv.read_log())

    def test_the_survivor_leads_within_the_ttl_after_the_leader_is_killed(self):
        a = self.start(name="replica-a")
        b = self.start(name="replica-b")

        def readiness(s):
            code, body = curl(s.http_port, "/readyz")
            return body if code == 200 and isinstance(body, dict) else None

        wait_for(lambda: all(readiness(s) and readiness(s)["leader"] for s in (a, b)), 15, "a leader")
        leader = a if readiness(a)["is_leader"] else b
        other = b if leader is a else a
        self.assertFalse(readiness(other)["is_leader"])
        self.assertEqual(readiness(other)["leader"], readiness(leader)["leader"])
        client = Client(leader.grpc_target)
        client.call("SubmitJob", spec("f-1"))
        client.close()
        wait_for(lambda: curl(other.http_port, "/v1/jobs/f-1")[0] == 200, 5, "the job on the other replica")

        leader.kill()
        killed = time.monotonic()
        reads = 0
        while True:
            code, body = curl(other.http_port, "/v1/jobs/f-1")
            self.assertEqual(code, 200, body)
            reads += 1
            ready = readiness(other)
            if ready and ready["is_leader"]:
                break
            self.assertLess(time.monotonic() - killed, TTL + 1.0, "no new leader within TTL + 1 s")
            time.sleep(0.05)
        took = time.monotonic() - killed
        self.assertLessEqual(took, TTL + 1.0)
        print("new leader after %.2f s (%d reads served meanwhile)" % (took, reads))
        c2 = Client(other.grpc_target)
        self.assertEqual(c2.call("CancelJob", pb.CancelJobRequest(id="f-1")).status.phase, pb.CANCELLED)
        c2.close()

    def test_with_etcd_down_reads_are_served_writes_fail_cleanly_and_all_resumes_after(self):
        srv = self.start()
        client = Client(srv.grpc_target)
        client.call("SubmitJob", spec("e-1"))
        self.etcd.command("stop")
        self.assertEqual(client.call("GetJob", pb.GetJobRequest(id="e-1")).id, "e-1")
        self.assertEqual(curl(srv.http_port, "/v1/jobs/e-1")[0], 200)
        with self.assertRaises(grpc.RpcError) as ctx:
            client.call("SubmitJob", spec("e-2"), timeout=20)
        self.assertIn(ctx.exception.code(), (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED))
        code, body = curl(srv.http_port, "/readyz")
        self.assertEqual((code, body["etcd"]), (503, False))
        self.etcd.command("start")
        wait_for(lambda: curl(srv.http_port, "/readyz")[0] == 200, 20, "ready again")
        job = wait_for(lambda: _try(lambda: client.call("SubmitJob", spec("e-2"), timeout=5)), 20, "a submit")
        self.assertEqual(job.status.phase, pb.PENDING)
        self.assertEqual(client.call("CancelJob", pb.CancelJobRequest(id="e-1")).status.phase, pb.CANCELLED)
        client.close()
        self.assertEqual(srv.terminate(), 0)

    def test_a_server_started_before_etcd_waits_for_it(self):
        self.etcd.command("stop")
        timer = threading.Timer(1.5, self.etcd.command, args=("start",))
        timer.start()
        try:
            srv = self.start()
        finally:
            timer.join()
        self.assertIn("retrying", srv.read_log())
        client = Client(srv.grpc_target)
        self.assertEqual(client.call("SubmitJob", spec("late-1")).id, "late-1")
        client.close()
        self.assertEqual(srv.terminate(), 0)

    def test_etcd_auto_keeps_jobs_in_the_data_dir_and_stops_its_etcd(self):
        import os
        import re
        import shutil
        import tempfile
        data = tempfile.mkdtemp(prefix="kolo-auto-")
        try:
            first = Server("auto", "--data-dir", data)
            self.servers.append(first)
            client = Client(first.grpc_target)
            client.call("SubmitJob", spec("auto-1"))
            client.close()
            self.assertEqual(first.terminate(), 0)
            pids = re.findall(r"private etcd pid (\d+) stopped", first.read_log())
            self.assertEqual(len(pids), 1, first.read_log())
            self.assertFalse(os.path.exists("/proc/%s/cmdline" % pids[0]) and
                             b"etcd" in open("/proc/%s/cmdline" % pids[0], "rb").read())
            second = Server("auto", "--data-dir", data)
            self.servers.append(second)
            client = Client(second.grpc_target)
            self.assertEqual(client.call("GetJob", pb.GetJobRequest(id="auto-1")).status.phase, pb.PENDING)
            client.close()
            self.assertEqual(second.terminate(), 0)
        finally:
            shutil.rmtree(data, ignore_errors=True)


def _try(fn):
    try:
        return fn()
    except grpc.RpcError:
        return None


if __name__ == "__main__":
    main()
