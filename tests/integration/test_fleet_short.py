#!/usr/bin/python3
"""The short version of the control plane's scale run (issue #35), functional asserts only:
a real etcd and two kolo-server replicas, 100 simulated workers (kolo-fleet) and 10 jobs of
1-16 workers submitted over gRPC, with churn (a busy worker killed every 2 s, one drained
every 5 s, each replaced a second later). Every job must reach SUCCEEDED (none stuck or
failed), the churn must have re-formed rings, and once the fleet quits nothing is left
behind in etcd: no assignment, worker record, drain mark or worker lease. No timing is
asserted beyond the generous deadlines."""
import base64
import json
import os
import sys
import time
import unittest
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from fleet_support import Fleet, wait_until  # noqa: E402
from test_server_support import BIN, Client, Etcd, Server, pb  # noqa: E402

SIZES = [(1, 2), (2, 4), (4, 8), (8, 16), (2, 2), (4, 6), (3, 12), (6, 8), (16, 16), (1, 8)]


def etcd_post(url, path, body):
    req = urllib.request.Request(url + path, data=json.dumps(body).encode(), method="POST")
    with urllib.request.urlopen(req, timeout=10) as resp:
        return json.loads(resp.read())


def keys_under(url, prefix):
    end = prefix[:-1] + chr(ord(prefix[-1]) + 1)
    body = {"key": base64.b64encode(prefix.encode()).decode(),
            "range_end": base64.b64encode(end.encode()).decode(), "keys_only": True}
    return [base64.b64decode(kv["key"]).decode() for kv in etcd_post(url, "/v3/kv/range", body).get("kvs", [])]


class FleetShort(unittest.TestCase):
    def setUp(self):
        self.etcd = Etcd()
        self.servers, self.fleet, self.client = [], None, None
        try:
            for name in ("a", "b"):
                self.servers.append(Server(self.etcd.url, "--leader-ttl", "2", name="short-" + name))
            self.client = Client(self.servers[0].grpc_target)
        except Exception:
            self.tearDown()
            raise

    def tearDown(self):
        if self.fleet:
            self.fleet.kill()
        if self.client:
            self.client.close()
        for s in self.servers:
            s.kill()
        self.etcd.stop()

    def phase(self, job_id):
        return pb.Phase.Name(self.client.call("GetJob", pb.GetJobRequest(id=job_id)).status.phase)

    def test_a_hundred_simulated_workers_finish_ten_jobs_under_churn_and_leave_nothing(self):
        url = self.etcd.url
        self.fleet = Fleet(BIN, url, 100, "--step-ms", "100", "--form-ms", "100", "--kill-every-ms", "2000",
                           "--drain-every-ms", "5000", "--rejoin-ms", "1000", "--threads", "4", "--seed", "35")
        self.assertEqual(self.fleet.ready, 100)
        ids = []
        for i, (lo, hi) in enumerate(SIZES):
            spec = pb.JobSpec(id="short-%d" % i, name="short", min_workers=lo, max_workers=hi,
                              max_reconfigurations=1000, mode=pb.SYNC)
            spec.builtin.model = "mlp"
            spec.builtin.dataset = "synthetic"
            spec.builtin.steps = 300  # 30 s at --step-ms 100
            ids.append(self.client.call("SubmitJob", spec).id)
        deadline = time.monotonic() + 240
        phases = {}
        while time.monotonic() < deadline:
            phases = {j: self.phase(j) for j in ids}
            if all(p in ("SUCCEEDED", "FAILED", "CANCELLED") for p in phases.values()):
                break
            time.sleep(1)
        self.assertEqual(phases, {j: "SUCCEEDED" for j in ids}, "every job finishes, none stuck or failed")

        events = self.fleet.events()
        kills = [e for e in events if e["ev"] == "kill"]
        drains = [e for e in events if e["ev"] == "drain"]
        self.assertGreaterEqual(len(kills), 5)
        self.assertGreaterEqual(len(drains), 2)
        lost = sum(1 for j in ids for e in self.client.call("GetJob", pb.GetJobRequest(id=j)).events
                   if e.type == "WORKER_LOST")
        self.assertGreater(lost, 0, "the churn re-formed rings")

        self.assertEqual(self.fleet.stop(), 0)
        self.fleet = None
        for prefix in ("/kolo/v1/assign/", "/kolo/v1/workers/", "/kolo/v1/drain/"):
            wait_until(lambda: not keys_under(url, prefix), 30, "nothing left under " + prefix)
        # the killed workers' leases expire (TTL 3 s); the replicas' candidacies remain
        wait_until(lambda: len(etcd_post(url, "/v3/lease/leases", {}).get("leases", [])) <= len(self.servers),
                   30, "no worker lease left")
        for s in self.servers:
            self.assertIsNone(s.proc.poll(), "kolo-server still runs")


if __name__ == "__main__":
    unittest.main(verbosity=2)
