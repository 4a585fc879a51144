"""The dashboard's HTTP side against a real etcd and kolo-server: the embedded page and its
files (ETag and 304, a Content-Security-Policy that allows nothing but the server, served
without the token), and GET /v1/stream (server-sent events): the first state whole, then a
change within a tick, at most a few batches a second however fast the view changes, job and
metrics events for one job, an error event for an unknown job, 400s for bad queries, the token
required, and a server that stops at once with streams open."""
import http.client
import json
import os
import socket
import tempfile
import threading
import time
import unittest

from test_server_support import Client, Etcd, Server, curl, main, spec, wait_for

TOKEN = "stream-token-0123456789"


class Sse:
    """A raw server-sent event client on http.client, with a reader thread."""

    def __init__(self, port, query, headers=None):
        self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        self.conn.request("GET", "/v1/stream?" + query, headers=headers or {})
        self.resp = self.conn.getresponse()
        self.status = self.resp.status
        self.events = []  # (monotonic time, name, data)
        self.comments = 0
        self.ended = False
        self.lock = threading.Lock()
        if self.status == 200:
            threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        name, data = "message", []
        try:
            while True:
                line = self.resp.readline()
                if not line:
                    break
                line = line.decode().rstrip("\n")
                if line == "":
                    if data:
                        with self.lock:
                            self.events.append((time.monotonic(), name, json.loads("\n".join(data))))
                    name, data = "message", []
                elif line.startswith(":"):
                    self.comments += 1
                elif line.startswith("event:"):
                    name = line[6:].strip()
                elif line.startswith("data:"):
                    data.append(line[5:].lstrip())
        except (OSError, ValueError, AttributeError, http.client.HTTPException):  # closed under the reader
            pass
        self.ended = True

    def named(self, name):
        with self.lock:
            return [e for e in self.events if e[1] == name]

    def close(self):
        try:
            self.conn.sock.shutdown(socket.SHUT_RDWR)
        except (OSError, AttributeError):
            pass
        self.conn.close()


class StreamTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.etcd = Etcd()
        cls.dir = tempfile.mkdtemp(prefix="kolo-stream-")
        token_file = os.path.join(cls.dir, "token")
        with open(token_file, "w") as f:
            f.write(TOKEN + "\n")
        cls.srv = Server(cls.etcd.url)
        cls.secure = Server(cls.etcd.url, "--token-file", token_file)
        cls.client = Client(cls.srv.grpc_target)

    @classmethod
    def tearDownClass(cls):
        cls.client.close()
        cls.srv.kill()
        cls.secure.kill()
        cls.etcd.stop()

    def test_the_page_and_its_files_are_served_with_an_etag_and_a_strict_csp_without_a_token(self):
        for server in (self.srv, self.secure):
            conn = http.client.HTTPConnection("127.0.0.1", server.http_port, timeout=10)
            conn.request("GET", "/")
            resp = conn.getresponse()
            page = resp.read().decode()
            self.assertEqual(resp.status, 200)
            self.assertTrue(resp.getheader("Content-Type").startswith("text/html"))
            self.assertIn('src="/ui/app.js"', page)
            csp = resp.getheader("Content-Security-Policy")
            self.assertIn("default-src 'self'", csp)
            self.assertIn("connect-src 'self'", csp)
            etag = resp.getheader("ETag")
            self.assertRegex(etag, r'^"[0-9a-f]{16}"$')
            conn.request("GET", "/ui/index.html", headers={"If-None-Match": etag})
            again = conn.getresponse()
            self.assertEqual((again.status, again.read()), (304, b""))
            for path, kind in (("/ui/app.js", "text/javascript"), ("/ui/style.css", "text/css"),
                               ("/ui/favicon.svg", "image/svg+xml")):
                conn.request("GET", path)
                r = conn.getresponse()
                body = r.read()
                self.assertEqual(r.status, 200, path)
                self.assertTrue(r.getheader("Content-Type").startswith(kind), path)
                self.assertGreater(len(body), 100)
            conn.close()
        self.assertEqual(curl(self.srv.http_port, "/ui/nope.js")[0], 404)
        self.assertEqual(curl(self.srv.http_port, "/ui/../metrics", extra=("--path-as-is",))[0], 404)
        # the API itself still needs the token on the secure server
        self.assertEqual(curl(self.secure.http_port, "/v1/jobs")[0], 401)

    def test_a_jobs_stream_sends_the_state_then_each_change_within_a_tick(self):
        s = Sse(self.srv.http_port, "jobs=1")
        self.assertEqual(s.status, 200)
        self.assertTrue(s.resp.getheader("Content-Type").startswith("text/event-stream"))
        wait_for(lambda: s.named("jobs"), 10, "the first jobs event")
        before = {j["id"] for j in s.named("jobs")[0][2]["jobs"]}
        self.client.call("SubmitJob", spec("st-1"))
        sent = time.monotonic()
        got = wait_for(lambda: [e for e in s.named("jobs_changed") if any(j["id"] == "st-1" for j in e[2]["jobs"])],
                       10, "the new job on the stream")
        self.assertLess(got[0][0] - sent, 2.0)
        # only what changed is sent again
        self.assertEqual({j["id"] for j in got[0][2]["jobs"]} & before, set())
        s.close()

    def test_fast_changes_arrive_as_a_few_batches_a_second(self):
        self.client.call("SubmitJob", spec("st-2"))
        s = Sse(self.srv.http_port, "jobs=1")
        wait_for(lambda: s.named("jobs"), 10, "the first jobs event")
        from test_server_support import pb
        # at least 3 s and at least 40 changes (on a loaded machine a ScaleJob can take
        # 100 ms: then the run is longer, and the bound below grows with it)
        started = time.monotonic()
        n = 0
        while (time.monotonic() - started < 3.0 or n < 40) and time.monotonic() - started < 30.0:
            self.client.call("ScaleJob", pb.ScaleJobRequest(id="st-2", min_workers=1, max_workers=2 + n % 50))
            n += 1
        elapsed = time.monotonic() - started
        time.sleep(0.6)
        batches = [e for e in s.named("jobs_changed") if e[0] >= started]
        print("%d changes in %.1f s -> %d jobs events" % (n, elapsed, len(batches)))
        self.assertGreaterEqual(n, 40)
        # one batch per 250 ms tick at most, whatever the rate of changes
        self.assertLessEqual(len(batches), (elapsed + 0.6) * 1000 / 250 + 2)
        last = [j for j in batches[-1][2]["jobs"] if j["id"] == "st-2"][0]
        self.assertEqual(last["status"]["max_workers"], 2 + (n - 1) % 50, "the last change is delivered")
        s.close()

    def test_a_job_stream_sends_the_job_and_its_metrics_and_an_unknown_job_is_an_error_event(self):
        self.client.call("SubmitJob", spec("st-3"))
        s = Sse(self.srv.http_port, "job=st-3")
        job = wait_for(lambda: s.named("job"), 10, "the job event")[0][2]
        self.assertEqual(job["id"], "st-3")
        self.assertEqual(job["events"][0]["type"], "SUBMITTED")
        metrics = wait_for(lambda: s.named("metrics"), 10, "the metrics event")[0][2]
        self.assertEqual(metrics, {"id": "st-3", "points": [], "rings": []})
        from test_server_support import pb
        self.client.call("CancelJob", pb.CancelJobRequest(id="st-3", reason="bye"))
        wait_for(lambda: any(e[2]["status"]["phase"] == "CANCELLED" for e in s.named("job")), 10, "the cancel")
        s.close()
        gone = Sse(self.srv.http_port, "job=no-such-job")
        wait_for(lambda: gone.ended, 10, "the stream of an unknown job to end")
        self.assertEqual(gone.named("error")[0][2]["error"]["code"], "NOT_FOUND")
        gone.close()

    def test_bad_stream_queries_are_400_and_the_token_is_required(self):
        for query in ("", "jobs=maybe", "job=Bad_Id", "colour=red", "jobs=1&limit=2"):
            code, body = curl(self.srv.http_port, "/v1/stream?" + query)
            self.assertEqual(code, 400, (query, body))
            self.assertIn("message", body["error"])
        self.assertEqual(curl(self.secure.http_port, "/v1/stream?jobs=1")[0], 401)
        s = Sse(self.secure.http_port, "workers=1", {"Authorization": "Bearer " + TOKEN})
        self.assertEqual(s.status, 200)
        wait_for(lambda: s.named("workers"), 10, "the workers event")
        s.close()

    def test_a_server_with_open_streams_stops_at_once_and_exits_0(self):
        srv = Server(self.etcd.url, "--grace-ms", "200")
        streams = [Sse(srv.http_port, q) for q in ("jobs=1", "workers=1", "job=st-1", "jobs=1&workers=1")]
        for s in streams:
            wait_for(lambda: s.events, 10, "a first event")
        started = time.monotonic()
        self.assertEqual(srv.terminate(timeout=15), 0)
        self.assertLess(time.monotonic() - started, 5)
        for s in streams:
            wait_for(lambda: s.ended, 5, "the stream to end")
            s.close()


if __name__ == "__main__":
    main()
