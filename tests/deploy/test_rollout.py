"""Elastic scaling on Kubernetes, with real processes: the chart is rendered with helm, and its
kolo-server and kolo-worker pods run as a kubelet would run them (tests/deploy/kubelet.py:
the rendered commands, flags, environment, secrets and probes; a real etcd). Two scenarios
of issue #20, each with an elastic job running throughout:

- a rolling restart as a StatefulSet does it: for each worker from the highest ordinal down,
  the rendered preStop drain, SIGTERM, a new process under the same name, wait until the
  rendered readiness probe says ready (= registered in etcd), then the next;
- scaling 4 -> 2 -> 4 (podManagementPolicy Parallel), the job shrinking and growing with it.

The job cannot end before the test lets it (elastic_loop's KOLO_GATE_FILE holds it at its
last commit, however slow the machine), so it runs throughout; both finish with the exact
step count and checksum, every drain counted as a planned leave
(drains, not reconfigurations), no step redone at a drain, the next epoch's ring without the
drained worker, and no worker left drained."""
import json
import os
import sys
import tempfile
import time
import unittest
import urllib.request
import base64

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "integration"))
from test_server_support import Etcd  # noqa: E402  (a real etcd through the kolo_test_etcd helper)

import kubelet  # noqa: E402
from kubelet import Pod, Rendering, StatefulSet, free_port, http, wait_for  # noqa: E402

BIN = os.path.abspath(os.environ.get("KOLO_BIN_DIR", "build/bin"))
TESTS = os.path.abspath(os.environ.get("KOLO_TEST_DIR", "build/tests"))
RELEASE, NAMESPACE = "ci", "kolo-test"
WORKERS = RELEASE + "-kolo-worker"


def etcd_get(url, key):
    body = json.dumps({"key": base64.b64encode(key.encode()).decode()}).encode()
    with urllib.request.urlopen(urllib.request.Request(url + "/v3/kv/range", data=body, method="POST"), timeout=5) as r:
        kvs = json.loads(r.read()).get("kvs", [])
    return json.loads(base64.b64decode(kvs[0]["value"])) if kvs else None


def etcd_keys(url, prefix):
    end = prefix[:-1] + chr(ord(prefix[-1]) + 1)
    body = json.dumps({"key": base64.b64encode(prefix.encode()).decode(),
                       "range_end": base64.b64encode(end.encode()).decode(), "keys_only": True}).encode()
    with urllib.request.urlopen(urllib.request.Request(url + "/v3/kv/range", data=body, method="POST"), timeout=5) as r:
        return [base64.b64decode(kv["key"]).decode() for kv in json.loads(r.read()).get("kvs", [])]


class Cluster:
    """etcd + the rendered coordinator and worker StatefulSet, run locally."""

    def __init__(self, workers):
        self.etcd = Etcd()
        self.grpc_port, self.http_port = free_port(), free_port()
        # the chart's own lease TTL (10 s): a shorter one lapses on a loaded machine (load 20
        # on 2 cores starves the agents' keep-alives), and a lapsed lease is a real loss
        self.r = Rendering(RELEASE, NAMESPACE, {
            "etcd.external.endpoints[0]": self.etcd.url,
            "coordinator.grpcPort": self.grpc_port, "coordinator.httpPort": self.http_port,
            "workers.replicas": workers,
        })
        self.token = self.r.secret_value(RELEASE + "-kolo-auth", "token")
        self.coordinator = Pod(self.r, self.r.find("Deployment", RELEASE + "-kolo-coordinator"),
                               RELEASE + "-kolo-coordinator-0", BIN).start()
        self.coordinator.wait_ready()
        self.sts = StatefulSet(self.r, WORKERS, BIN, {"KOLO_WORKER_PORT": 7100, "KOLO_WORKER_HEALTH_PORT": 7101,
                                                     "KOLO_WORKER_LOGS_PORT": 7102})
        for o in range(workers):
            self.sts.start(o)
        for o in range(workers):
            self.sts.pods[o].wait_ready()

    def api(self, path, method="GET", body=None):
        return http(self.http_port, path, self.token, method, body)

    def job(self, job_id):
        code, job = self.api("/v1/jobs/" + job_id)
        assert code == 200, job
        return job

    def submit(self, job_id, min_workers, max_workers, steps, delay_ms, result_dir):
        spec = {"name": job_id, "id": job_id, "min_workers": min_workers, "max_workers": max_workers,
                "exec": {"argv": [os.path.join(TESTS, "elastic_loop"), str(steps), "1000", "5", str(delay_ms)],
                         "env": {"KOLO_RESULT_FILE": os.path.join(result_dir, "result"),
                                 "KOLO_REFORM_FILE": os.path.join(result_dir, "reform"),
                                 # the job cannot end before the test opens the gate
                                 "KOLO_GATE_FILE": os.path.join(result_dir, "gate")}}}
        code, job = self.api("/v1/jobs", "POST", spec)
        assert code == 200, job
        return job

    def logs(self, job_id):
        """The job's output as kolo-server fetches it from the workers' log ports (text)."""
        req = urllib.request.Request("http://127.0.0.1:%d/v1/jobs/%s/logs" % (self.http_port, job_id),
                                     headers={"Authorization": "Bearer " + self.token})
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, r.read().decode("utf-8", "replace")

    def members(self, job_id):
        return [m["worker_id"] for m in self.job(job_id)["status"].get("members", [])]

    def close(self):
        kubelet.stop_all()
        self.etcd.stop()


class RolloutTest(unittest.TestCase):
    def setUp(self):
        self.results = tempfile.mkdtemp(prefix="kolo-rollout-")
        self.cluster = None

    def failed(self):
        """Whether this test has failed so far (Python 3.11 records failures in the result
        at once; older versions keep them in _outcome.errors)."""
        outcome = getattr(self, "_outcome", None)
        if outcome is None:
            return False
        if hasattr(outcome, "errors"):
            return any(e for _, e in outcome.errors if e)
        result = getattr(outcome, "result", None)
        return bool(result) and any(t is self for t, _ in result.failures + result.errors)

    def tearDown(self):
        if self.cluster:
            if self.failed():
                for pod in [self.cluster.coordinator] + list(self.cluster.sts.pods.values()):
                    sys.stderr.write("---- %s\n%s\n" % (pod.name, pod.read_log()))
                code, jobs = self.cluster.api("/v1/jobs")
                for job in (jobs or {}).get("jobs", []) if code == 200 else []:
                    full = self.cluster.job(job["id"])
                    sys.stderr.write("---- job %s: %s\n" % (job["id"], json.dumps(full["status"])))
                    for e in full.get("events", []):
                        sys.stderr.write("  %s %s %s\n" % (e["epoch"], e["type"], e["message"]))
                for name in ("reform", "result"):
                    try:
                        with open(os.path.join(self.results, name)) as f:
                            sys.stderr.write("---- %s file\n%s" % (name, f.read()))
                    except OSError:
                        pass
            self.cluster.close()

    def wait_phase(self, job_id, phases, timeout):
        return wait_for(lambda: self.cluster.job(job_id)["status"]["phase"] in phases and self.cluster.job(job_id),
                        timeout, "job %s to be %s" % (job_id, "/".join(phases)), interval=0.2)

    def check_drained_epochs(self, job, drained):
        """Every drained worker left by a WORKER_DRAINED re-form whose ring lacks it and at
        which no process redid a step; returns the epochs of those re-forms."""
        url = self.cluster.etcd.url
        events = [e for e in job["events"] if e["type"] == "WORKER_DRAINED"]
        epochs = {}
        for worker in drained:
            mine = [e for e in events if e["message"].startswith(worker + " ") or (", " + worker + " ") in e["message"]
                    or e["message"].startswith(worker + ",")]
            self.assertTrue(mine, "no WORKER_DRAINED event for %s: %s" % (worker, [e["message"] for e in events]))
            epoch = mine[-1]["epoch"]
            ring = etcd_get(url, "/kolo/v1/jobs/%s/ring/%020d" % (job["id"], epoch))
            self.assertNotIn(worker, [m["worker_id"] for m in ring["members"]], "ring %d still has %s" % (epoch, worker))
            epochs[worker] = epoch
        reforms = {}
        with open(os.path.join(self.results, "reform")) as f:
            for line in f:
                epoch, discarded = line.split()[1:3]
                reforms.setdefault(int(epoch), []).append(int(discarded))
        # a drain epoch can be overtaken before anyone formed it (the next drain came first:
        # the members then switch straight to the newer planned ring)
        formed = [e for e in set(epochs.values()) if reforms.get(e)]
        self.assertTrue(formed, "no drain epoch %s was ever formed: %s" % (sorted(set(epochs.values())), reforms))
        for worker, epoch in epochs.items():
            self.assertEqual(set(reforms.get(epoch, [0])), {0},
                             "steps redone at %s's drain (epoch %d): %s" % (worker, epoch, reforms.get(epoch)))
        return sorted(formed)

    def open_gate(self, job_id):
        """The job ran throughout: still active; now let it finish."""
        self.assertIn(self.cluster.job(job_id)["status"]["phase"], ("RUNNING", "RECONFIGURING"))
        open(os.path.join(self.results, "gate"), "w").close()

    def check_finished_exactly(self, job_id, steps, drains):
        self.open_gate(job_id)
        job = self.wait_phase(job_id, ("SUCCEEDED", "FAILED", "CANCELLED"), 180)
        status = job["status"]
        self.assertEqual(status["phase"], "SUCCEEDED", status.get("error"))
        self.assertEqual(status["progress"]["step"], steps)
        with open(os.path.join(self.results, "result")) as f:
            lines = f.read().split("\n")
        lines = [l for l in lines if l]
        self.assertGreaterEqual(len(lines), 2, lines)
        for line in lines:
            fields = line.split()
            self.assertEqual((fields[0], int(fields[1]), fields[4]), ("RESULT", steps, "exact"), line)
        events = "\n".join("%s %s %s" % (e["epoch"], e["type"], e["message"]) for e in job["events"])
        self.assertEqual(status.get("reconfigurations", 0), 0, "a planned leave was counted as a loss:\n" + events)
        self.assertEqual(status.get("drains", 0), drains)
        # no worker stays drained: no mark in etcd, none listed as draining
        self.assertEqual(etcd_keys(self.cluster.etcd.url, "/kolo/v1/drain/"), [])
        code, workers = self.cluster.api("/v1/workers")
        self.assertEqual(code, 200)
        self.assertEqual([w["id"] for w in workers["workers"] if w.get("draining")], [])
        # kolo-server reaches the workers' pinned log port (the one the NetworkPolicy opens to it):
        # the final ring's rank 0 printed the result on its stdout
        code, text = self.cluster.logs(job_id)
        self.assertEqual(code, 200, text)
        self.assertRegex(text, r"(?m)^\[0\] RESULT %d [0-9.]+ \d+ exact$" % steps, text[-2000:])
        return job

    def test_a_rolling_restart_keeps_the_job_running_and_counts_each_drain_as_a_planned_leave(self):
        self.cluster = c = Cluster(workers=3)
        steps = 2500
        c.submit("roll", 2, 3, steps, 10, self.results)
        wait_for(lambda: len(c.members("roll")) == 3 and c.job("roll")["status"]["phase"] == "RUNNING", 60,
                 "the job to run on 3 workers", interval=0.2)
        drained, readiness = [], []

        def each(ordinal, result, pod):
            hook, code, seconds = result
            name = "%s-%d" % (WORKERS, ordinal)
            self.assertEqual(hook.returncode, 0, "preStop drain of %s failed: %s" % (name, hook.stderr))
            self.assertIn("%s is draining" % name, hook.stdout)
            self.assertEqual(code, 0, "%s did not exit 0 on SIGTERM" % name)
            drained.append(name)
            # the job is still going, and takes the new process back
            self.assertIn(c.job("roll")["status"]["phase"], ("RUNNING", "RECONFIGURING"))
            wait_for(lambda: name in c.members("roll"), 60, "the job to take %s back" % name, interval=0.2)
            readiness.append(seconds)

        c.sts.rolling_restart(each)
        job = self.check_finished_exactly("roll", steps, drains=3)
        epochs = self.check_drained_epochs(job, drained)
        print("rolling restart of 3 workers: drain epochs formed %s, SIGTERM-to-exit %s s, 0 steps redone at drains"
              % (epochs, ["%.2f" % s for s in readiness]))

    def test_scaling_4_to_2_to_4_shrinks_and_grows_the_job_without_losses(self):
        self.cluster = c = Cluster(workers=4)
        steps = 2500
        c.submit("scale", 2, 4, steps, 10, self.results)
        wait_for(lambda: len(c.members("scale")) == 4 and c.job("scale")["status"]["phase"] == "RUNNING", 60,
                 "the job to run on 4 workers", interval=0.2)
        removed = c.sts.scale(2)
        for ordinal, (hook, code, _) in removed.items():
            self.assertEqual(hook.returncode, 0, hook.stderr)
            self.assertEqual(code, 0, "worker %d did not exit 0" % ordinal)
        wait_for(lambda: sorted(c.members("scale")) == ["%s-0" % WORKERS, "%s-1" % WORKERS], 60,
                 "the job to shrink to the 2 remaining workers", interval=0.2)
        self.assertIn(c.job("scale")["status"]["phase"], ("RUNNING", "RECONFIGURING"))
        c.sts.scale(4)
        wait_for(lambda: len(c.members("scale")) == 4, 60, "the job to grow back to 4", interval=0.2)
        job = self.check_finished_exactly("scale", steps, drains=2)
        self.assertTrue([e for e in job["events"] if e["type"] == "WORKER_JOINED"], "the job never grew")
        epochs = self.check_drained_epochs(job, ["%s-3" % WORKERS, "%s-2" % WORKERS])
        print("scale 4 -> 2 -> 4: drain epochs formed %s, 0 steps redone at drains" % epochs)


if __name__ == "__main__":
    unittest.main(verbosity=2)
