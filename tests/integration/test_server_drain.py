"""ClusterService end to end against a real etcd and real kolo-worker processes: a drain
belongs to one registration of a worker (it ends when that worker exits, dies or loses its
lease, and never drains the next process under the same id), DrainWorker alone makes the
scheduler re-form a running job without the worker (the next epoch's ring lacks it, its
process leaves at a commit, nothing is redone) and UndrainWorker gives it back, UndrainWorker
over gRPC, HTTP and the CLI, bad and unknown ids, and the demand for workers (GetDemand, GET
/v1/demand and the kolo_workers_* gauges of /metrics)."""
import base64
import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import unittest
import urllib.request

import grpc

import test_server_support as support
from test_server_support import BIN, TESTS, Client, Etcd, Server, cpb, curl, kolo, main, pb, spec, wait_for

support.METHODS.setdefault("UndrainWorker", ("ClusterService", cpb.UndrainWorkerRequest, cpb.Worker))
support.METHODS.setdefault("GetDemand", ("ClusterService", cpb.GetDemandRequest, cpb.Demand))

LEASE_TTL = 2


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Worker:
    """One kolo-worker process under a fixed id (as a StatefulSet pod is)."""

    def __init__(self, etcd_url, worker_id):
        self.dir = tempfile.mkdtemp(prefix="kolo-w-")
        self.log = open(os.path.join(self.dir, "worker.log"), "w")
        port = free_port()
        self.proc = subprocess.Popen(
            [os.path.join(BIN, "kolo-worker"), "--etcd", etcd_url, "--advertise", "127.0.0.1:%d" % port,
             "--id", worker_id, "--lease-ttl", str(LEASE_TTL), "--work-dir", os.path.join(self.dir, "work")],
            stdout=self.log, stderr=subprocess.STDOUT)

    def stop(self, sig=signal.SIGTERM, timeout=30):
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                raise AssertionError("kolo-worker did not exit on %s" % sig)
        self.log.close()
        shutil.rmtree(self.dir, True)
        return self.proc.returncode


def etcd_range(url, prefix):
    """Keys under prefix with their lease, straight from etcd's gateway: {key: (value, lease)}."""
    end = prefix[:-1] + chr(ord(prefix[-1]) + 1)
    body = json.dumps({"key": base64.b64encode(prefix.encode()).decode(),
                       "range_end": base64.b64encode(end.encode()).decode()}).encode()
    with urllib.request.urlopen(urllib.request.Request(url + "/v3/kv/range", data=body, method="POST"),
                                timeout=5) as r:
        kvs = json.loads(r.read()).get("kvs", [])
    return {base64.b64decode(kv["key"]).decode(): (base64.b64decode(kv.get("value", "")).decode(),
                                                    int(kv.get("lease", 0))) for kv in kvs}


def etcd_get(url, key):
    """The JSON value of one key, or None."""
    got = etcd_range(url, key).get(key)
    return json.loads(got[0]) if got else None


def etcd_put(url, key, value):
    body = json.dumps({"key": base64.b64encode(key.encode()).decode(),
                       "value": base64.b64encode(value.encode()).decode()}).encode()
    urllib.request.urlopen(urllib.request.Request(url + "/v3/kv/put", data=body, method="POST"), timeout=5).read()


class DrainAndDemandTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.etcd = Etcd()
        try:
            cls.server = Server(cls.etcd.url)
        except Exception:
            cls.etcd.stop()
            raise
        cls.client = Client(cls.server.grpc_target)
        cls.workers = []

    @classmethod
    def tearDownClass(cls):
        for w in cls.workers:
            w.stop(signal.SIGKILL)
        cls.client.close()
        code = cls.server.terminate()
        cls.etcd.stop()
        assert code == 0, "kolo-server exited %s on SIGTERM" % code

    def start_worker(self, worker_id):
        w = Worker(self.etcd.url, worker_id)
        self.workers.append(w)
        wait_for(lambda: self.listed(worker_id) is not None or w.proc.poll() is not None, 30,
                 "worker %s to register" % worker_id)
        self.assertIsNone(w.proc.poll(), "kolo-worker %s exited" % worker_id)
        return w

    def listed(self, worker_id):
        for w in self.client.call("ListWorkers", cpb.ListWorkersRequest()).workers:
            if w.id == worker_id:
                return w
        return None

    def drain_mark(self, worker_id):
        return etcd_range(self.etcd.url, "/kolo/v1/drain/%s" % worker_id).get("/kolo/v1/drain/%s" % worker_id)

    def assertCode(self, code, method, request):
        with self.assertRaises(grpc.RpcError) as ctx:
            self.client.call(method, request)
        self.assertEqual(ctx.exception.code(), code, ctx.exception.details())
        return ctx.exception.details()

    def test_a_drain_mark_lives_under_the_lease_of_the_registration_it_drains(self):
        self.start_worker("drain-lease-0")
        record = etcd_range(self.etcd.url, "/kolo/v1/workers/drain-lease-0")["/kolo/v1/workers/drain-lease-0"]
        drained = self.client.call("DrainWorker", cpb.DrainWorkerRequest(id="drain-lease-0"))
        self.assertTrue(drained.draining)
        value, lease = self.drain_mark("drain-lease-0")
        self.assertEqual(lease, record[1])
        self.assertNotEqual(lease, 0)
        self.assertEqual(json.loads(value)["lease"], record[1])

    def test_a_drained_worker_that_exits_and_comes_back_under_its_name_is_not_drained(self):
        # A StatefulSet rollout: preStop drain, SIGTERM, a new process under the same id.
        w = self.start_worker("drain-roll-1")
        self.assertTrue(self.client.call("DrainWorker", cpb.DrainWorkerRequest(id="drain-roll-1")).draining)
        self.assertEqual(w.stop(signal.SIGTERM), 0)
        self.assertIsNone(self.drain_mark("drain-roll-1"), "the mark outlived the worker's registration")
        self.start_worker("drain-roll-1")
        again = self.listed("drain-roll-1")
        self.assertFalse(again.draining)
        self.assertNotEqual(again.state, "DRAINING")

    def test_a_drained_worker_that_dies_is_not_drained_when_it_comes_back(self):
        w = self.start_worker("drain-kill-2")
        self.client.call("DrainWorker", cpb.DrainWorkerRequest(id="drain-kill-2"))
        w.stop(signal.SIGKILL)
        wait_for(lambda: self.drain_mark("drain-kill-2") is None, LEASE_TTL + 10,
                 "the drain mark to go with the dead worker's lease")
        self.start_worker("drain-kill-2")
        self.assertFalse(self.listed("drain-kill-2").draining)

    def test_a_legacy_mark_without_a_lease_does_not_drain_the_worker(self):
        # What kolo-server wrote before drains belonged to a registration: never expired.
        etcd_put(self.etcd.url, "/kolo/v1/drain/drain-legacy-3", '{"draining":true,"time_unix_ms":1}')
        self.start_worker("drain-legacy-3")
        self.assertFalse(self.listed("drain-legacy-3").draining)
        code, body = curl(self.server.http_port, "/v1/workers")
        self.assertEqual([x["draining"] for x in body["workers"] if x["id"] == "drain-legacy-3"], [False])

    def test_undrain_takes_the_mark_back_over_grpc_http_and_the_cli(self):
        self.start_worker("undrain-4")
        for how in ("grpc", "http", "cli"):
            self.assertTrue(self.client.call("DrainWorker", cpb.DrainWorkerRequest(id="undrain-4")).draining)
            self.assertIsNotNone(self.drain_mark("undrain-4"))
            if how == "grpc":
                w = self.client.call("UndrainWorker", cpb.UndrainWorkerRequest(id="undrain-4"))
                self.assertEqual((w.id, w.draining), ("undrain-4", False))
            elif how == "http":
                code, body = curl(self.server.http_port, "/v1/workers/undrain-4:undrain", "POST")
                self.assertEqual((code, body["id"], body["draining"]), (200, "undrain-4", False), body)
            else:
                code, out, err = kolo(self.server, "undrain", "undrain-4")
                self.assertEqual(code, 0, err)
                self.assertIn("undrain-4 is not drained", out)
            self.assertIsNone(self.drain_mark("undrain-4"), how)
            self.assertFalse(self.listed("undrain-4").draining, how)
        # undrain of a worker that is not drained changes nothing and succeeds
        self.assertFalse(self.client.call("UndrainWorker", cpb.UndrainWorkerRequest(id="undrain-4")).draining)

    def test_unknown_and_bad_worker_ids_are_refused_with_a_clear_error(self):
        for method, req in (("DrainWorker", cpb.DrainWorkerRequest), ("UndrainWorker", cpb.UndrainWorkerRequest)):
            self.assertIn("no worker nobody", self.assertCode(grpc.StatusCode.NOT_FOUND, method, req(id="nobody")))
            for bad in ("", "a/b", "..", "x" * 129, "w\u00e9"):
                details = self.assertCode(grpc.StatusCode.INVALID_ARGUMENT, method, req(id=bad))
                self.assertTrue(details.startswith("id: "), details)
        code, body = curl(self.server.http_port, "/v1/workers/nobody:undrain", "POST")
        self.assertEqual((code, body["error"]["code"]), (404, "NOT_FOUND"))
        code, body = curl(self.server.http_port, "/v1/workers/a%2Fb:undrain", "POST")
        self.assertIn(code, (400, 404), body)
        code, _, err = kolo(self.server, "undrain", "nobody")
        self.assertEqual(code, 1)
        self.assertIn("NOT_FOUND", err)
        code, _, err = kolo(self.server, "undrain")
        self.assertEqual(code, 2, err)
        self.assertIn("undrain needs exactly one worker id", err)

    def test_demand_counts_what_pending_jobs_want_as_json_grpc_and_metrics(self):
        self.start_worker("demand-5")
        before = self.client.call("GetDemand", cpb.GetDemandRequest())
        # min_workers above what is registered keeps it PENDING
        self.client.call("SubmitJob", spec("demand-big", min_workers=40, max_workers=50))
        d = self.client.call("GetDemand", cpb.GetDemandRequest())
        self.assertEqual(d.workers_wanted - before.workers_wanted, 50)
        self.assertEqual(d.workers_missing - before.workers_missing, 50)
        self.assertEqual(d.pending_jobs - before.pending_jobs, 1)
        self.assertGreaterEqual(d.workers_registered, 1)
        self.assertGreater(d.time_unix_ms, 0)
        code, body = curl(self.server.http_port, "/v1/demand")
        self.assertEqual(code, 200, body)
        self.assertEqual((body["workers_wanted"], body["pending_jobs"]), (d.workers_wanted, d.pending_jobs))
        code, text = curl(self.server.http_port, "/metrics")
        self.assertEqual(code, 200)
        gauges = dict(line.split(" ", 1) for line in text.splitlines() if line and not line.startswith("#"))
        self.assertEqual(int(gauges["kolo_workers_wanted"]), d.workers_wanted)
        self.assertEqual(int(gauges["kolo_workers_missing"]), d.workers_missing)
        self.assertEqual(int(gauges["kolo_workers"]), d.workers_registered)
        self.assertIn("kolo_workers_idle", gauges)
        self.assertIn("kolo_workers_draining", gauges)
        code, out, err = kolo(self.server, "demand")
        self.assertEqual(code, 0, err)
        self.assertIn("workers wanted %d" % d.workers_wanted, out)
        self.client.call("CancelJob", pb.CancelJobRequest(id="demand-big"))
        after = self.client.call("GetDemand", cpb.GetDemandRequest())
        self.assertEqual(after.workers_wanted, before.workers_wanted)
        self.assertEqual(after.pending_jobs, before.pending_jobs)

    def test_drain_worker_alone_re_forms_the_job_without_it_and_undrain_gives_it_back(self):
        for w in self.workers:  # idle workers of other tests would join this job
            w.stop(signal.SIGTERM)
        self.workers.clear()
        ids = ["job-drain-%d" % i for i in range(3)]
        workers = {i: self.start_worker(i) for i in ids}
        out = tempfile.mkdtemp(prefix="kolo-drain-job-")
        job = {"name": "d", "id": "drained-job", "min_workers": 2, "max_workers": 3,
               "exec": {"argv": [os.path.join(TESTS, "elastic_loop"), "1000", "1000", "5", "10"],
                        "env": {"KOLO_RESULT_FILE": os.path.join(out, "result"),
                                "KOLO_REFORM_FILE": os.path.join(out, "reform"),
                                "KOLO_GATE_FILE": os.path.join(out, "gate")}}}  # ends when the test says
        code, body = curl(self.server.http_port, "/v1/jobs", "POST", json.dumps(job))
        self.assertEqual(code, 200, body)
        get = lambda: self.client.call("GetJob", pb.GetJobRequest(id="drained-job"))
        members = lambda: sorted(m.worker_id for m in get().status.members)
        wait_for(lambda: members() == sorted(ids) and get().status.phase == pb.RUNNING, 60, "the job on 3 workers", 0.1)
        # RUNNING is written when the job is scheduled, before any ring formed; a drain then
        # re-plans before the first ring, the survivors' first ring is the drain's epoch and
        # nobody re-forms (no REFORM line): wait until the ring trains (rank 0's progress is
        # copied once every member formed it)
        wait_for(lambda: get().status.progress.step >= 5, 60, "the job's first ring to train", 0.1)
        target = ids[1]
        self.assertTrue(self.client.call("DrainWorker", cpb.DrainWorkerRequest(id=target)).draining)
        wait_for(lambda: target not in members(), 30, "the job to re-form without %s" % target, 0.1)
        j = get()
        drained = [e for e in j.events if e.type == "WORKER_DRAINED"]
        self.assertEqual(len(drained), 1, [e.message for e in j.events])
        self.assertTrue(drained[0].message.startswith(target + " left (drained)"), drained[0].message)
        ring = etcd_get(self.etcd.url, "/kolo/v1/jobs/drained-job/ring/%020d" % drained[0].epoch)
        self.assertNotIn(target, [m["worker_id"] for m in ring["members"]])
        self.assertTrue(ring.get("planned"), "a drain re-form is planned (switch at the next commit)")
        # the worker is not stopped: it stays registered, drained, and gets no work
        record = lambda: etcd_get(self.etcd.url, "/kolo/v1/workers/" + target) or {}
        wait_for(lambda: record().get("state", "").lower() == "idle", 30, "%s's process to leave" % target, 0.1)
        self.assertIsNone(workers[target].proc.poll(), "kolo-worker exited on a drain")
        self.assertTrue(self.listed(target).draining)
        time.sleep(1)
        self.assertNotIn(target, members(), "a drained worker was given work again")
        story = ["%s %s" % (e.type, e.message) for e in j.events]  # printed when a check fails
        self.assertEqual((j.status.reconfigurations, j.status.drains), (0, 1), story)
        self.assertTrue(os.path.exists(os.path.join(out, "reform")),
                        "no rank wrote a REFORM line; events: %s; files: %s" % (story, os.listdir(out)))
        with open(os.path.join(out, "reform")) as f:
            at_drain = [int(l.split()[2]) for l in f if int(l.split()[1]) == drained[0].epoch]
        self.assertTrue(at_drain, "nobody formed the drain's epoch")
        self.assertEqual(set(at_drain), {0}, "steps redone at the drain")
        # undrained, it is idle again and the job grows back to it
        self.assertFalse(self.client.call("UndrainWorker", cpb.UndrainWorkerRequest(id=target)).draining)
        wait_for(lambda: target in members(), 30, "the job to take %s back" % target, 0.1)
        self.assertIn(get().status.phase, (pb.RUNNING, pb.RECONFIGURING))
        open(os.path.join(out, "gate"), "w").close()
        wait_for(lambda: get().status.phase in (pb.SUCCEEDED, pb.FAILED), 120, "the job to end", 0.2)
        j = get()
        self.assertEqual(j.status.phase, pb.SUCCEEDED, j.status.error)
        self.assertEqual((j.status.reconfigurations, j.status.drains), (0, 1))
        with open(os.path.join(out, "result")) as f:
            results = [l.split() for l in f if l.strip()]
        self.assertEqual(len(results), 3, results)
        self.assertTrue(all(r[1] == "1000" and r[4] == "exact" for r in results), results)


if __name__ == "__main__":
    main()
