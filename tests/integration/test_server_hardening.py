"""Bad input at kolo-server's doors, as a careful user or an attacker would send it: 64-bit
integers at their limits, NUL bytes in strings and URLs, bytes that are not UTF-8, and a
gzip-compressed request that expands far past the message limit. Each answer must be a clear
error naming the field, and nothing may be stored, changed or lost (issue #12 items 1-4).
Real etcd, a real kolo-server on 127.0.0.1 port 0, Python grpcio and curl as clients."""
import base64
import grpc
import json
import socket
import subprocess
import unittest
import urllib.request

from test_server_support import Client, Etcd, Server, curl, kolo, main, pb, spec

STEPS_MAX = 1 << 53
EVENTS_KEPT = 100  # KOLO_EVENTS_KEPT (coordination/keys.h, docs/API.md)


def etcd_count(url, prefix):
    """How many keys etcd holds under prefix (its JSON gateway, count_only)."""
    end = prefix[:-1] + chr(ord(prefix[-1]) + 1)
    body = json.dumps({"key": base64.b64encode(prefix.encode()).decode(),
                       "range_end": base64.b64encode(end.encode()).decode(), "count_only": True}).encode()
    req = urllib.request.Request(url + "/v3/kv/range", data=body, method="POST")
    with urllib.request.urlopen(req, timeout=10) as answer:
        return int(json.load(answer).get("count", 0))


def varint(v):
    out = bytearray()
    while True:
        byte = v & 0x7F
        v >>= 7
        out.append(byte | (0x80 if v else 0))
        if not v:
            return bytes(out)


def field(number, payload):
    """A length-delimited protobuf field written by hand (protobuf itself refuses bad UTF-8)."""
    return varint(number << 3 | 2) + varint(len(payload)) + payload


def uint_field(number, value):
    return varint(number << 3) + varint(value)


def spec_bytes(name=b"demo", job_id=None, extra=b"", builtin_extra=b""):
    """JobSpec{name, id, min_workers: 1, builtin{model: mlp, epochs: 1, ...}, ...}."""
    out = field(1, name) + uint_field(4, 1)
    if job_id is not None:
        out += field(2, job_id)
    out += field(6, field(1, b"mlp") + uint_field(4, 1) + builtin_extra)
    return out + extra


def memory_kib(pid):
    """(VmHWM, VmRSS) of a process in KiB."""
    values = {}
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            key, _, rest = line.partition(":")
            if key in ("VmHWM", "VmRSS"):
                values[key] = int(rest.split()[0])
    return values["VmHWM"], values["VmRSS"]


def sanitized(pid):
    """Whether the process runs under AddressSanitizer: its quarantine and redzones make
    memory figures meaningless, so the memory bounds are checked in the release build only."""
    with open("/proc/%d/maps" % pid) as f:
        return "libasan" in f.read()


def peak_rss_kb(pid):
    """The process's peak resident memory (VmHWM) in KiB."""
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    raise AssertionError("no VmHWM for %d" % pid)


class HardeningTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.etcd = Etcd()
        try:
            cls.srv = Server(cls.etcd.url)
        except Exception:
            cls.etcd.stop()
            raise
        cls.client = Client(cls.srv.grpc_target)

    @classmethod
    def tearDownClass(cls):
        cls.client.close()
        code = cls.srv.terminate()
        cls.etcd.stop()
        assert code == 0, code

    def test_a_watcher_that_stops_reading_costs_bounded_memory_and_still_gets_the_newest_job(self):
        """#12 item 8: before, every version was queued for a stalled WatchJob client (the
        server grew by tens of MB through a thousand changes); now the queue is coalesced
        to the newest version past 256 versions / 4 MiB, and the client, once it reads
        again, gets the final job with every event."""
        labels = {"pad%02d" % i: "x" * 250 for i in range(60)}  # ~15 KB per version
        self.client.call("SubmitJob", spec("slow-watch", **labels))
        stream = self.client.watch("slow-watch", timeout=600)
        self.assertEqual(len(next(stream).events), 1)  # then it stops reading
        before = peak_rss_kb(self.srv.proc.pid)
        changes = 1000
        for i in range(changes):
            self.client.call("ScaleJob", pb.ScaleJobRequest(id="slow-watch", min_workers=1, max_workers=2 + i % 2))
        grown_mb = (peak_rss_kb(self.srv.proc.pid) - before) / 1024
        print("server peak RSS grew %.1f MB through %d changes with a stalled watcher" % (grown_mb, changes))
        self.client.call("CancelJob", pb.CancelJobRequest(id="slow-watch"))
        rest = list(stream)
        self.assertEqual(stream.code(), grpc.StatusCode.OK)
        self.assertEqual(rest[-1].status.phase, pb.CANCELLED)
        # SUBMITTED, then the last EVENTS_KEPT of the SCALEDs and CANCELLED (#30: bounded log)
        self.assertEqual([e.seq for e in rest[-1].events],
                         [1] + list(range(changes + 3 - EVENTS_KEPT, changes + 3)))
        self.assertLess(len(rest), changes + 1)  # intermediate versions were coalesced
        if not sanitized(self.srv.proc.pid):
            self.assertLess(grown_mb, 25)

    def test_a_job_scaled_thousands_of_times_keeps_a_bounded_event_log_in_etcd_and_getjob(self):
        """#30 item 10: 2,000 ScaleJob calls made 2,001 events, a 224 KB GetJob and a whole-log
        re-encode on every change. The log keeps the first event and the last EVENTS_KEPT, in
        etcd (the writer deletes the evicted key in the same txn) and in the server's view."""
        self.client.call("SubmitJob", spec("many-scales"))
        changes = 600
        for i in range(changes):
            self.client.call("ScaleJob", pb.ScaleJobRequest(id="many-scales", min_workers=1, max_workers=2 + i % 2))
        job = self.client.call("GetJob", pb.GetJobRequest(id="many-scales"))
        seqs = [e.seq for e in job.events]
        self.assertEqual(seqs, [1] + list(range(changes + 2 - EVENTS_KEPT, changes + 2)))
        self.assertEqual(job.events[0].type, "SUBMITTED")
        self.assertEqual(job.events[-1].type, "SCALED")
        self.assertLess(job.ByteSize(), 40000)
        self.assertEqual(etcd_count(self.etcd.url, "/kolo/v1/jobs/many-scales/events/"), EVENTS_KEPT + 1)
        code, body = curl(self.srv.http_port, "/v1/jobs/many-scales")
        self.assertEqual(code, 200)
        self.assertEqual(len(body["events"]), EVENTS_KEPT + 1)

    def test_head_is_get_without_a_body_and_a_wrong_method_is_405_with_allow(self):
        """#12 item 7: HEAD answered 404 on every route, and a wrong method on a known route
        404 instead of 405 with an Allow header."""
        self.client.call("SubmitJob", spec("head-1"))
        port = self.srv.http_port
        for path in ("/healthz", "/v1/jobs", "/v1/jobs/head-1", "/v1/jobs/head-1/events", "/v1/workers"):
            out = subprocess.run(["curl", "-sS", "--max-time", "10", "-I", "http://127.0.0.1:%d%s" % (port, path)],
                                 capture_output=True, text=True, timeout=20)
            head = out.stdout.splitlines()
            self.assertEqual(head[0].split()[1], "200", (path, out.stdout))
            self.assertIn("content-type: application/json", out.stdout.lower(), path)
            code, body = curl(port, path, "HEAD", extra=("-I",))
            self.assertEqual(code, 200, path)
        self.assertEqual(curl(port, "/v1/jobs/nope", "HEAD", extra=("-I",))[0], 404)
        for method, path, allow in (("DELETE", "/v1/jobs", "GET, HEAD, POST"),
                                    ("PUT", "/v1/jobs/head-1", "GET, HEAD"),
                                    ("GET", "/v1/jobs/head-1:cancel", "POST"),
                                    ("DELETE", "/v1/workers/w1:drain", "POST"),
                                    ("POST", "/metrics", "GET, HEAD")):
            out = subprocess.run(["curl", "-sS", "--max-time", "10", "-i", "-X", method,
                                  "http://127.0.0.1:%d%s" % (port, path)], capture_output=True, text=True, timeout=20)
            head, _, body = out.stdout.partition("\n\n")  # text mode: CRLF reads as LF
            self.assertEqual(head.split()[1], "405", (method, path, out.stdout))
            self.assertIn("allow: " + allow.lower(), head.lower(), (method, path))
            self.assertIn('"code":"UNIMPLEMENTED"', body, (method, path, out.stdout))
        self.assertEqual(curl(port, "/v1/nothing", "DELETE")[0], 404)  # unknown path: still 404
        # nothing changed by the refused calls
        self.assertEqual(self.client.call("GetJob", pb.GetJobRequest(id="head-1")).status.phase, pb.PENDING)

    def raw_http(self, request_bytes):
        """Sends raw bytes to the HTTP port; returns (status, headers text, body text)."""
        with socket.create_connection(("127.0.0.1", self.srv.http_port), timeout=10) as conn:
            conn.sendall(request_bytes)
            data = b""
            while True:
                chunk = conn.recv(65536)
                if not chunk:
                    break
                data += chunk
        head, _, body = data.decode(errors="replace").partition("\r\n\r\n")
        return int(head.split()[1]), head, body

    def test_a_long_uri_or_header_block_is_answered_414_or_431_in_json(self):
        """#12 item 7: libmicrohttpd answered these with its own HTML pages."""
        self.client.call("SubmitJob", spec("size-1"))
        status, head, body = self.raw_http(b"GET /v1/jobs/" + b"a" * 20000 + b" HTTP/1.1\r\nHost: x\r\n"
                                           b"Connection: close\r\n\r\n")
        self.assertEqual(status, 414, head)
        self.assertIn("application/json", head.lower())
        self.assertEqual(json.loads(body)["error"]["code"], "INVALID_ARGUMENT")
        self.assertIn("request URI of", json.loads(body)["error"]["message"])
        status, head, body = self.raw_http(b"GET /v1/jobs HTTP/1.1\r\nHost: x\r\nX-Big: " + b"b" * 30000 +
                                           b"\r\nConnection: close\r\n\r\n")
        self.assertEqual(status, 431, head)
        self.assertIn("request headers of", json.loads(body)["error"]["message"])
        # a body sent with an oversized request is not read, and nothing is stored
        status, head, body = self.raw_http(b"POST /v1/jobs/size-1:cancel?" + b"c" * 9000 +
                                           b" HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n"
                                           b"Connection: close\r\n\r\n{}")
        self.assertEqual(status, 414, head)
        self.assertEqual(self.client.call("GetJob", pb.GetJobRequest(id="size-1")).status.phase, pb.PENDING)
        # within the limits, the router answers as usual
        status, head, body = self.raw_http(b"GET /v1/jobs/" + b"a" * 200 + b" HTTP/1.1\r\nHost: x\r\n"
                                           b"Connection: close\r\n\r\n")
        self.assertIn(status, (400, 404), head)  # an id too long, or no such job
        self.assertIn("error", json.loads(body))

    def assertRefused(self, fn, code, contains):
        with self.assertRaises(grpc.RpcError) as ctx:
            fn()
        self.assertEqual(ctx.exception.code(), code, ctx.exception.details())
        self.assertIn(contains, ctx.exception.details())

    def raw_submit(self, payload):
        return self.client.raw("/kolo.v1.JobService/SubmitJob", payload)

    def job_ids(self):
        return sorted(j.id for j in self.client.call("ListJobs", pb.ListJobsRequest(page_size=1000)).jobs)

    # -- item 1: uint64 ------------------------------------------------------------------

    def test_steps_of_2_to_the_63_or_more_are_refused_at_submit_naming_the_field(self):
        before = self.job_ids()
        for steps in (1 << 63, (1 << 64) - 1, STEPS_MAX + 1):
            s = spec("u64-big")
            s.builtin.steps = steps
            self.assertRefused(lambda: self.client.call("SubmitJob", s), grpc.StatusCode.INVALID_ARGUMENT,
                               "builtin.steps")
        body = ('{"id":"u64-http","name":"n","min_workers":1,'
                '"builtin":{"model":"mlp","steps":"9223372036854775808"}}')
        code, answer = curl(self.srv.http_port, "/v1/jobs", "POST", body)
        self.assertEqual(code, 400)
        self.assertIn("builtin.steps", answer["error"]["message"])
        self.assertEqual(self.job_ids(), before)

    def test_the_largest_accepted_steps_round_trips_exactly_through_grpc_http_and_the_cli(self):
        s = spec("u64-edge")
        s.builtin.steps = STEPS_MAX
        self.assertEqual(self.client.call("SubmitJob", s).spec.builtin.steps, STEPS_MAX)
        self.assertEqual(self.client.call("GetJob", pb.GetJobRequest(id="u64-edge")).spec.builtin.steps, STEPS_MAX)
        code, job = curl(self.srv.http_port, "/v1/jobs/u64-edge")
        self.assertEqual((code, job["spec"]["builtin"]["steps"]), (200, STEPS_MAX))
        listed = [j for j in self.client.call("ListJobs", pb.ListJobsRequest(page_size=1000)).jobs
                  if j.id == "u64-edge"]
        self.assertEqual(listed[0].spec.builtin.steps, STEPS_MAX)
        rc, out, err = kolo(self.srv, "--json", "get", "u64-edge")
        self.assertEqual(rc, 0, err)
        self.assertIn('"steps": %d' % STEPS_MAX, out)
        # it can be cancelled: the job is visible to every call
        self.assertEqual(self.client.call("CancelJob", pb.CancelJobRequest(id="u64-edge")).status.phase, pb.CANCELLED)

    # -- item 2: NUL bytes -------------------------------------------------------------------

    def test_a_nul_byte_in_an_id_or_name_is_refused_and_never_cuts_the_string(self):
        self.client.call("SubmitJob", spec("a"))
        self.assertRefused(lambda: self.client.call("SubmitJob", spec("a\x00b")),
                           grpc.StatusCode.INVALID_ARGUMENT, "id: contains a NUL byte")
        named = spec("nul-name")
        named.name = "demo\x00hidden"
        self.assertRefused(lambda: self.client.call("SubmitJob", named), grpc.StatusCode.INVALID_ARGUMENT,
                           "name: contains a NUL byte")
        for method, request in (("CancelJob", pb.CancelJobRequest(id="a\x00x")),
                                ("GetJob", pb.GetJobRequest(id="a\x00x")),
                                ("ScaleJob", pb.ScaleJobRequest(id="a\x00x", min_workers=2))):
            self.assertRefused(lambda: self.client.call(method, request), grpc.StatusCode.INVALID_ARGUMENT,
                               "id: contains a NUL byte")
        self.assertNotIn("nul-name", self.job_ids())
        job = self.client.call("GetJob", pb.GetJobRequest(id="a"))
        self.assertEqual((job.status.phase, job.status.min_workers), (pb.PENDING, 1))

    def test_an_escaped_nul_in_a_url_is_refused_and_changes_nothing(self):
        self.client.call("SubmitJob", spec("url-nul"))
        for method, path in (("GET", "/v1/jobs/url-nul%00junk"), ("POST", "/v1/jobs/url-nul:cancel%00junk"),
                             ("POST", "/v1/jobs/url-nul%00:cancel"), ("GET", "/v1/jobs?page_token=a%00b"),
                             ("GET", "/v1/jobs/url-nul%00/events")):
            code, body = curl(self.srv.http_port, path, method, "{}" if method == "POST" else None)
            self.assertEqual(code, 400, (path, body))
            self.assertEqual(body["error"]["code"], "INVALID_ARGUMENT")
            self.assertIn("NUL", body["error"]["message"])
        self.assertEqual(self.client.call("GetJob", pb.GetJobRequest(id="url-nul")).status.phase, pb.PENDING)
        code, body = curl(self.srv.http_port, "/v1/jobs/url-nul")
        self.assertEqual((code, body["id"]), (200, "url-nul"))

    # -- item 3: invalid UTF-8 ----------------------------------------------------------------

    def test_invalid_utf8_in_any_string_field_is_invalid_argument_naming_the_field(self):
        before = self.job_ids()
        cases = [
            (spec_bytes(name=b"bad\xff", job_id=b"utf-1"), "name: not valid UTF-8"),
            (spec_bytes(job_id=b"utf-2", extra=field(10, b"/tmp/\xc0\xaf")), "checkpoint_dir: not valid UTF-8"),
            (spec_bytes(job_id=b"utf-3", extra=field(11, field(1, b"team") + field(2, b"\xed\xa0\x80"))),
             "labels.team: not valid UTF-8"),
            (spec_bytes(job_id=b"utf-4", extra=field(11, field(1, b"t\xffm") + field(2, b"v"))),
             "labels: a key not valid UTF-8"),
            (spec_bytes(job_id=b"utf-5", builtin_extra=field(7, field(1, b"hidden") + field(2, b"\xe2\x82"))),
             "builtin.hyper_parameters.hidden: not valid UTF-8"),
        ]
        for payload, message in cases:
            self.assertRefused(lambda: self.raw_submit(payload), grpc.StatusCode.INVALID_ARGUMENT, message)
        self.client.call("SubmitJob", spec("utf-ok"))
        cancel = field(1, b"utf-ok") + field(2, b"because \xff")
        self.assertRefused(lambda: self.client.raw("/kolo.v1.JobService/CancelJob", cancel),
                           grpc.StatusCode.INVALID_ARGUMENT, "reason: not valid UTF-8")
        self.assertEqual(self.client.call("GetJob", pb.GetJobRequest(id="utf-ok")).status.phase, pb.PENDING)
        self.assertEqual(self.job_ids(), sorted(before + ["utf-ok"]))
        # and over HTTP, in the path and in a query value
        for path in ("/v1/jobs/%ff", "/v1/jobs?label=team%3D%ff"):
            code, body = curl(self.srv.http_port, path)
            self.assertEqual(code, 400, (path, body))
            self.assertEqual(body["error"]["code"], "INVALID_ARGUMENT")

    # -- item 4: compressed requests ------------------------------------------------------------

    def test_a_gzip_request_that_expands_past_the_limit_is_refused_without_growing_memory(self):
        channel = grpc.insecure_channel(self.srv.grpc_target, options=[("grpc.max_send_message_length", 512 << 20)])
        submit = channel.unary_unary("/kolo.v1.JobService/SubmitJob", request_serializer=lambda m: m.SerializeToString(),
                                     response_deserializer=pb.Job.FromString)
        small = spec("gzip-small")
        self.assertEqual(submit(small, timeout=10, compression=grpc.Compression.Gzip).id, "gzip-small")
        peak_before, _ = memory_kib(self.srv.proc.pid)
        for mib in (64, 128):
            big = spec("gzip-%d" % mib)
            big.name = "a" * (mib << 20)  # ~64-128 KiB on the wire
            with self.assertRaises(grpc.RpcError) as ctx:
                submit(big, timeout=60, compression=grpc.Compression.Gzip)
            self.assertEqual(ctx.exception.code(), grpc.StatusCode.RESOURCE_EXHAUSTED)
            self.assertIn("decompresses to more than", ctx.exception.details())
        peak_after, rss_after = memory_kib(self.srv.proc.pid)
        # the message limit (4 MiB) bounds what one request may cost; before: +70 MB and +205 MB
        grown = peak_after - peak_before
        print("gzip 64+128 MiB: peak %d -> %d KiB (+%d KiB), rss %d KiB" % (peak_before, peak_after, grown, rss_after))
        if not sanitized(self.srv.proc.pid):
            self.assertLess(grown, 16 << 10)
        channel.close()
        self.assertNotIn("gzip-64", self.job_ids())


if __name__ == "__main__":
    main()
