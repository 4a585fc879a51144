"""The attacks of issue #30 on kolo-server's HTTP door, played for real against kolo-server
processes on 127.0.0.1 (memory store): a web page's cross-site requests (text/plain and
form bodies, foreign Origin, Sec-Fetch-Site), DNS rebinding (a foreign Host), and clients
without the token who send large bodies. Each must fail; the dashboard's own requests (same
origin, JSON) must keep working."""
import json
import os
import socket
import threading
import time
import unittest

from test_server_support import Server, curl, main, wait_for


def sanitized(pid):
    """Whether the process runs under AddressSanitizer (memory bounds hold in the release build)."""
    with open("/proc/%d/maps" % pid) as f:
        return "libasan" in f.read()

TOKEN = "web-door-token"
EXEC_SPEC = json.dumps({"id": "web-pwn", "name": "pwn", "min_workers": 1,
                        "exec": {"argv": ["/bin/sh", "-c", "touch /tmp/pwned"], "env": {"SECRET": "s"}}})


def rss_kib(pid):
    with open("/proc/%d/status" % pid) as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))


def raw(port, head, body=b"", timeout=5):
    """One request on a fresh connection; returns (status, parsed JSON answer)."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(head + body)
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = s.recv(65536)
            if not chunk:
                break
            data += chunk
        head_text, _, rest = data.partition(b"\r\n\r\n")
        length = int(next((l.split(b":")[1] for l in head_text.split(b"\r\n") if l.lower().startswith(b"content-length")), b"0"))
        while len(rest) < length:
            chunk = s.recv(65536)
            if not chunk:
                break
            rest += chunk
    return int(head_text.split(b" ")[1]), json.loads(rest or b"null")


class WebDoorTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.open_server = Server("none", "--http-allowed-hosts", "kolo.example.com, *.corp.example",
                                 "--max-log-streams", "1")
        token_file = os.path.join(cls.open_server.dir, "token")
        with open(token_file, "w") as f:
            f.write(TOKEN + "\n")
        cls.token_server = Server("none", "--token-file", token_file)

    @classmethod
    def tearDownClass(cls):
        codes = [s.terminate() for s in (cls.open_server, cls.token_server)]
        assert codes == [0, 0], codes

    def post(self, path, body, *headers, server=None):
        port = (server or self.open_server).http_port
        head = ("POST %s HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nContent-Length: %d\r\nConnection: close\r\n%s\r\n"
                % (path, port, len(body), "".join(h + "\r\n" for h in headers)))
        return raw(port, head.encode(), body.encode())

    def assert_no_job(self, job_id="web-pwn"):
        code, _ = curl(self.open_server.http_port, "/v1/jobs/" + job_id)
        self.assertEqual(code, 404, "the attack created a job")

    def test_a_cross_site_simple_post_of_an_exec_spec_creates_no_job(self):
        page = "http://evil.example"
        for headers in (("Content-Type: text/plain;charset=UTF-8", "Origin: " + page, "Sec-Fetch-Site: cross-site"),
                        ("Content-Type: application/x-www-form-urlencoded", "Origin: " + page),
                        ("Content-Type: multipart/form-data; boundary=x",),
                        ("Content-Type: text/plain",),
                        ()):  # no Content-Type at all
            code, answer = self.post("/v1/jobs", EXEC_SPEC, *headers)
            self.assertIn(code, (403, 415), headers)
            self.assertIn(answer["error"]["code"], ("PERMISSION_DENIED", "INVALID_ARGUMENT"))
        self.assert_no_job()

    def test_a_json_post_from_another_origin_or_site_is_refused(self):
        port = self.open_server.http_port
        for headers in (("Origin: http://evil.example",), ("Origin: null",),
                        ("Origin: http://127.0.0.1:%d" % (port + 1),),  # another port: same site, not same origin
                        ("Sec-Fetch-Site: cross-site",), ("Sec-Fetch-Site: same-site",)):
            code, answer = self.post("/v1/jobs", EXEC_SPEC, "Content-Type: application/json", *headers)
            self.assertEqual((code, answer["error"]["code"]), (403, "PERMISSION_DENIED"), headers)
            code, _ = self.post("/v1/jobs/web-pwn:cancel", "", *headers)
            self.assertEqual(code, 403, headers)
        self.assert_no_job()

    def test_dns_rebinding_a_foreign_host_reads_nothing(self):
        port = self.open_server.http_port
        code, _ = curl(port, "/v1/jobs", "POST", json.dumps({"id": "web-env", "name": "n", "min_workers": 1,
                                                             "exec": {"argv": ["true"], "env": {"KEY": "secret"}}}))
        self.assertEqual(code, 200)
        for host in ("rebind.evil.example:%d" % port, "rebind.evil.example", "127.0.0.1.nip.io:%d" % port,
                     "corp.example", "evil.example.com"):
            for path in ("/v1/jobs", "/v1/jobs/web-env", "/metrics", "/"):
                code, answer = curl(port, path, headers=["Host: " + host])
                self.assertEqual(code, 403, (host, path))
                self.assertNotIn("secret", json.dumps(answer))
        # probes answer whatever the Host; the names the operator listed are served
        self.assertEqual(curl(port, "/healthz", headers=["Host: rebind.evil.example"])[0], 200)
        for host in ("kolo.example.com", "KOLO.example.com.:443", "a.corp.example", "localhost:%d" % port,
                     "dev.localhost", "kolo-server:7080", "[::1]:%d" % port, "10.1.2.3"):
            self.assertEqual(curl(port, "/v1/jobs/web-env", headers=["Host: " + host])[0], 200, host)

    def test_the_dashboards_own_requests_pass(self):
        port = self.open_server.http_port
        own = ["Origin: http://127.0.0.1:%d" % port, "Sec-Fetch-Site: same-origin"]
        spec = json.dumps({"id": "web-own", "name": "own", "min_workers": 1, "exec": {"argv": ["true"]}})
        code, job = self.post("/v1/jobs", spec, "Content-Type: application/json", *own)
        self.assertEqual((code, job["id"]), (200, "web-own"))
        code, job = self.post("/v1/jobs/web-own:cancel", "", *own)  # a POST without a body
        self.assertEqual(code, 200, job)
        # behind a proxy that rewrites Host, the page's origin is a listed name
        code, job = self.post("/v1/jobs", spec.replace("web-own", "web-own-2"),
                              "Content-Type: application/json; charset=utf-8", "Origin: https://kolo.example.com")
        self.assertEqual(code, 200, job)

    def test_a_client_without_the_token_is_answered_before_it_sends_its_body(self):
        port = self.token_server.http_port
        with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
            s.sendall(b"POST /v1/jobs HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                      b"Content-Length: 4194304\r\n\r\n" + b" " * 65536)
            answer = s.recv(4096)
        self.assertTrue(answer.startswith(b"HTTP/1.1 401"), answer[:100])
        self.assertIn(b"WWW-Authenticate: Bearer", answer)

    def test_bodies_held_at_once_stay_within_the_servers_budget(self):
        srv = self.open_server
        before = rss_kib(srv.proc.pid)
        clients, size = 24, 4 << 20  # 96 MiB offered; the budget is 32 MiB
        socks = []
        for _ in range(clients):
            s = socket.create_connection(("127.0.0.1", srv.http_port), timeout=20)
            s.sendall(b"POST /v1/jobs HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                      b"Content-Length: %d\r\n\r\n" % size)
            socks.append(s)
        threads = [threading.Thread(target=s.sendall, args=(b" " * (size - 1),)) for s in socks]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        time.sleep(0.5)  # the last bytes reach libmicrohttpd
        grown = (rss_kib(srv.proc.pid) - before) / 1024
        answers = []
        for s in socks:
            s.sendall(b"}")
            answers.append(s.recv(64))
            s.close()
        if not sanitized(srv.proc.pid):  # ASan's quarantine and redzones make RSS meaningless
            self.assertLess(grown, 48, "kolo-server grew by %.0f MiB holding bodies" % grown)
        self.assertTrue(any(a.startswith(b"HTTP/1.1 503") for a in answers), answers)
        wait_for(lambda: curl(srv.http_port, "/v1/jobs", "POST", json.dumps(
            {"id": "web-after", "name": "n", "min_workers": 1, "exec": {"argv": ["true"]}}))[0] == 200, 10, "a submit after the flood")

    def test_too_many_log_streams_answer_503_as_too_many_event_streams_do(self):
        port = self.open_server.http_port
        curl(port, "/v1/jobs", "POST", json.dumps({"id": "web-logs", "name": "n", "min_workers": 1,
                                                   "exec": {"argv": ["true"]}}))
        with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
            s.sendall(b"GET /v1/jobs/web-logs/logs?follow=1 HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
            self.assertTrue(s.recv(64).startswith(b"HTTP/1.1 200"))
            code, answer = curl(port, "/v1/jobs/web-logs/logs?follow=1")
        self.assertEqual((code, answer["error"]["code"]), (503, "UNAVAILABLE"))


if __name__ == "__main__":
    main()
