"""kolo-server's HTTP front end (server/http_front.c, server/http_frame.c): whatever bytes a
client sends, every answer is kolo's JSON error body {"error":{"code","message"}} with the
right status, and the connection is closed after a framing error, once the requests before
it got their normal answers (issue #12 item 7: libmicrohttpd answered these itself with
HTML pages). Also what must not change: keep-alive, pipelining, chunked and large bodies,
a client that half-closes, a request trickled a byte at a time, requests at kolo's limits.
Real etcd, a real kolo-server on 127.0.0.1 port 0, raw sockets (and openssl s_client-free
TLS through Python's ssl module against --tls-cert/--tls-key)."""
import json
import os
import shutil
import socket
import ssl
import subprocess
import tempfile
import time
import unittest

from test_server_support import Client, Etcd, Server, main, pb, spec


def read_all(conn, timeout=15):
    """Reads until the server closes; fails if it does not within timeout."""
    conn.settimeout(timeout)
    data = b""
    deadline = time.monotonic() + timeout
    while True:
        try:
            chunk = conn.recv(65536)
        except (ConnectionResetError, ssl.SSLError):
            break
        if not chunk:
            break
        data += chunk
        if time.monotonic() > deadline:
            raise AssertionError("the server did not close the connection: %r" % data[-200:])
    return data


def parse_responses(data):
    """Splits a byte stream into [(status, headers dict lower-case, body bytes)]."""
    out = []
    while data:
        head, sep, rest = data.partition(b"\r\n\r\n")
        if not sep:
            raise AssertionError("an incomplete answer: %r" % data[:300])
        lines = head.decode("latin-1").split("\r\n")
        status = int(lines[0].split()[1])
        headers = {}
        for line in lines[1:]:
            k, _, v = line.partition(":")
            headers[k.strip().lower()] = v.strip()
        if headers.get("transfer-encoding", "").lower() == "chunked":
            body = b""
            while True:
                size_line, _, rest = rest.partition(b"\r\n")
                size = int(size_line.split(b";")[0], 16)
                body += rest[:size]
                rest = rest[size + 2:]
                if size == 0:
                    break
        else:
            n = int(headers.get("content-length", "0"))
            body, rest = rest[:n], rest[n:]
        out.append((status, headers, body))
        data = rest
    return out


class FrontEndTest(unittest.TestCase):
    tls = False

    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp(prefix="kolo-front-")
        extra = []
        if cls.tls:
            cert, key = os.path.join(cls.dir, "cert.pem"), os.path.join(cls.dir, "key.pem")
            subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj",
                            "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", key,
                            "-out", cert], check=True, capture_output=True)
            extra = ["--tls-cert", cert, "--tls-key", key]
            cls.ctx = ssl.create_default_context(cafile=cert)
        cls.etcd = Etcd()
        try:
            cls.srv = Server(cls.etcd.url, *extra)
        except Exception:
            cls.etcd.stop()
            raise
        cls.client = Client(cls.srv.grpc_target) if not cls.tls else None

    @classmethod
    def tearDownClass(cls):
        if cls.client:
            cls.client.close()
        code = cls.srv.terminate()
        cls.etcd.stop()
        shutil.rmtree(cls.dir, ignore_errors=True)
        assert code == 0, code

    def connect(self):
        conn = socket.create_connection(("127.0.0.1", self.srv.http_port), timeout=15)
        if self.tls:
            conn = self.ctx.wrap_socket(conn, server_hostname="127.0.0.1")
        return conn

    def exchange(self, data, pieces=None, half_close=False):
        """Sends data (in pieces of that many bytes with pauses, if given), reads to the close."""
        with self.connect() as conn:
            if pieces:
                for i in range(0, len(data), pieces):
                    conn.sendall(data[i:i + pieces])
                    time.sleep(0.002)
            else:
                conn.sendall(data)
            if half_close:
                conn.shutdown(socket.SHUT_WR)
            return parse_responses(read_all(conn))

    def assertJsonError(self, answer, status, code=None, contains=None):
        got, headers, body = answer
        self.assertEqual(got, status, (headers, body))
        self.assertIn("application/json", headers.get("content-type", ""), (headers, body))
        err = json.loads(body)["error"]
        self.assertIsInstance(err["message"], str)
        self.assertTrue(err["message"])
        if code:
            self.assertEqual(err["code"], code, err)
        if contains:
            self.assertIn(contains, err["message"])

    HEALTH = b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"

    BAD = [
        # (what, request bytes, status, code, message part)
        ("malformed Content-Length", b"POST /v1/jobs HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 12abc\r\n\r\n{}", 400,
         "INVALID_ARGUMENT", "Content-Length"),
        ("negative Content-Length", b"POST /v1/jobs HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: -5\r\n\r\n", 400,
         "INVALID_ARGUMENT", "Content-Length"),
        ("Content-Length past 64 bits", b"POST /v1/jobs HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: "
         b"123456789012345678901234567890\r\n\r\n", 413, "RESOURCE_EXHAUSTED", "Content-Length"),
        ("two Content-Lengths", b"POST /v1/jobs HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 2\r\nContent-Length: 3\r\n"
         b"\r\n{}", 400, "INVALID_ARGUMENT", "more than one Content-Length"),
        ("Content-Length and chunked", b"POST /v1/jobs HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 2\r\n"
         b"Transfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n", 400, "INVALID_ARGUMENT", "both"),
        ("malformed chunk size", b"POST /v1/jobs HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
         b"xyz\r\n{}\r\n0\r\n\r\n", 400, "INVALID_ARGUMENT", "chunk size"),
        ("chunk longer than its size", b"POST /v1/jobs HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
         b"2\r\n{}}}\r\n0\r\n\r\n", 400, "INVALID_ARGUMENT", "chunk data longer"),
        ("chunk size past 64 bits", b"POST /v1/jobs HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
         b"fffffffffffffffffffff\r\n", 413, "RESOURCE_EXHAUSTED", "chunk size"),
        ("bad trailer", b"POST /v1/jobs HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
         b"2\r\n{}\r\n0\r\nno colon here\r\n\r\n", 400, "INVALID_ARGUMENT", "header name"),
        ("unsupported Transfer-Encoding", b"POST /v1/jobs HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nTransfer-Encoding: gzip\r\n\r\n",
         501, "UNIMPLEMENTED", "Transfer-Encoding"),
        ("HTTP/2.0", b"GET /healthz HTTP/2.0\r\nHost: x\r\n\r\n", 505, "UNIMPLEMENTED", "HTTP/2.0"),
        ("HTTP/0.9 version", b"GET /healthz HTTP/0.9\r\n\r\n", 505, "UNIMPLEMENTED", "not supported"),
        ("no version", b"GET /healthz\r\n\r\n", 400, "INVALID_ARGUMENT", None),
        ("malformed version", b"GET /healthz HTTP/1.1.1\r\nHost: x\r\n\r\n", 400, "INVALID_ARGUMENT", "version"),
        ("header line without a colon", b"GET /healthz HTTP/1.1\r\nHost: x\r\nnocolon\r\n\r\n", 400,
         "INVALID_ARGUMENT", "header name"),
        ("space before the colon", b"GET /healthz HTTP/1.1\r\nHost : x\r\n\r\n", 400, "INVALID_ARGUMENT", None),
        ("folded header", b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-A: 1\r\n 2\r\n\r\n", 400, "INVALID_ARGUMENT",
         "obs-fold"),
        ("bare LF", b"GET /healthz HTTP/1.1\r\nHost: x\nX: 1\r\n\r\n", 400, "INVALID_ARGUMENT", None),
        ("NUL in a header", b"GET /healthz HTTP/1.1\r\nHost: x\x00y\r\n\r\n", 400, "INVALID_ARGUMENT", None),
        ("garbage", b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03", 400, "INVALID_ARGUMENT", None),
        ("space in the target", b"GET /a b HTTP/1.1\r\nHost: x\r\n\r\n", 400, "INVALID_ARGUMENT", None),
        ("URI past libmicrohttpd's buffer", b"GET /" + b"u" * 200000 + b" HTTP/1.1\r\nHost: x\r\n\r\n", 414,
         "INVALID_ARGUMENT", "request URI of more than"),
        ("headers past libmicrohttpd's buffer", b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: " + b"b" * 200000 +
         b"\r\n\r\n", 431, "INVALID_ARGUMENT", "request headers of more than"),
        ("too many header fields", b"GET /healthz HTTP/1.1\r\n" + b"".join(b"X-%d: 1\r\n" % i for i in range(150)) +
         b"\r\n", 431, "INVALID_ARGUMENT", "header fields"),
        ("too many query arguments", b"GET /v1/jobs?" + b"&".join(b"a%d=1" % i for i in range(150)) +
         b" HTTP/1.1\r\nHost: x\r\n\r\n", 414, "INVALID_ARGUMENT", "query arguments"),
        ("too many cookies", b"GET /healthz HTTP/1.1\r\nHost: x\r\nCookie: " +
         b"; ".join(b"c%d=1" % i for i in range(150)) + b"\r\n\r\n", 431, "INVALID_ARGUMENT", "cookies"),
    ]

    def test_each_malformed_framing_is_answered_in_json_and_the_connection_closed(self):
        for what, data, status, code, contains in self.BAD:
            with self.subTest(what):
                answers = self.exchange(data)  # exchange() fails unless the server closes
                self.assertEqual(len(answers), 1, (what, answers))
                self.assertJsonError(answers[0], status, code, contains)
                self.assertEqual(answers[0][1].get("connection"), "close", what)

    def test_good_requests_pipelined_before_a_bad_one_get_their_normal_answers_first(self):
        for what, bad, status, code, contains in self.BAD[:12]:
            with self.subTest(what):
                answers = self.exchange(self.HEALTH + b"GET /v1/jobs HTTP/1.1\r\nHost: x\r\n\r\n" + bad)
                self.assertEqual([a[0] for a in answers], [200, 200, status], what)
                self.assertEqual(json.loads(answers[0][2]), {"status": "ok"})
                self.assertIn("jobs", json.loads(answers[1][2]))
                self.assertJsonError(answers[2], status, code, contains)

    def test_a_broken_chunked_submit_stores_nothing(self):
        body = json.dumps({"id": "chunky-bad", "name": "x", "min_workers": 1,
                           "builtin": {"model": "mlp", "dataset": {"synthetic": {"samples": 10}}}}).encode()
        half = len(body) // 2
        data = (b"POST /v1/jobs HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n" +
                b"%x\r\n" % half + body[:half] + b"\r\nzz\r\n")
        answers = self.exchange(data)
        self.assertJsonError(answers[-1], 400, "INVALID_ARGUMENT", "chunk size")
        listed = self.exchange(b"GET /v1/jobs HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        self.assertNotIn(b"chunky-bad", listed[0][2])

    def test_keep_alive_pipelining_and_chunked_bodies_still_work(self):
        with self.connect() as conn:
            conn.sendall(self.HEALTH + self.HEALTH)
            conn.settimeout(10)
            got = b""
            while got.count(b'{"status":"ok"}') < 2:
                got += conn.recv(65536)
            # the connection stays open: one more request on it, a chunked POST this time
            conn.sendall(b"POST /v1/jobs:list HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
                         b"1\r\n{\r\n1;ext=1\r\n}\r\n0\r\nX-Trailer: t\r\n\r\n"
                         b"GET /v1/nothing HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            answers = parse_responses(got + read_all(conn))
        self.assertEqual([a[0] for a in answers][:2], [200, 200])
        self.assertIn(answers[2][0], (200, 404, 405))  # whatever the router says to a POST there
        self.assertIn("application/json", answers[2][1].get("content-type", ""))
        self.assertJsonError(answers[3], 404)

    def test_a_half_closed_client_a_trickled_request_and_a_large_body_are_answered(self):
        if not self.tls:  # over TLS a half-close is a close_notify, which the ssl module cannot send alone
            answers = self.exchange(self.HEALTH, half_close=True)
            self.assertEqual([a[0] for a in answers], [200])
        answers = self.exchange(b"GET /healthz HTTP/1.1\r\nConnection: close\r\n\r\n")  # no Host: accepted
        self.assertEqual([a[0] for a in answers], [200])
        answers = self.exchange(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", pieces=1)
        self.assertEqual(json.loads(answers[0][2]), {"status": "ok"})
        big = b"[" + b"1," * (1 << 20) + b"1]"  # 2 MiB of JSON that is no job spec
        answers = self.exchange(b"POST /v1/jobs HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nConnection: close\r\n"
                                b"Content-Length: %d\r\n\r\n" % len(big) + big)
        self.assertJsonError(answers[0], 400, "INVALID_ARGUMENT")
        over = b" " * (5 << 20)  # past --max-message-bytes (4 MiB): kolo's own 413
        answers = self.exchange(b"POST /v1/jobs HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nConnection: close\r\n"
                                b"Content-Length: %d\r\n\r\n" % len(over) + over)
        self.assertJsonError(answers[0], 413, None, "byte limit")

    def test_large_answers_pipelined_and_read_slowly_arrive_whole_and_in_order(self):
        """The relay's buffers are smaller than the answers: backpressure, not loss."""
        with open(os.path.join(os.environ.get("KOLO_SOURCE_DIR", "."), "server/ui/app.js"), "rb") as f:
            app = f.read()
        self.assertGreater(len(app), 16384)
        get = b"GET /ui/app.js HTTP/1.1\r\nHost: x\r\n\r\n"
        with self.connect() as conn:
            conn.sendall(get * 3 + self.HEALTH.replace(b"\r\n\r\n", b"\r\nConnection: close\r\n\r\n"))
            conn.settimeout(15)
            data = b""
            while True:
                chunk = conn.recv(3000)
                if not chunk:
                    break
                data += chunk
                time.sleep(0.005)
        answers = parse_responses(data)
        self.assertEqual([a[0] for a in answers], [200, 200, 200, 200])
        self.assertTrue(all(a[2] == app for a in answers[:3]))
        self.assertEqual(json.loads(answers[3][2]), {"status": "ok"})

    def test_a_client_sending_without_end_does_not_hold_up_the_others(self):
        """One thread serves every connection: an endless chunked body must not starve it."""
        import threading
        stop = threading.Event()
        conn = self.connect()

        def flood():
            chunk = b"10000\r\n" + b"x" * 0x10000 + b"\r\n"
            try:
                conn.sendall(b"POST /v1/jobs HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n")
                while not stop.is_set():
                    conn.sendall(chunk)
            except OSError:
                pass

        sender = threading.Thread(target=flood)
        sender.start()
        try:
            time.sleep(0.5)
            worst = 0.0
            for _ in range(5):
                t = time.monotonic()
                answers = self.exchange(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
                worst = max(worst, time.monotonic() - t)
                self.assertEqual(json.loads(answers[0][2]), {"status": "ok"})
            self.assertLess(worst, 5.0)
        finally:
            stop.set()
            conn.close()
            sender.join(10)

    def test_many_clients_at_once_resetting_streaming_and_pipelining_are_all_served(self):
        """The one event thread under churn: connections reset, streams opened and dropped,
        good requests pipelined before bad ones, requests split at random. Under ASan this
        found a freed connection's endpoint read in a later event of the same epoll batch."""
        import random
        import threading
        errors = []

        def client(seed):
            rnd = random.Random(seed)
            for _ in range(40):
                try:
                    with self.connect() as conn:
                        kind = rnd.random()
                        if kind < 0.3:
                            conn.sendall(self.HEALTH * rnd.randint(1, 4) + rnd.choice(self.BAD[:12])[1])
                            answers = parse_responses(read_all(conn))
                            if answers[-1][0] < 400:
                                errors.append(("no error answer", answers[-1][0]))
                        elif kind < 0.5:
                            conn.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
                            conn.recv(100)
                            conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\0\0\0\0\0\0\0")  # reset
                        elif kind < 0.7:
                            conn.sendall(b"GET /v1/stream?jobs=1 HTTP/1.1\r\nHost: x\r\n\r\n")
                            conn.recv(100)
                        else:
                            data = self.HEALTH + b"GET /v1/jobs HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
                            cut = rnd.randint(0, len(data))
                            conn.sendall(data[:cut])
                            time.sleep(0.001)
                            conn.sendall(data[cut:])
                            if [a[0] for a in parse_responses(read_all(conn))] != [200, 200]:
                                errors.append("a split pipeline lost an answer")
                except (OSError, AssertionError, ValueError) as e:
                    errors.append(repr(e))

        threads = [threading.Thread(target=client, args=(seed,)) for seed in range(12)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        self.assertEqual(errors, [])
        answers = self.exchange(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        self.assertEqual(json.loads(answers[0][2]), {"status": "ok"})

    def test_a_request_at_every_limit_at_once_gets_kolos_answer(self):
        """8 KiB of URI with 100 query arguments, 100 header fields (one a Cookie of 100 pairs),
        16 KiB of header bytes: all within kolo's limits, so libmicrohttpd must parse it (its
        memory pool holds every argument, header and cookie) and kolo answers, in JSON."""
        args = b"&".join(b"a%02d=" % i + b"v" * 70 for i in range(100))
        target = b"/v1/nothing?" + args
        target += b"x" * (8192 - len(target))
        fields = [b"Cookie: " + b"; ".join(b"c%02d=1" % i for i in range(100))]
        fields += [b"X-F%02d: " % i + b"h" * 140 for i in range(98)]
        head = b"GET " + target + b" HTTP/1.1\r\n" + b"".join(f + b"\r\n" for f in fields)
        used = sum(len(f) + 2 for f in fields)  # name: value + CRLF ~ libmicrohttpd's name + value + 4
        self.assertLess(used, 16384)
        self.assertEqual(len(target), 8192)
        answers = self.exchange(head + b"Connection: close\r\n\r\n")
        self.assertJsonError(answers[0], 404)


class FrontEndTlsTest(FrontEndTest):
    """All of the above over HTTPS: the front end terminates TLS itself (GnuTLS)."""
    tls = True
    # a TLS record header is what a TLS client sends first: that one is a failed handshake
    BAD = [b for b in FrontEndTest.BAD if b[0] != "garbage"]

    def test_plain_http_to_the_tls_port_is_a_plain_json_400(self):
        with socket.create_connection(("127.0.0.1", self.srv.http_port), timeout=15) as conn:
            conn.sendall(self.HEALTH)
            answers = parse_responses(read_all(conn))
        self.assertEqual(len(answers), 1)
        self.assertJsonError(answers[0], 400, "INVALID_ARGUMENT", "HTTPS")

    def test_a_failed_handshake_is_closed_and_the_port_still_serves(self):
        with socket.create_connection(("127.0.0.1", self.srv.http_port), timeout=15) as conn:
            conn.sendall(b"\x16\x03\x01\x00\x05hello-not-tls")
            self.assertNotIn(b"HTTP/1.1", read_all(conn))
        answers = self.exchange(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        self.assertEqual(json.loads(answers[0][2]), {"status": "ok"})


class OutOfDescriptorsTest(unittest.TestCase):
    """A server out of file descriptors answers new clients 503 in JSON without spinning,
    and serves again once clients leave (it runs under a 96-descriptor limit; each client
    with a request in flight holds three: its socket and a socketpair to libmicrohttpd)."""

    def test_clients_past_the_descriptor_limit_get_503_json_and_service_comes_back(self):
        etcd = Etcd()
        try:
            srv = Server(etcd.url, wrapper=["prlimit", "--nofile=96:96"])
            try:
                conns, refused = [], []
                for _ in range(60):
                    conn = socket.create_connection(("127.0.0.1", srv.http_port), timeout=10)
                    conns.append(conn)
                    # a request whose body never comes: it stays in flight at libmicrohttpd
                    conn.sendall(b"POST /v1/jobs HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 10\r\n\r\n")
                    conn.settimeout(0.3)
                    try:
                        data = conn.recv(65536)
                    except socket.timeout:
                        continue
                    if data:
                        refused.append(parse_responses(data + read_all(conn, timeout=10)))
                self.assertGreater(len(refused), 0, "every client was taken under a 96-descriptor limit")
                for answers in refused:
                    self.assertEqual(len(answers), 1)
                    self.assertEqual(answers[0][0], 503)
                    self.assertEqual(json.loads(answers[0][2])["error"]["code"], "UNAVAILABLE")
                with open("/proc/%d/stat" % srv.proc.pid) as f:
                    before = sum(int(v) for v in f.read().split(")")[1].split()[11:13])
                time.sleep(2)
                with open("/proc/%d/stat" % srv.proc.pid) as f:
                    after = sum(int(v) for v in f.read().split(")")[1].split()[11:13])
                self.assertLess((after - before) / os.sysconf("SC_CLK_TCK"), 1.0)  # no busy loop
                for conn in conns:
                    conn.close()
                deadline = time.monotonic() + 10
                while True:
                    try:
                        with socket.create_connection(("127.0.0.1", srv.http_port), timeout=10) as conn:
                            conn.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
                            answers = parse_responses(read_all(conn))
                        if answers and answers[0][0] == 200:
                            break
                    except OSError:
                        pass
                    self.assertLess(time.monotonic(), deadline, "the server did not serve again")
                    time.sleep(0.2)
            finally:
                self.assertEqual(srv.terminate(), 0)
        finally:
            etcd.stop()



class FullFrontEndTest(unittest.TestCase):
    def test_sigterm_with_the_front_end_full_of_requests_in_flight_exits_0(self):
        """4096 clients each with a request in flight at libmicrohttpd (its body never comes),
        a 4097th refused with kolo's 503, then SIGTERM: kolo-server must exit 0. libmicrohttpd's own limit used to be the front
        end's (4096), and a pool thread at its limit deadlocked in MHD_stop_daemon."""
        import resource
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        if soft < 5000:
            resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 8192), hard))
        srv = Server("none", "--http-threads", "2")
        conns = []
        try:
            for _ in range(4096):
                conn = socket.create_connection(("127.0.0.1", srv.http_port), timeout=10)
                conn.sendall(b"POST /v1/jobs HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 10\r\n\r\n")
                conns.append(conn)
            time.sleep(0.5)  # every one handed to libmicrohttpd
            with socket.create_connection(("127.0.0.1", srv.http_port), timeout=10) as conn:  # past the limit
                conn.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
                answers = parse_responses(read_all(conn))
            self.assertEqual(answers[0][0], 503)
            self.assertEqual(json.loads(answers[0][2])["error"]["code"], "UNAVAILABLE")
        finally:
            code = srv.terminate(timeout=30)
            for conn in conns:
                conn.close()
        self.assertEqual(code, 0)


if __name__ == "__main__":
    main()
