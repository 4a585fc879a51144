"""What a kolo-server asks of etcd (#18: one client, one watch per kolo-server): counted by etcd
itself (its /metrics: etcd_debugging_mvcc_watcher_total) and by kolo-server's own client
counters on its /metrics (kolo_etcd_*). A leading kolo-server holds ONE etcd client and ONE
watch (the store's, which also feeds the scheduler); its scheduler's passes read no etcd
range, also through a whole job's life on a real kolo-worker; --etcd auto schedules the same
way on its private etcd; --etcd none has no etcd client at all and still serves jobs.
ListWorkers, DrainWorker/UndrainWorker, GET /v1/demand and /metrics read the store's records:
no etcd range of the store's, and a drain shows in the very next ListWorkers."""
import json
import os
import re
import shutil
import tempfile
import unittest
import urllib.request

from kolo_cluster import Cluster, Worker
from test_server_support import Client, Server, curl, main, pb, spec, wait_for


def page(url):
    with urllib.request.urlopen(url, timeout=10) as resp:
        return resp.read().decode()


def value(text, name, labels=""):
    """The sample name{labels} of a Prometheus page (None when absent)."""
    m = re.search(r"^%s%s ([0-9.e+-]+)$" % (re.escape(name), re.escape(labels)), text, re.M)
    return float(m.group(1)) if m else None


def server_metrics(server):
    return page("http://127.0.0.1:%d/metrics" % server.http_port)


def leads(server):
    return value(server_metrics(server), "kolo_server_leader") == 1


class EtcdUseTest(unittest.TestCase):
    def setUp(self):
        self.cluster = None

    def tearDown(self):
        if self.cluster:
            self.cluster.stop()

    def test_a_leading_server_holds_one_etcd_client_and_one_watch(self):
        self.cluster = Cluster()
        server = self.cluster.server
        wait_for(lambda: leads(server), 20, "the server leads")
        wait_for(lambda: value(server_metrics(server), "kolo_scheduler_passes_total") >= 2, 20, "passes")
        etcd = page(self.cluster.etcd.url + "/metrics")
        self.assertEqual(value(etcd, "etcd_debugging_mvcc_watcher_total"), 1, "etcd counts one watcher")
        ours = server_metrics(server)
        self.assertEqual(value(ours, "kolo_etcd_clients"), 1)
        self.assertEqual(value(ours, "kolo_etcd_handles"), 4, "the client's own + store, leader, scheduler")
        self.assertEqual(value(ours, "kolo_etcd_watches", '{handle="all"}'), 1)
        self.assertEqual(value(ours, "kolo_etcd_watches", '{handle="store"}'), 1)
        self.assertEqual(value(ours, "kolo_etcd_watches", '{handle="scheduler"}'), 0)
        self.assertEqual(value(ours, "kolo_etcd_watches", '{handle="leader"}'), 0)

    def test_a_job_s_whole_life_takes_no_etcd_read_by_the_scheduler(self):
        self.cluster = Cluster()
        server = self.cluster.server
        wait_for(lambda: leads(server), 20, "the server leads")
        self.cluster.add_worker("w1")
        before = server_metrics(server)
        self.cluster.submit({"name": "life", "id": "life-1", "min_workers": 1,
                             "exec": {"argv": ["/bin/sh", "-c", "sleep 0.5"]}})
        job = self.cluster.wait_phase("life-1", "SUCCEEDED", timeout=60)
        self.assertEqual(job["status"]["phase"], "SUCCEEDED")
        after = server_metrics(server)
        passes = value(after, "kolo_scheduler_passes_total") - value(before, "kolo_scheduler_passes_total")
        self.assertGreaterEqual(passes, 2)
        self.assertIsNone(value(after, "kolo_etcd_requests_total", '{handle="scheduler",kind="range"}'),
                          "the scheduler read etcd: " + after)
        # its writes: the gang's epoch and the end, at least
        self.assertGreaterEqual(value(after, "kolo_etcd_requests_total", '{handle="scheduler",kind="txn"}'), 2)
        self.assertEqual(value(page(self.cluster.etcd.url + "/metrics"), "etcd_debugging_mvcc_watcher_total"),
                         1 + 1, "the server's watch and the worker's")

    def test_workers_drains_demand_and_metrics_read_no_etcd_range(self):
        self.cluster = Cluster()
        server = self.cluster.server
        wait_for(lambda: leads(server), 20, "the server leads")
        self.cluster.add_worker("w1")
        self.cluster.add_worker("w2")

        def store_ranges():
            return value(server_metrics(server), "kolo_etcd_requests_total", '{handle="store",kind="range"}') or 0

        before = store_ranges()
        port = server.http_port
        for _ in range(3):
            code, body = curl(port, "/v1/workers")
            self.assertEqual(code, 200)
            self.assertEqual(sorted(w["id"] for w in body["workers"]), ["w1", "w2"])
            code, body = curl(port, "/v1/demand")
            self.assertEqual(code, 200, body)
            self.assertEqual(body.get("workers_registered"), 2, body)
        code, body = curl(port, "/v1/workers/w1:drain", "POST", "{}")
        self.assertEqual(code, 200, body)
        self.assertTrue(body.get("draining"), body)
        # read-your-writes: the very next list shows it
        code, body = curl(port, "/v1/workers")
        self.assertEqual({w["id"]: w.get("state") for w in body["workers"]}, {"w1": "DRAINING", "w2": "IDLE"})
        code, body = curl(port, "/v1/demand")
        self.assertEqual(body.get("workers_draining"), 1, body)
        code, body = curl(port, "/v1/workers/w1:undrain", "POST", "{}")
        self.assertEqual(code, 200, body)
        self.assertFalse(body.get("draining", False), body)
        code, body = curl(port, "/v1/workers/nobody:drain", "POST", "{}")
        self.assertEqual(code, 404, body)
        metrics = server_metrics(server)
        self.assertEqual(value(metrics, "kolo_workers_draining"), 0)
        self.assertEqual(store_ranges(), before, "the store read etcd: " + server_metrics(server))

    def test_auto_schedules_on_its_private_etcd_and_none_has_no_etcd_client(self):
        data = tempfile.mkdtemp(prefix="kolo-auto-")
        root = tempfile.mkdtemp(prefix="kolo-auto-w-")
        worker = None
        auto = none = None
        try:
            auto = Server("auto", "--data-dir", data)
            url = re.search(r"etcd=(unix://\S+)", auto.read_log()).group(1)
            wait_for(lambda: leads(auto), 20, "the auto server leads")
            worker = Worker(url, "wa", "127.0.0.1", 17000 + os.getpid() % 500 * 40 + 39, root)
            client = Client(auto.grpc_target)
            job = spec("auto-life", min_workers=1)
            job.ClearField("builtin")
            job.exec.argv.extend(["/bin/true"])
            client.call("SubmitJob", job)
            wait_for(lambda: client.call("GetJob", pb.GetJobRequest(id="auto-life")).status.phase == pb.SUCCEEDED,
                     60, "the job succeeds on the private etcd")
            client.close()
            ours = server_metrics(auto)
            self.assertEqual(value(ours, "kolo_etcd_clients"), 1)
            self.assertIsNone(value(ours, "kolo_etcd_requests_total", '{handle="scheduler",kind="range"}'))
            worker.kill()
            worker = None
            self.assertEqual(auto.terminate(), 0)
            none = Server("none")
            client = Client(none.grpc_target)
            client.call("SubmitJob", spec("mem-1"))
            self.assertEqual(client.call("GetJob", pb.GetJobRequest(id="mem-1")).status.phase, pb.PENDING)
            client.close()
            self.assertIsNone(value(server_metrics(none), "kolo_etcd_clients"))
            self.assertEqual(none.terminate(), 0)
        finally:
            if worker:
                worker.kill()
            for s in (auto, none):
                if s:
                    s.kill()
            shutil.rmtree(data, ignore_errors=True)
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
