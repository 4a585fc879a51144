"""Job logs end to end against a real etcd, kolo-server and two kolo-workers on two
--advertise addresses (127.0.0.1 and 127.0.0.2; nothing shared but etcd): a job whose
ranks print known lines comes back per rank through gRPC StreamLogs, curl and `kolo
logs`; follow ends when the job ends; tail and the rank filter work; each worker serves
its own lines; bad requests get clear errors; a reader that stops reading does not grow
the server's memory; a worker that is gone gives a notice instead of a hang."""
import json
import os
import re
import signal
import socket
import subprocess
import time
import unittest

import grpc

from kolo_cluster import Cluster
from test_server_support import Client, Server, curl, kolo, main, pb, wait_for

LINES = 5


def lines_job(job_id, workers=2, lines=LINES, extra=""):
    script = ('for i in $(seq 1 %d); do echo "rank $KOLO_RANK line $i"; sleep 0.1; done; %s'
              'echo "rank $KOLO_RANK says bye" >&2' % (lines, extra))
    return {"name": "lines", "id": job_id, "min_workers": workers, "exec": {"argv": ["/bin/sh", "-c", script]}}


def expected(rank, lines=LINES):
    return ["rank %d line %d" % (rank, i) for i in range(1, lines + 1)] + ["rank %d says bye" % rank]


def rss_kib(pid):
    with open("/proc/%d/status" % pid) as f:
        return int(re.search(r"VmRSS:\s+(\d+)", f.read()).group(1))


class LogsTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.cluster = Cluster()
        try:
            cls.cluster.add_worker("w0", "127.0.0.1")
            cls.cluster.add_worker("w1", "127.0.0.2")
        except Exception:
            cls.cluster.stop()
            raise
        cls.server = cls.cluster.server
        cls.client = Client(cls.server.grpc_target)
        # one finished job most tests read
        cls.cluster.submit(lines_job("done-1"))
        cls.cluster.wait_phase("done-1", "SUCCEEDED")

    @classmethod
    def tearDownClass(cls):
        cls.client.close()
        assert cls.cluster.stop() == 0

    def stream(self, job_id, ranks=(), tail=0, follow=False, timeout=60):
        fn = self.client.channel.unary_stream("/kolo.v1.JobService/StreamLogs",
                                              request_serializer=lambda m: m.SerializeToString(),
                                              response_deserializer=pb.LogChunk.FromString)
        return fn(pb.StreamLogsRequest(id=job_id, ranks=list(ranks), tail=tail, follow=follow), timeout=timeout)

    def lines_of(self, job_id, **kw):
        return [line for chunk in self.stream(job_id, **kw) for line in chunk.lines]

    def http(self, path, timeout=60):
        out = subprocess.run(["curl", "-sS", "-N", "--max-time", str(timeout), "-w", "\n%{http_code}",
                              "http://127.0.0.1:%d%s" % (self.server.http_port, path)],
                             capture_output=True, timeout=timeout + 10)
        body, _, code = out.stdout.rpartition(b"\n")
        return int(code or 0), body.decode("utf-8", "replace")

    # ---- what comes back ----

    def test_stream_logs_returns_every_rank_s_lines_in_order_with_their_worker(self):
        lines = self.lines_of("done-1")
        for rank in (0, 1):
            mine = [l for l in lines if l.rank == rank and not l.notice]
            self.assertEqual([l.text.decode() for l in mine], expected(rank))
            self.assertEqual({l.epoch for l in mine}, {1})
        self.assertFalse([l for l in lines if l.notice], "no notices for two live workers")
        job = self.cluster.job("done-1")
        by_rank = {m["rank"]: m["worker_id"] for m in job["status"]["members"]}
        self.assertEqual({l.rank: l.worker_id for l in lines}, by_rank)

    def test_a_log_stream_reads_its_workers_and_rings_from_the_server_s_view_not_etcd(self):
        def store_ranges():
            code, text = self.http("/metrics", timeout=10)
            m = re.search(r'^kolo_etcd_requests_total\{handle="store",kind="range"\} (\d+)$', text, re.M)
            return int(m.group(1)) if m else 0
        before = store_ranges()
        lines = self.lines_of("done-1")
        self.assertEqual(sorted({l.worker_id for l in lines}), ["w0", "w1"])
        code, text = self.http("/v1/jobs/done-1/logs")
        self.assertEqual(code, 200)
        self.assertEqual(store_ranges(), before, "a log stream read etcd")

    def test_a_worker_on_a_second_address_serves_its_own_lines(self):
        record = json.loads(self.cluster.etcd_get("/kolo/v1/workers/w1"))
        self.assertTrue(record["logs_url"].startswith("http://127.0.0.2:"), record)
        self.assertNotIn("logs_token", json.dumps(self.cluster.worker_record("w1")), "never shown by the API")
        w1_lines = [l.text.decode() for l in self.lines_of("done-1") if l.worker_id == "w1"]
        rank = next(m["rank"] for m in self.cluster.job("done-1")["status"]["members"] if m["worker_id"] == "w1")
        self.assertEqual(w1_lines, expected(rank))
        # the agent's own port refuses a request without its token
        out = subprocess.run(["curl", "-sS", "-w", "\n%{http_code}", record["logs_url"] + "/v1/logs/done-1"],
                             capture_output=True, text=True, timeout=20)
        body, _, code = out.stdout.rpartition("\n")
        self.assertEqual((code, json.loads(body)["error"]["code"]), ("401", "UNAUTHENTICATED"))

    def test_curl_gets_chunked_text_prefixed_by_rank_or_bare_for_one_rank(self):
        code, text = self.http("/v1/jobs/done-1/logs")
        self.assertEqual(code, 200)
        for rank in (0, 1):
            mine = [l[len("[%d] " % rank):] for l in text.splitlines() if l.startswith("[%d] " % rank)]
            self.assertEqual(mine, expected(rank))
        code, text = self.http("/v1/jobs/done-1/logs?rank=1")
        self.assertEqual((code, text.splitlines()), (200, expected(1)))

    def test_tail_gives_the_last_lines_of_each_rank(self):
        lines = self.lines_of("done-1", tail=2)
        for rank in (0, 1):
            self.assertEqual([l.text.decode() for l in lines if l.rank == rank], expected(rank)[-2:])
        code, text = self.http("/v1/jobs/done-1/logs?rank=0&tail=3")
        self.assertEqual(text.splitlines(), expected(0)[-3:])

    def test_the_cli_prints_the_logs_with_rank_and_tail(self):
        code, out, err = kolo(self.server, "logs", "--rank", "1", "--tail", "1", "done-1")
        self.assertEqual((code, out), (0, "rank 1 says bye\n"), err)
        code, out, err = kolo(self.server, "logs", "done-1")
        self.assertEqual(code, 0, err)
        self.assertEqual(sorted(out.splitlines()), sorted(["[0] " + l for l in expected(0)] + ["[1] " + l for l in expected(1)]))
        code, out, err = kolo(self.server, "logs", "--tail", "x", "done-1")
        self.assertEqual(code, 2)
        self.assertIn("--tail", err)
        code, out, err = kolo(self.server, "logs")
        self.assertEqual(code, 2)
        code, out, err = kolo(self.server, "logs", "no-such-job")
        self.assertEqual(code, 1)
        self.assertIn("NOT_FOUND", err)

    def test_follow_streams_while_the_job_runs_and_ends_when_it_ends(self):
        self.cluster.submit(lines_job("follow-1", lines=10))
        started = time.monotonic()
        seen, first_at = [], None
        for chunk in self.stream("follow-1", follow=True):
            for line in chunk.lines:
                if first_at is None:
                    first_at = time.monotonic()
                seen.append((line.rank, line.text.decode()))
        ended_at = time.monotonic()
        job = self.cluster.job("follow-1")
        self.assertEqual(job["status"]["phase"], "SUCCEEDED", "the stream ended only once the job had")
        for rank in (0, 1):
            self.assertEqual([t for r, t in seen if r == rank], expected(rank, 10))
        # lines came while the job ran (10 lines 0.1 s apart), not all at the end
        self.assertLess(first_at - started, ended_at - started - 0.5)
        # curl -N follows too and ends by itself
        self.cluster.submit(lines_job("follow-2", lines=3))
        code, text = self.http("/v1/jobs/follow-2/logs?follow=1&rank=0")
        self.assertEqual((code, text.splitlines()), (200, expected(0, 3)))
        self.assertEqual(self.cluster.job("follow-2")["status"]["phase"], "SUCCEEDED")

    def test_kolo_logs_f_and_curl_n_end_cleanly_when_the_job_ends(self):
        # issue 29: no notice, no libcurl text, exit 0, when the job ends while they follow
        self.cluster.submit(lines_job("follow-cli", lines=10))
        curl_n = subprocess.Popen(["curl", "-sSN", "--max-time", "120",
                                   "http://127.0.0.1:%d/v1/jobs/follow-cli/logs?follow=1" % self.server.http_port],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        code, out, err = kolo(self.server, "logs", "-f", "follow-cli", timeout=120)
        self.assertEqual((code, err), (0, ""))
        self.assertEqual(sorted(out.splitlines()),
                         sorted(["[0] " + l for l in expected(0, 10)] + ["[1] " + l for l in expected(1, 10)]))
        self.assertEqual(self.cluster.job("follow-cli")["status"]["phase"], "SUCCEEDED")
        text, curl_err = curl_n.communicate(timeout=120)
        self.assertEqual((curl_n.returncode, curl_err), (0, b""), "curl -N: the chunked stream ended properly")
        self.assertEqual(len(text.decode().splitlines()), 22)
        self.assertNotIn("[kolo]", text.decode())

    def test_without_follow_a_running_job_gives_what_exists_now(self):
        self.cluster.submit(lines_job("running-1", lines=60))
        wait_for(lambda: any(not l.notice for l in self.lines_of("running-1")), 30, "first lines")
        started = time.monotonic()
        lines = self.lines_of("running-1")
        self.assertLess(time.monotonic() - started, 5, "did not wait for the job")
        self.assertLess(len(lines), 2 * 61)
        self.assertNotEqual(self.cluster.job("running-1")["status"]["phase"], "SUCCEEDED")
        self.client.call("CancelJob", pb.CancelJobRequest(id="running-1"))

    def test_a_failing_process_s_last_stderr_lines_are_in_the_job_s_error(self):
        script = ('echo "starting"; echo "usage: train.py [--epochs N]" >&2; '
                  'echo "train.py: error: unrecognized arguments: --epoch 3" >&2; exit 2')
        self.cluster.submit({"name": "bad", "id": "bad-1", "min_workers": 1, "max_reconfigurations": 1,
                             "exec": {"argv": ["/bin/sh", "-c", script]}})
        job = self.cluster.wait_phase("bad-1", "FAILED", timeout=90)
        error = job["status"]["error"]
        self.assertIn("its process exited with code 2", error)
        self.assertIn("stderr, last lines:\nusage: train.py [--epochs N]\n"
                      "train.py: error: unrecognized arguments: --epoch 3", error)
        self.assertNotIn("starting", error, "stdout is not stderr")
        failed = [e for e in job["events"] if e["type"] == "FAILED"]
        self.assertIn("unrecognized arguments", failed[-1]["message"])
        code, out, err = kolo(self.server, "get", "bad-1")
        self.assertIn("train.py: error: unrecognized arguments", out)

    # ---- bad requests ----

    def test_bad_requests_get_clear_errors(self):
        for request, code, text in [
            (pb.StreamLogsRequest(id="nope"), grpc.StatusCode.NOT_FOUND, "no job nope"),
            (pb.StreamLogsRequest(id="Bad/Id"), grpc.StatusCode.INVALID_ARGUMENT, "id:"),
            (pb.StreamLogsRequest(), grpc.StatusCode.INVALID_ARGUMENT, "id: required"),
            (pb.StreamLogsRequest(id="done-1", ranks=list(range(65))), grpc.StatusCode.INVALID_ARGUMENT, "ranks"),
        ]:
            fn = self.client.channel.unary_stream("/kolo.v1.JobService/StreamLogs",
                                                  request_serializer=lambda m: m.SerializeToString(),
                                                  response_deserializer=pb.LogChunk.FromString)
            with self.assertRaises(grpc.RpcError) as ctx:
                list(fn(request, timeout=10))
            self.assertEqual(ctx.exception.code(), code, ctx.exception.details())
            self.assertIn(text, ctx.exception.details())
        raw = self.client.channel.unary_stream("/kolo.v1.JobService/StreamLogs")
        with self.assertRaises(grpc.RpcError) as ctx:
            list(raw(b"\xff\xff\xff", timeout=10))
        self.assertEqual(ctx.exception.code(), grpc.StatusCode.INVALID_ARGUMENT)
        for path, want in [("/v1/jobs/nope/logs", 404), ("/v1/jobs/done-1/logs?tail=x", 400),
                           ("/v1/jobs/done-1/logs?rank=-1", 400), ("/v1/jobs/done-1/logs?follow=maybe", 400),
                           ("/v1/jobs/done-1/logs?colour=red", 400), ("/v1/jobs/done-1/logs?tail=99999999999", 400)]:
            code, body = curl(self.server.http_port, path)
            self.assertEqual(code, want, path)
            self.assertIn("error", body, path)

    def test_logs_need_the_server_s_token_like_every_other_route(self):
        token_file = os.path.join(self.cluster.root, "token")
        with open(token_file, "w") as f:
            f.write("logs-t0ken\n")
        guarded = Server(self.cluster.etcd.url, "--token-file", token_file)
        try:
            for token, want in ((None, grpc.StatusCode.UNAUTHENTICATED), ("wrong", grpc.StatusCode.UNAUTHENTICATED)):
                client = Client(guarded.grpc_target, token=token)
                fn = client.channel.unary_stream("/kolo.v1.JobService/StreamLogs",
                                                 request_serializer=lambda m: m.SerializeToString(),
                                                 response_deserializer=pb.LogChunk.FromString)
                with self.assertRaises(grpc.RpcError) as ctx:
                    list(fn(pb.StreamLogsRequest(id="done-1"), timeout=10, metadata=client.metadata))
                self.assertEqual(ctx.exception.code(), want)
                client.close()
            client = Client(guarded.grpc_target, token="logs-t0ken")
            fn = client.channel.unary_stream("/kolo.v1.JobService/StreamLogs",
                                             request_serializer=lambda m: m.SerializeToString(),
                                             response_deserializer=pb.LogChunk.FromString)
            texts = [l.text.decode() for c in fn(pb.StreamLogsRequest(id="done-1", ranks=[0]), timeout=30,
                                                 metadata=client.metadata) for l in c.lines]
            self.assertEqual(texts, expected(0))
            client.close()
            code, body = curl(guarded.http_port, "/v1/jobs/done-1/logs")
            self.assertEqual((code, body["error"]["code"]), (401, "UNAUTHENTICATED"))
            code, text = curl(guarded.http_port, "/v1/jobs/done-1/logs?rank=1",
                              headers=["Authorization: Bearer logs-t0ken"])
            self.assertEqual((code, text.splitlines()), (200, expected(1)))
        finally:
            self.assertEqual(guarded.terminate(), 0)

    # ---- bounded memory ----

    def test_a_reader_that_stops_reading_does_not_grow_the_server_s_memory(self):
        # 200000 numbered lines of ~200 bytes: 40 MB of output
        script = "seq 1 200000 | sed 's/$/ %s/'" % ("x" * 190)
        self.cluster.submit({"name": "big", "id": "big-1", "min_workers": 1, "exec": {"argv": ["/bin/sh", "-c", script]}})
        before = rss_kib(self.server.proc.pid)
        stalled = self.stream("big-1", follow=True, timeout=300)
        first = next(stalled)  # one chunk, then stop reading
        self.assertTrue(first.lines)
        sock = socket.create_connection(("127.0.0.1", self.server.http_port))
        sock.sendall(b"GET /v1/jobs/big-1/logs?follow=1 HTTP/1.1\r\nHost: x\r\n\r\n")  # never read
        self.cluster.wait_phase("big-1", "SUCCEEDED", timeout=120)
        peak = before
        for _ in range(20):
            peak = max(peak, rss_kib(self.server.proc.pid))
            time.sleep(0.1)
        self.assertLess(peak - before, 24 * 1024, "server RSS grew by %d KiB" % (peak - before))
        # the stalled reader still gets every line, in order, once it reads again
        numbers = [int(l.text.split()[0]) for l in first.lines if not l.notice]
        for chunk in stalled:
            numbers.extend(int(l.text.split()[0]) for l in chunk.lines if not l.notice)
        self.assertEqual(numbers, list(range(1, 200001)))
        sock.close()

    # ---- a worker that is gone ----

    def test_z_a_dead_worker_gives_a_notice_and_the_other_lines_still_come(self):
        job = self.cluster.job("done-1")
        dead_rank = next(m["rank"] for m in job["status"]["members"] if m["worker_id"] == "w1")
        self.cluster.workers["w1"].kill(signal.SIGKILL)
        started = time.monotonic()
        lines = self.lines_of("done-1", timeout=60)
        self.assertLess(time.monotonic() - started, 20)
        notices = [l.text.decode() for l in lines if l.notice]
        self.assertTrue(any("w1" in n for n in notices), notices)
        # in kolo's words, never libcurl's ("Couldn't connect to server")
        for n in notices:
            self.assertRegex(n, r"^(worker w1 is not registered now|the logs of worker w1 are not reachable: "
                                r"(nothing answers at its log address|the connection closed before|it sent nothing))")
        self.assertEqual([l.text.decode() for l in lines if not l.notice], expected(1 - dead_rank))
        code, text = self.http("/v1/jobs/done-1/logs")
        self.assertIn("[kolo] ", text)


if __name__ == "__main__":
    main()
