"""kolo-server's dashboard paths are valgrind-clean on shutdown: under memcheck against a real
etcd, with the metrics recorder writing points (progress written into etcd as the scheduler
writes it) and server-sent event streams open on every topic — one of them a client that
stopped reading — SIGTERM must end the streams and exit 0 with no memory errors and no
definite leaks. Label "nosan": valgrind cannot run an ASan-instrumented binary."""
import json
import socket
import time
import unittest

from test_server_metrics import EtcdJson, status
from test_server_support import Client, Etcd, Server, curl, main, spec, wait_for
from test_server_valgrind import VALGRIND


class StreamValgrindTest(unittest.TestCase):
    def test_streams_and_the_recorder_shut_down_valgrind_clean(self):
        etcd = Etcd()
        server = None
        socks = []
        try:
            server = Server(etcd.url, "--metrics-interval-ms", "200", "--metrics-points", "5", "--grace-ms", "500",
                            wrapper=VALGRIND)
            client = Client(server.grpc_target)
            wait_for(lambda: curl(server.http_port, "/readyz")[0] == 200, 90, "the server under valgrind")
            client.call("SubmitJob", spec("vs-1"), timeout=30)
            for query in ("jobs=1&workers=1", "job=vs-1", "job=no-such", "jobs=1"):
                s = socket.create_connection(("127.0.0.1", server.http_port), timeout=30)
                s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
                s.sendall(("GET /v1/stream?%s HTTP/1.1\r\nHost: v\r\n\r\n" % query).encode())
                socks.append(s)
            kv = EtcdJson(etcd.url)
            for step in range(1, 40):  # points, thinning, events on every stream
                kv.put("/kolo/v1/jobs/vs-1/status", status(step * 10))
                time.sleep(0.05)
            for s in socks[:3]:  # read what came; the last socket never reads
                s.settimeout(5)
                self.assertIn(b"event: ", s.recv(65536))
            wait_for(lambda: len(curl(server.http_port, "/v1/jobs/vs-1/metrics")[1]["points"]) >= 3, 60, "points")
            code = server.terminate(timeout=120)
            log = server.read_log()
            self.assertEqual(code, 0, "valgrind/kolo-server exit %d:\n%s" % (code, log[-8000:]))
            self.assertNotIn("definitely lost", log)
            self.assertNotIn("Invalid read", log)
            client.close()
        finally:
            for s in socks:
                s.close()
            if server:
                server.kill()
            etcd.stop()


if __name__ == "__main__":
    main()
