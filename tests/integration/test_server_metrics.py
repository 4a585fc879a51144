"""Metrics history against a real etcd and real kolo-server replicas: the leader's recorder
turns each job's progress (written here into etcd the way the scheduler writes it) into a
bounded series that keeps its first and newest points, the same on both replicas and after a
restart, written at a bounded rate whatever the step rate; GET /v1/jobs/{id}/metrics with
since_step and gRPC GetJobMetrics agree; bad input is a clear 400; /metrics has per-job
gauges. No workers: the job stays PENDING for the scheduler (no idle workers), so the
progress written here is the only writer of its status."""
import base64
import json
import time
import unittest
import urllib.request

import grpc

from test_server_support import METHODS, Client, Etcd, Server, curl, main, pb, spec, wait_for

METHODS["GetJobMetrics"] = ("JobService", pb.GetJobMetricsRequest, pb.JobMetrics)
POINTS = 6
INTERVAL_MS = 200


def b64(text):
    return base64.b64encode(text.encode()).decode()


class EtcdJson:
    """Just enough of etcd's JSON gateway to write a status and read revisions."""

    def __init__(self, url):
        self.url = url

    def post(self, path, body):
        req = urllib.request.Request(self.url + path, data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=10) as resp:
            return json.load(resp)

    def put(self, key, value):
        return int(self.post("/v3/kv/put", {"key": b64(key), "value": b64(value)})["header"]["revision"])

    def revision(self):
        return int(self.post("/v3/kv/range", {"key": b64("/kolo/v1/none")})["header"]["revision"])

    def count(self, prefix):
        end = prefix[:-1] + chr(ord(prefix[-1]) + 1)
        answer = self.post("/v3/kv/range", {"key": b64(prefix), "range_end": b64(end), "count_only": True})
        return int(answer.get("count", 0))


def status(step, epoch=1, members=2, total=600):
    return json.dumps({
        "phase": "PENDING", "epoch": epoch, "created_unix_ms": 1,
        "members": [{"worker_id": "w%d" % i, "rank": i} for i in range(members)],
        "updated_unix_ms": int(time.time() * 1000),
        "progress": {"step": step, "total_steps": total, "loss": 2.0 / (1 + step), "accuracy": step / total,
                     "train_accuracy": 0.5 + step / total / 4, "test_accuracy": 0.25 + step / total / 2,
                     "samples_per_sec": 1000.0 + step}})


class MetricsTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.etcd = Etcd()
        cls.kv = EtcdJson(cls.etcd.url)
        cls.servers = [cls.start() for _ in range(2)]

    @classmethod
    def tearDownClass(cls):
        for s in cls.servers:
            s.kill()
        cls.etcd.stop()

    @classmethod
    def start(cls):
        return Server(cls.etcd.url, "--metrics-points", str(POINTS), "--metrics-interval-ms", str(INTERVAL_MS),
                      "--leader-ttl", "2")

    def submit(self, job_id):
        client = Client(self.servers[0].grpc_target)
        client.call("SubmitJob", spec(job_id))
        client.close()

    def history(self, srv, job_id, since=None):
        path = "/v1/jobs/%s/metrics" % job_id + ("?since_step=%d" % since if since is not None else "")
        code, body = curl(srv.http_port, path)
        self.assertEqual(code, 200, body)
        return body

    def run_job(self, job_id, steps, every=0.05, reform_at=None):
        """Writes a status per step like the scheduler does; returns the last step."""
        epoch = 1
        for step in range(1, steps + 1):
            if reform_at and step == reform_at:
                epoch = 2
            self.kv.put("/kolo/v1/jobs/%s/status" % job_id, status(step, epoch, 2 if epoch == 1 else 1))
            time.sleep(every)
        return steps

    def settled(self, job_id, last_step):
        def done():
            points = [self.history(s, job_id)["points"] for s in self.servers]
            return points if all(p and p[-1]["step"] == last_step for p in points) else None
        return wait_for(done, 10, "the newest point on both replicas")

    def test_the_history_is_bounded_keeps_first_and_newest_and_is_the_same_on_both_replicas(self):
        self.submit("m-1")
        first_seen = None
        for step in range(1, 121):
            self.kv.put("/kolo/v1/jobs/m-1/status", status(step, 1 if step < 70 else 2, 2 if step < 70 else 1))
            time.sleep(0.03)
            if step % 10 == 0:
                points = self.history(self.servers[1], "m-1")["points"]
                self.assertLessEqual(len(points), POINTS)
                if points:
                    first_seen = first_seen or points[0]["step"]
                    self.assertEqual(points[0]["step"], first_seen, "the first point stays")
        both = self.settled("m-1", 120)
        self.assertEqual(both[0], both[1])
        points = both[0]
        self.assertLessEqual(len(points), POINTS)
        self.assertEqual(points[0]["step"], first_seen)
        self.assertEqual([p["step"] for p in points], sorted(p["step"] for p in points))
        newest = points[-1]
        self.assertEqual((newest["epoch"], newest["ring_size"]), (2, 1))
        self.assertAlmostEqual(newest["loss"], 2.0 / 121)
        self.assertAlmostEqual(newest["samples_per_sec"], 1120.0)
        self.assertAlmostEqual(newest["train_accuracy"], 0.5 + 120 / 600 / 4)
        self.assertAlmostEqual(newest["test_accuracy"], 0.25 + 120 / 600 / 2)
        self.assertEqual(self.kv.count("/kolo/v1/metrics/m-1/"), len(points), "thinned points are deleted")
        # the point where the ring re-formed (epoch 1 -> 2) is among the kept ones
        self.assertTrue(any(a["epoch"] == 1 and b["epoch"] == 2 for a, b in zip(points, points[1:])))

    def test_since_step_grpc_and_http_agree(self):
        self.submit("m-2")
        self.run_job("m-2", 12, every=0.25)
        points = self.settled("m-2", 12)[0]
        client = Client(self.servers[1].grpc_target)
        whole = client.call("GetJobMetrics", pb.GetJobMetricsRequest(id="m-2"))
        self.assertEqual([p.step for p in whole.points], [p["step"] for p in points])
        middle = points[len(points) // 2]["step"]
        later = client.call("GetJobMetrics", pb.GetJobMetricsRequest(id="m-2", since_step=middle))
        self.assertEqual([p.step for p in later.points], [p["step"] for p in points if p["step"] > middle])
        self.assertEqual([p["step"] for p in self.history(self.servers[0], "m-2", middle)["points"]],
                         [p.step for p in later.points])
        with self.assertRaises(grpc.RpcError) as ctx:
            client.call("GetJobMetrics", pb.GetJobMetricsRequest(id="no-such"))
        self.assertEqual(ctx.exception.code(), grpc.StatusCode.NOT_FOUND)
        with self.assertRaises(grpc.RpcError) as ctx:
            client.call("GetJobMetrics", pb.GetJobMetricsRequest(id="Bad/Id"))
        self.assertEqual(ctx.exception.code(), grpc.StatusCode.INVALID_ARGUMENT)
        client.close()

    def test_bad_metrics_requests_are_400_or_404_with_a_json_error(self):
        self.submit("m-3")
        port = self.servers[0].http_port
        for path, code in (("/v1/jobs/m-3/metrics?since_step=abc", 400), ("/v1/jobs/m-3/metrics?since_step=-1", 400),
                           ("/v1/jobs/m-3/metrics?since_step=99999999999999999999999", 400),
                           ("/v1/jobs/m-3/metrics?limit=3", 400), ("/v1/jobs/nope/metrics", 404),
                           ("/v1/jobs/BAD_ID/metrics", 400)):
            got, body = curl(port, path)
            self.assertEqual(got, code, (path, body))
            self.assertIn("message", body["error"], path)
        self.assertEqual(curl(port, "/v1/jobs/m-3/metrics")[1], {"id": "m-3", "points": [], "rings": []})

    def test_the_history_survives_a_restart_of_every_server(self):
        self.submit("m-4")
        self.run_job("m-4", 8, every=0.25)
        before = self.settled("m-4", 8)[0]
        cls = type(self)
        for s in cls.servers:
            self.assertEqual(s.terminate(), 0)
        cls.servers = [cls.start(), cls.start()]
        for s in cls.servers:
            self.assertEqual(self.history(s, "m-4")["points"], before)

    def test_points_are_written_at_a_bounded_rate_whatever_the_step_rate(self):
        self.submit("m-5")
        time.sleep(0.5)
        wait_for(lambda: curl(self.servers[0].http_port, "/readyz")[0] == 200, 15, "a leader")
        before = self.kv.revision()
        started = time.monotonic()
        writes = 0
        step = 0
        while time.monotonic() - started < 3.0:  # ~100+ status writes a second
            step += 1
            self.kv.put("/kolo/v1/jobs/m-5/status", status(step * 10))
            writes += 1
        self.settled("m-5", step * 10)
        metric_writes = self.kv.revision() - before - writes
        elapsed = time.monotonic() - started  # the recorder's passes until the newest point landed
        allowed = elapsed * 1000 / INTERVAL_MS + 2
        print("%d status writes in %.1f s -> %d history writes (at most %.0f allowed)" %
              (writes, elapsed, metric_writes, allowed))
        self.assertGreater(writes, 3 * allowed)
        self.assertLessEqual(metric_writes, allowed)
        self.assertGreaterEqual(metric_writes, 2)

    def test_metrics_route_has_per_job_gauges(self):
        self.submit("m-6")
        self.run_job("m-6", 3, every=0.1)
        self.settled("m-6", 3)
        code, text = curl(self.servers[0].http_port, "/metrics")
        self.assertEqual(code, 200)
        self.assertIn('kolo_job_step{job="m-6"} 3\n', text)
        self.assertIn('kolo_job_ring_size{job="m-6"} 2\n', text)
        self.assertIn('kolo_job_total_steps{job="m-6"} 600\n', text)
        self.assertIn("kolo_job_reconfigurations_total{job=\"m-6\"} 0\n", text)
        self.assertIn("kolo_job_series_left_out 0\n", text)


if __name__ == "__main__":
    main()
