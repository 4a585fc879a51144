"""kolo-server end to end against a real etcd: every RPC from an independent Python gRPC
client, every HTTP route with curl (error bodies included), the kolo CLI, malformed and
oversize input, unknown methods and ids, and WatchJob semantics."""
import base64
import json
import os
import subprocess
import tempfile
import threading
import time
import unittest
import urllib.request

import grpc

from test_server_support import (BIN, Client, Etcd, Server, cpb, curl, kolo, main, pb, spec, wait_for)

MAX_BYTES = 65536


class ApiTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.etcd = Etcd()
        try:
            cls.server = Server(cls.etcd.url, "--max-message-bytes", str(MAX_BYTES))
        except Exception:
            cls.etcd.stop()
            raise
        cls.client = Client(cls.server.grpc_target)

    @classmethod
    def tearDownClass(cls):
        cls.client.close()
        code = cls.server.terminate()
        cls.etcd.stop()
        assert code == 0, "kolo-server exited %s on SIGTERM" % code

    def assertCode(self, code, fn, *args, contains=None):
        with self.assertRaises(grpc.RpcError) as ctx:
            fn(*args)
        self.assertEqual(ctx.exception.code(), code, ctx.exception.details())
        if contains:
            self.assertIn(contains, ctx.exception.details())
        return ctx.exception

    # ---- gRPC ----

    def test_a_submitted_job_is_pending_with_a_submitted_event(self):
        job = self.client.call("SubmitJob", spec("g-submit", team="x"))
        self.assertEqual(job.id, "g-submit")
        self.assertEqual(job.status.phase, pb.PENDING)
        self.assertEqual([e.type for e in job.events], ["SUBMITTED"])
        self.assertEqual(job.spec.builtin.model, "mlp")
        self.assertEqual(job.status.max_workers, 1)
        got = self.client.call("GetJob", pb.GetJobRequest(id="g-submit"))
        self.assertEqual(got, job)

    def test_a_job_without_an_id_gets_a_generated_one(self):
        s = spec()
        job = self.client.call("SubmitJob", s)
        self.assertTrue(job.id.startswith("j-"), job.id)
        self.assertEqual(self.client.call("GetJob", pb.GetJobRequest(id=job.id)).id, job.id)

    def test_a_repeated_submit_returns_the_same_job_and_a_different_spec_is_already_exists(self):
        first = self.client.call("SubmitJob", spec("g-idem", team="a", env="b"))
        again = self.client.call("SubmitJob", spec("g-idem", env="b", team="a"))
        self.assertEqual(again, first)
        self.assertCode(grpc.StatusCode.ALREADY_EXISTS, self.client.call, "SubmitJob",
                        spec("g-idem", min_workers=2), contains="g-idem")
        self.assertEqual(len(self.client.call("GetJob", pb.GetJobRequest(id="g-idem")).events), 1)

    def test_an_invalid_spec_is_invalid_argument_naming_the_field(self):
        self.assertCode(grpc.StatusCode.INVALID_ARGUMENT, self.client.call, "SubmitJob",
                        spec("g-bad", min_workers=0), contains="min_workers")
        s = pb.JobSpec(name="x", min_workers=1)
        self.assertCode(grpc.StatusCode.INVALID_ARGUMENT, self.client.call, "SubmitJob", s, contains="program")
        s = spec("g-bad2")
        s.builtin.model = ""
        self.assertCode(grpc.StatusCode.INVALID_ARGUMENT, self.client.call, "SubmitJob", s, contains="builtin.model")
        s = spec("Bad/Id")
        self.assertCode(grpc.StatusCode.INVALID_ARGUMENT, self.client.call, "SubmitJob", s, contains="id")
        self.assertCode(grpc.StatusCode.NOT_FOUND, self.client.call, "GetJob", pb.GetJobRequest(id="g-bad"))

    def test_cancel_moves_a_job_to_cancelled_and_a_second_cancel_is_failed_precondition(self):
        self.client.call("SubmitJob", spec("g-cancel"))
        job = self.client.call("CancelJob", pb.CancelJobRequest(id="g-cancel", reason="no longer needed"))
        self.assertEqual(job.status.phase, pb.CANCELLED)
        self.assertIn("no longer needed", job.status.error)
        self.assertGreater(job.status.finished_unix_ms, 0)
        self.assertEqual([e.type for e in job.events], ["SUBMITTED", "CANCELLED"])
        self.assertCode(grpc.StatusCode.FAILED_PRECONDITION, self.client.call, "CancelJob",
                        pb.CancelJobRequest(id="g-cancel"), contains="CANCELLED")
        self.assertCode(grpc.StatusCode.FAILED_PRECONDITION, self.client.call, "ScaleJob",
                        pb.ScaleJobRequest(id="g-cancel", min_workers=1, max_workers=2))
        self.assertEqual(len(self.client.call("GetJob", pb.GetJobRequest(id="g-cancel")).events), 2)

    def test_scale_updates_the_bounds_and_logs_an_event(self):
        self.client.call("SubmitJob", spec("g-scale", min_workers=2, max_workers=4))
        job = self.client.call("ScaleJob", pb.ScaleJobRequest(id="g-scale", min_workers=3, max_workers=8))
        self.assertEqual((job.status.min_workers, job.status.max_workers), (3, 8))
        self.assertEqual((job.spec.min_workers, job.spec.max_workers), (2, 4))
        self.assertEqual(job.events[-1].type, "SCALED")
        self.assertCode(grpc.StatusCode.INVALID_ARGUMENT, self.client.call, "ScaleJob",
                        pb.ScaleJobRequest(id="g-scale", min_workers=5, max_workers=2), contains="max_workers")
        self.assertCode(grpc.StatusCode.INVALID_ARGUMENT, self.client.call, "ScaleJob",
                        pb.ScaleJobRequest(id="g-scale", min_workers=0), contains="min_workers")

    def test_list_filters_by_phase_and_labels_and_pages(self):
        for i in range(5):
            self.client.call("SubmitJob", spec("g-list-%d" % i, tier="list", parity=str(i % 2)))
        self.client.call("CancelJob", pb.CancelJobRequest(id="g-list-0"))
        req = pb.ListJobsRequest(labels={"tier": "list"})
        ids = [j.id for j in self.client.call("ListJobs", req).jobs]
        self.assertEqual(ids, ["g-list-%d" % i for i in range(5)])
        req = pb.ListJobsRequest(labels={"tier": "list", "parity": "0"}, phase=pb.PENDING)
        self.assertEqual([j.id for j in self.client.call("ListJobs", req).jobs], ["g-list-2", "g-list-4"])
        req = pb.ListJobsRequest(labels={"tier": "list"}, phase=pb.CANCELLED)
        self.assertEqual([j.id for j in self.client.call("ListJobs", req).jobs], ["g-list-0"])
        seen, token = [], ""
        for _ in range(10):
            page = self.client.call("ListJobs", pb.ListJobsRequest(labels={"tier": "list"}, page_size=2,
                                                                   page_token=token))
            self.assertLessEqual(len(page.jobs), 2)
            self.assertTrue(all(len(j.events) == 0 for j in page.jobs))
            seen += [j.id for j in page.jobs]
            token = page.next_page_token
            if not token:
                break
        self.assertEqual(seen, ["g-list-%d" % i for i in range(5)])
        self.assertCode(grpc.StatusCode.INVALID_ARGUMENT, self.client.call, "ListJobs",
                        pb.ListJobsRequest(page_size=5000), contains="page_size")

    def test_unknown_ids_are_not_found_and_missing_ids_are_invalid_argument(self):
        for method, req in [("GetJob", pb.GetJobRequest(id="nope")), ("CancelJob", pb.CancelJobRequest(id="nope")),
                            ("ScaleJob", pb.ScaleJobRequest(id="nope", min_workers=1)),
                            ("DrainWorker", cpb.DrainWorkerRequest(id="nope"))]:
            self.assertCode(grpc.StatusCode.NOT_FOUND, self.client.call, method, req, contains="nope")
        self.assertCode(grpc.StatusCode.NOT_FOUND, lambda: list(self.client.watch("nope", timeout=5)))
        self.assertCode(grpc.StatusCode.INVALID_ARGUMENT, self.client.call, "GetJob", pb.GetJobRequest(),
                        contains="id")

    def test_malformed_protobuf_bytes_are_invalid_argument(self):
        self.assertCode(grpc.StatusCode.INVALID_ARGUMENT, self.client.raw, "/kolo.v1.JobService/SubmitJob",
                        b"\x0a\xff\xff\xff\xff\x0f", contains="JobSpec")
        self.assertCode(grpc.StatusCode.INVALID_ARGUMENT, self.client.raw, "/kolo.v1.JobService/GetJob",
                        b"\xff", contains="GetJobRequest")

    def test_unknown_methods_are_unimplemented(self):
        self.assertCode(grpc.StatusCode.UNIMPLEMENTED, self.client.raw, "/kolo.v1.JobService/DeleteJob", b"",
                        contains="DeleteJob")
        self.assertCode(grpc.StatusCode.UNIMPLEMENTED, self.client.raw, "/other.Service/Call", b"x")
        # The server still answers afterwards.
        self.client.call("ListJobs", pb.ListJobsRequest())

    def test_a_message_over_the_limit_is_resource_exhausted_and_the_server_keeps_serving(self):
        s = spec("g-huge")
        s.labels["blob"] = "x" * 200
        s.exec.argv.extend(["y" * 1000] * (2 * MAX_BYTES // 1000))
        self.assertCode(grpc.StatusCode.RESOURCE_EXHAUSTED, self.client.call, "SubmitJob", s)
        self.assertCode(grpc.StatusCode.NOT_FOUND, self.client.call, "GetJob", pb.GetJobRequest(id="g-huge"))
        code, body = curl(self.server.http_port, "/v1/jobs", "POST", body=json.dumps({"name": "x" * (2 * MAX_BYTES)}))
        self.assertEqual(code, 413)
        self.assertEqual(body["error"]["code"], "RESOURCE_EXHAUSTED")

    def test_watch_delivers_each_change_once_and_ends_when_the_job_ends(self):
        self.client.call("SubmitJob", spec("g-watch"))
        seen = []
        stream = self.client.watch("g-watch", timeout=30)
        done = threading.Event()

        def consume():
            try:
                for job in stream:
                    seen.append(job)
            finally:
                done.set()

        t = threading.Thread(target=consume)
        t.start()
        wait_for(lambda: len(seen) >= 1, 10, "the first WatchJob message")
        self.client.call("ScaleJob", pb.ScaleJobRequest(id="g-watch", min_workers=1, max_workers=2))
        self.client.call("ScaleJob", pb.ScaleJobRequest(id="g-watch", min_workers=1, max_workers=3))
        self.client.call("CancelJob", pb.CancelJobRequest(id="g-watch"))
        self.assertTrue(done.wait(10), "the stream did not end after the job was cancelled")
        t.join()
        self.assertEqual(stream.code(), grpc.StatusCode.OK)
        self.assertEqual([len(j.events) for j in seen], [1, 2, 3, 4])
        self.assertEqual([j.status.max_workers for j in seen], [1, 2, 3, 3])
        self.assertEqual(seen[-1].status.phase, pb.CANCELLED)

    def test_watch_ends_on_the_server_when_the_client_cancels(self):
        self.client.call("SubmitJob", spec("g-watch-cancel"))

        def cancelled_watches():
            _, text = curl(self.server.http_port, "/metrics")
            for line in text.splitlines():
                if line.startswith('kolo_requests_total{api="grpc",method="WatchJob",code="CANCELLED"}'):
                    return int(line.split()[-1])
            return 0

        before = cancelled_watches()
        stream = self.client.watch("g-watch-cancel")
        first = next(stream)
        self.assertEqual(first.id, "g-watch-cancel")
        stream.cancel()
        wait_for(lambda: cancelled_watches() == before + 1, 10, "the server to close the cancelled watch")

    def test_many_watches_cancelled_at_once_leave_the_server_healthy(self):
        self.client.call("SubmitJob", spec("g-watch-many"))
        streams = [self.client.watch("g-watch-many") for _ in range(30)]
        for i, s in enumerate(streams):
            if i % 2:
                next(s)
            s.cancel()
        job = self.client.call("ScaleJob", pb.ScaleJobRequest(id="g-watch-many", min_workers=1, max_workers=2))
        self.assertEqual(job.status.max_workers, 2)
        stream = self.client.watch("g-watch-many", timeout=10)
        self.assertEqual(len(next(stream).events), 2)
        stream.cancel()

    def test_workers_are_listed_from_etcd_and_can_be_drained(self):
        key = base64.b64encode(b"/kolo/v1/workers/w-test-1").decode()
        value = base64.b64encode(json.dumps({"id": "w-test-1", "host": "node-a", "address": "10.0.0.1:9000",
                                             "cpus": 2, "gpus": 0, "state": "idle"}).encode()).decode()
        req = urllib.request.Request(self.etcd.url + "/v3/kv/put", data=json.dumps({"key": key, "value": value}).encode(),
                                     method="POST")
        urllib.request.urlopen(req, timeout=5).read()
        # ListWorkers answers from the server's watch-fed view: a record written into etcd by
        # someone else shows once the watch brought it (ms); the server's own writes show at once
        listed = lambda i: [w for w in self.client.call("ListWorkers", cpb.ListWorkersRequest()).workers if w.id == i]
        w = wait_for(lambda: listed("w-test-1"), 10, "the record in the server's view")
        self.assertEqual(len(w), 1)
        self.assertEqual((w[0].host, w[0].slots, w[0].draining), ("node-a", 2, False))
        drained = self.client.call("DrainWorker", cpb.DrainWorkerRequest(id="w-test-1"))
        self.assertTrue(drained.draining)
        self.assertEqual(drained.state, "DRAINING")
        code, body = curl(self.server.http_port, "/v1/workers")
        self.assertEqual(code, 200)
        self.assertEqual([w["state"] for w in body["workers"] if w["id"] == "w-test-1"], ["DRAINING"])
        # kolo-worker writes its state in lower case; the API names it as cluster.proto does
        for written, shown in (("idle", "IDLE"), ("busy", "BUSY"), ("draining", "DRAINING")):
            key2 = base64.b64encode(b"/kolo/v1/workers/w-case").decode()
            value2 = base64.b64encode(json.dumps({"id": "w-case", "host": "h", "address": "10.0.0.2:1",
                                                  "cpus": 1, "gpus": 0, "state": written}).encode()).decode()
            urllib.request.urlopen(urllib.request.Request(
                self.etcd.url + "/v3/kv/put", data=json.dumps({"key": key2, "value": value2}).encode(),
                method="POST"), timeout=5).read()
            states = wait_for(lambda: (lambda s: s if s == [shown] else None)([w.state for w in listed("w-case")]),
                              10, "w-case %s in the server's view" % written)
            self.assertEqual(states, [shown])
        code, body = curl(self.server.http_port, "/v1/workers/w-test-1:drain", "POST")
        self.assertEqual((code, body["draining"]), (200, True))
        code, body = curl(self.server.http_port, "/v1/workers/w-none:drain", "POST")
        self.assertEqual((code, body["error"]["code"]), (404, "NOT_FOUND"))
        code, out, err = kolo(self.server, "drain", "w-test-1")
        self.assertEqual(code, 0, err)
        self.assertIn("draining", out)
        code, out, _ = kolo(self.server, "workers")
        self.assertIn("w-test-1", out)
        self.assertIn("DRAINING", out)
        code, _, err = kolo(self.server, "drain", "w-none")
        self.assertEqual(code, 1)
        self.assertIn("NOT_FOUND", err)

    # ---- HTTP ----

    def test_every_http_job_route_answers_json(self):
        port = self.server.http_port
        code, job = curl(port, "/v1/jobs", "POST", json.dumps({
            "name": "http", "id": "h-1", "min_workers": 1, "max_workers": 2, "mode": "ASYNC", "average_every": 4,
            "exec": {"argv": ["/usr/bin/train", "--fast"], "env": {"A": "1"}, "working_dir": "/tmp"},
            "labels": {"via": "http"}}))
        self.assertEqual(code, 200, job)
        self.assertEqual(job["status"]["phase"], "PENDING")
        self.assertEqual(job["spec"]["exec"]["argv"], ["/usr/bin/train", "--fast"])
        code, got = curl(port, "/v1/jobs/h-1")
        self.assertEqual((code, got["id"], got["spec"]["mode"]), (200, "h-1", "ASYNC"))
        code, lst = curl(port, "/v1/jobs?label=via=http&phase=PENDING")
        self.assertEqual((code, [j["id"] for j in lst["jobs"]]), (200, ["h-1"]))
        code, scaled = curl(port, "/v1/jobs/h-1:scale", "POST", json.dumps({"min_workers": 2, "max_workers": 6}))
        self.assertEqual((code, scaled["status"]["max_workers"]), (200, 6))
        code, bad = curl(port, "/v1/jobs/h-1:scale", "POST", json.dumps({"min_workers": 0}))
        self.assertEqual((code, bad["error"]["code"]), (400, "INVALID_ARGUMENT"))
        self.assertIn("min_workers", bad["error"]["message"])
        code, cancelled = curl(port, "/v1/jobs/h-1:cancel", "POST", json.dumps({"reason": "curl"}))
        self.assertEqual((code, cancelled["status"]["phase"]), (200, "CANCELLED"))
        code, events = curl(port, "/v1/jobs/h-1/events")
        self.assertEqual(code, 200)
        self.assertEqual([e["type"] for e in events["events"]], ["SUBMITTED", "SCALED", "CANCELLED"])
        self.assertEqual([e["seq"] for e in events["events"]], [1, 2, 3])
        # The same job through gRPC: one store, one shape.
        self.assertEqual(self.client.call("GetJob", pb.GetJobRequest(id="h-1")).status.phase, pb.CANCELLED)

    def test_http_errors_have_a_json_error_body(self):
        port = self.server.http_port
        cases = [
            ("GET", "/v1/jobs/nope", None, 404, "NOT_FOUND"),
            ("GET", "/v1/jobs/nope/events", None, 404, "NOT_FOUND"),
            ("POST", "/v1/jobs/nope:cancel", "", 404, "NOT_FOUND"),
            ("POST", "/v1/jobs", "{not json", 400, "INVALID_ARGUMENT"),
            ("POST", "/v1/jobs", "[1,2]", 400, "INVALID_ARGUMENT"),
            ("POST", "/v1/jobs", '{"name":"x","colour":"red"}', 400, "INVALID_ARGUMENT"),
            ("POST", "/v1/jobs", '{"name":"x","min_workers":"two"}', 400, "INVALID_ARGUMENT"),
            ("POST", "/v1/jobs", '{"name":"x","min_workers":1}', 400, "INVALID_ARGUMENT"),
            ("GET", "/v1/jobs?phase=DONE", None, 400, "INVALID_ARGUMENT"),
            ("GET", "/v1/nothing", None, 404, "NOT_FOUND"),
            ("DELETE", "/v1/jobs/h-1", None, 405, "UNIMPLEMENTED"),  # a known route: 405 + Allow
        ]
        for method, path, body, status, grpc_code in cases:
            code, reply = curl(port, path, method, body)
            self.assertEqual(code, status, (method, path, reply))
            self.assertEqual(reply["error"]["code"], grpc_code, (method, path, reply))
            self.assertTrue(reply["error"]["message"], (method, path))
        _, reply = curl(port, "/v1/jobs", "POST", '{"name":"x","colour":"red"}')
        self.assertIn("colour", reply["error"]["message"])
        _, reply = curl(port, "/v1/jobs", "POST", '{"name":"x","min_workers":"two"}')
        self.assertIn("min_workers", reply["error"]["message"])
        curl(port, "/v1/jobs", "POST", json.dumps({"name": "x", "id": "h-done", "min_workers": 1,
                                                   "builtin": {"model": "mlp", "epochs": 1}}))
        curl(port, "/v1/jobs/h-done:cancel", "POST")
        code, reply = curl(port, "/v1/jobs/h-done:cancel", "POST")
        self.assertEqual((code, reply["error"]["code"]), (409, "FAILED_PRECONDITION"))

    def test_health_readiness_and_metrics(self):
        port = self.server.http_port
        self.assertEqual(curl(port, "/healthz"), (200, {"status": "ok"}))
        code, ready = wait_for(lambda: (lambda r: r if r[1].get("is_leader") else None)(curl(port, "/readyz")),
                               10, "the server to lead")
        self.assertEqual(code, 200)
        self.assertTrue(ready["ready"] and ready["etcd"])
        self.client.call("SubmitJob", spec("m-1"))
        self.client.call("GetJob", pb.GetJobRequest(id="m-1"))
        code, text = curl(port, "/metrics")
        self.assertEqual(code, 200)
        self.assertRegex(text, r'kolo_jobs\{phase="PENDING"\} [1-9]')
        self.assertIn('kolo_requests_total{api="grpc",method="GetJob",code="OK"}', text)
        self.assertIn('kolo_request_duration_seconds_bucket{api="grpc",method="SubmitJob",le="+Inf"}', text)
        self.assertIn("kolo_workers ", text)
        self.assertIn("kolo_server_leader 1", text)

    # ---- CLI ----

    def test_the_cli_drives_every_rpc(self):
        srv = self.server
        code, out, err = kolo(srv, "submit", "--name", "cli", "--id", "c-1", "--workers", "2:3", "--model", "mlp",
                              "--dataset", "fashion-mnist", "--epochs", "2", "--label", "via=cli")
        self.assertEqual(code, 0, err)
        self.assertIn("PENDING", out)
        with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
            json.dump({"name": "from-file", "id": "c-2", "min_workers": 1,
                       "exec": {"argv": ["/bin/true"]}, "labels": {"via": "cli"}}, f)
        code, out, err = kolo(srv, "--json", "submit", f.name)
        os.unlink(f.name)
        self.assertEqual(code, 0, err)
        self.assertEqual(json.loads(out)["spec"]["exec"]["argv"], ["/bin/true"])
        code, out, _ = kolo(srv, "--json", "get", "c-1")
        self.assertEqual((code, json.loads(out)["status"]["min_workers"]), (0, 2))
        code, out, _ = kolo(srv, "list", "--label", "via=cli")
        self.assertEqual(code, 0)
        self.assertIn("c-1", out)
        self.assertIn("c-2", out)
        code, out, _ = kolo(srv, "scale", "c-1", "1:4")
        self.assertEqual(code, 0)
        self.assertIn("1-4", out)
        watch = subprocess_popen_watch(srv, "c-1")
        code, out, _ = kolo(srv, "cancel", "c-1", "--reason", "done")
        self.assertEqual(code, 0)
        lines = watch.communicate(timeout=15)[0].strip().splitlines()
        self.assertEqual(watch.returncode, 0)
        self.assertEqual([json.loads(l)["status"]["phase"] for l in lines][-1], "CANCELLED")
        code, out, _ = kolo(srv, "--json", "list", "--phase", "CANCELLED", "--label", "via=cli")
        self.assertEqual([j["id"] for j in json.loads(out)["jobs"]], ["c-1"])
        code, out, _ = kolo(srv, "workers")
        self.assertEqual(code, 0)
        self.assertIn("ID", out)

    def test_the_cli_resolves_relative_exec_paths_against_the_submitter_s_folder(self):
        # #29: a relative program path, a script next to the submitter and a relative
        # checkpoint folder mean the submitter's folder, not the worker's
        here = tempfile.mkdtemp(prefix="kolo-cli-")
        open(os.path.join(here, "train.py"), "w").close()

        def submit(job_id, *args):
            out = subprocess.run([os.path.join(BIN, "kolo"), "--server", self.server.grpc_target, "--json", "submit",
                                  "--name", "rel", "--id", job_id, "--workers", "1"] + list(args),
                                 capture_output=True, text=True, cwd=here, timeout=20)
            self.assertEqual(out.returncode, 0, out.stderr)
            return json.loads(out.stdout)["spec"], out.stderr

        spec, err = submit("rel-1", "--checkpoint-dir", "ckpt", "--exec", "./venv/bin/python3", "train.py", "--lr", "1")
        self.assertEqual(spec["exec"]["argv"], [os.path.join(here, "venv/bin/python3"), "train.py", "--lr", "1"])
        self.assertEqual(spec["exec"]["working_dir"], here)
        self.assertEqual(spec["checkpoint_dir"], os.path.join(here, "ckpt"))
        self.assertIn("./venv/bin/python3 is %s/venv/bin/python3" % here, err)
        self.assertIn("train.py is a file here: the job runs in %s" % here, err)
        spec, err = submit("rel-2", "--exec", "python3", "-c", "pass")  # PATH, nothing local
        self.assertEqual((spec["exec"]["argv"], spec["exec"].get("working_dir", "")), (["python3", "-c", "pass"], ""))
        self.assertEqual(err, "")
        spec, _ = submit("rel-3", "--workdir", "/srv/job", "--exec", "python3", "train.py")
        self.assertEqual(spec["exec"]["working_dir"], "/srv/job")
        for job_id in ("rel-1", "rel-2", "rel-3"):
            kolo(self.server, "cancel", job_id)

    def test_the_cli_exits_1_on_rpc_errors_and_2_on_bad_usage(self):
        code, out, err = kolo(self.server, "get", "nope")
        self.assertEqual(code, 1)
        self.assertEqual(err.strip().splitlines(), ["error: NOT_FOUND: no job nope"])
        kolo(self.server, "submit", "--name", "x", "--id", "c-done", "--workers", "1", "--model", "mlp", "--epochs", "1")
        kolo(self.server, "cancel", "c-done")
        code, _, err = kolo(self.server, "cancel", "c-done")
        self.assertEqual(code, 1)
        self.assertTrue(err.startswith("error: FAILED_PRECONDITION: "), err)
        for args in (["frobnicate"], ["get"], ["scale", "c-done", "x:y"], ["submit", "--name", "x"],
                     ["list", "--phase", "DONE"], ["submit", "/nonexistent.json"]):
            code, _, err = kolo(self.server, *args)
            self.assertEqual(code, 2, (args, err))
        code, _, err = kolo(self.server, "submit", "--name", "x", "--workers", "1")
        self.assertEqual(code, 1, err)
        self.assertIn("INVALID_ARGUMENT", err)


def subprocess_popen_watch(srv, job_id):
    import subprocess
    from test_server_support import BIN
    proc = subprocess.Popen([os.path.join(BIN, "kolo"), "--server", srv.grpc_target, "--json", "watch", job_id],
                            stdout=subprocess.PIPE, text=True)
    time.sleep(0.5)
    return proc


if __name__ == "__main__":
    main()
