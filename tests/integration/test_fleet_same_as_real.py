#!/usr/bin/python3
"""kolo-fleet's simulated worker looks the same to the scheduler and kolo-server as a real
kolo-worker (issue #35): against one real etcd and kolo-server, a real kolo-worker and a
simulated one register records with the same fields, state and lease TTL, and the same
one-worker builtin job run on each goes through the same events to SUCCEEDED with a
report of the same fields and progress in its status."""
import base64
import json
import os
import sys
import unittest
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from fleet_support import Fleet, wait_until  # noqa: E402
from kolo_cluster import Cluster  # noqa: E402
from test_server_support import BIN, curl  # noqa: E402


def etcd_post(url, path, body):
    req = urllib.request.Request(url + path, data=json.dumps(body).encode(), method="POST")
    with urllib.request.urlopen(req, timeout=10) as resp:
        return json.loads(resp.read())


def etcd_kv(url, key):
    """(value as parsed JSON, lease id) of key, or (None, None)."""
    kvs = etcd_post(url, "/v3/kv/range", {"key": base64.b64encode(key.encode()).decode()}).get("kvs", [])
    if not kvs:
        return None, None
    return json.loads(base64.b64decode(kvs[0]["value"])), kvs[0].get("lease")


def job_spec(job_id):
    return {"id": job_id, "name": "same", "min_workers": 1, "max_workers": 1,
            "builtin": {"model": "mlp", "dataset": "synthetic", "steps": 40, "batch_size": 16}}


class FleetLooksReal(unittest.TestCase):
    def setUp(self):
        self.cluster = Cluster()
        self.fleet = None

    def tearDown(self):
        if self.fleet:
            self.fleet.kill()
        self.cluster.stop()

    def workers(self):
        code, body = curl(self.cluster.server.http_port, "/v1/workers")
        return {w["id"]: w for w in body.get("workers", [])} if code == 200 else {}

    def run_job(self, job_id, worker_id):
        """Runs job_spec(job_id) on the one registered worker; returns (job, its report)."""
        self.cluster.submit(job_spec(job_id))
        job = self.cluster.wait_phase(job_id, ("SUCCEEDED", "FAILED"), timeout=120)
        report, _ = etcd_kv(self.cluster.etcd.url, "/kolo/v1/jobs/%s/reports/%s" % (job_id, worker_id))
        wait_until(lambda: self.workers().get(worker_id, {}).get("state") == "IDLE", 30,
                   "%s idle again" % worker_id)
        return job, report

    def test_a_simulated_worker_looks_like_a_real_one_to_the_scheduler(self):
        url = self.cluster.etcd.url
        self.cluster.add_worker("real-1")
        self.fleet = Fleet(BIN, url, 1, "--step-ms", "20", prefix="sim", lease_ttl=2)
        sim_id = "sim-00000"
        listed = wait_until(lambda: (lambda w: w if {"real-1", sim_id} <= set(w) else None)(self.workers()),
                            30, "both workers listed")
        # the records: the same fields, state and lease TTL
        real, real_lease = etcd_kv(url, "/kolo/v1/workers/real-1")
        sim, sim_lease = etcd_kv(url, "/kolo/v1/workers/" + sim_id)
        self.assertEqual(sorted(real), sorted(sim))
        self.assertEqual(real["state"], "idle")
        self.assertEqual(sim["state"], "idle")
        ttl = [int(etcd_post(url, "/v3/lease/timetolive", {"ID": lease})["grantedTTL"])
               for lease in (real_lease, sim_lease)]
        self.assertEqual(ttl[0], ttl[1])
        self.assertEqual(sorted(listed["real-1"]), sorted(listed[sim_id]))

        # the same job on each, one at a time (the other one gone)
        self.assertEqual(self.fleet.stop(), 0)
        self.fleet = None
        wait_until(lambda: sim_id not in self.workers(), 15, "the simulated worker deregistered")
        real_job, real_report = self.run_job("on-real", "real-1")
        self.cluster.workers["real-1"].kill(sig=15)
        wait_until(lambda: "real-1" not in self.workers(), 30, "the real worker gone")
        self.fleet = Fleet(BIN, url, 1, "--step-ms", "20", prefix="sim", lease_ttl=2)
        sim_job, sim_report = self.run_job("on-sim", sim_id)

        for job in (real_job, sim_job):
            self.assertEqual(job["status"]["phase"], "SUCCEEDED", json.dumps(job, indent=1))
            self.assertIn("step", job["status"].get("progress", {}))
        print("events:", [e["type"] for e in real_job["events"]], "report fields:", sorted(real_report))
        self.assertEqual([e["type"] for e in real_job["events"]], [e["type"] for e in sim_job["events"]])
        self.assertEqual(sorted(real_report), sorted(sim_report))
        for field in ("exited", "exit_code", "formed_epoch", "hello", "first_formed_epoch"):
            self.assertEqual(real_report.get(field), sim_report.get(field), field)
        self.assertEqual(self.fleet.stop(), 0)
        self.fleet = None


if __name__ == "__main__":
    unittest.main(verbosity=2)
