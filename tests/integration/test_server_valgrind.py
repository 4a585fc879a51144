"""kolo-server's shutdown is valgrind-clean under a little load: the server runs under
memcheck against a real etcd, serves submits, reads, lists and an open WatchJob from
several threads, gets SIGTERM mid-load, and must exit 0 with no memory errors and no
definite leaks (valgrind's --error-exitcode would make it 99).
Label "nosan": valgrind cannot run an ASan-instrumented binary."""
import threading
import time
import unittest

import grpc

from test_server_support import Client, Etcd, Server, main, pb, spec, wait_for

VALGRIND = ["valgrind", "--quiet", "--error-exitcode=99", "--leak-check=full", "--errors-for-leak-kinds=definite",
            "--show-leak-kinds=definite", "--track-origins=no", "--num-callers=30"]


class ValgrindTest(unittest.TestCase):
    def test_shutdown_under_load_is_valgrind_clean(self):
        etcd = Etcd()
        server = None
        try:
            server = Server(etcd.url, "--threads", "3", "--grace-ms", "3000", wrapper=VALGRIND)
            client = Client(server.grpc_target)
            wait_for(lambda: _ok(client), 60, "the server under valgrind to answer")
            client.call("SubmitJob", spec("v-watch"), timeout=30)
            stream = client.watch("v-watch")
            self.assertEqual(next(stream).id, "v-watch")
            stop = threading.Event()
            counts = []

            def load(n):
                c = Client(server.grpc_target)
                done = 0
                while not stop.is_set():
                    try:
                        c.call("SubmitJob", spec("v-%d-%d" % (n, done)), timeout=30)
                        c.call("GetJob", pb.GetJobRequest(id="v-%d-%d" % (n, done)), timeout=30)
                        c.call("ListJobs", pb.ListJobsRequest(page_size=5), timeout=30)
                        done += 1
                    except grpc.RpcError:
                        break
                counts.append(done)
                c.close()

            threads = [threading.Thread(target=load, args=(n,)) for n in range(3)]
            for t in threads:
                t.start()
            time.sleep(3)
            code = server.terminate(timeout=90)
            stop.set()
            for t in threads:
                t.join(30)
            client.close()
            log = server.read_log()
            self.assertGreater(sum(counts), 0, log)
            self.assertEqual(code, 0, "valgrind/kolo-server exit %d:\n%s" % (code, log[-8000:]))
            self.assertNotIn("definitely lost", log)
        finally:
            if server:
                server.kill()
            etcd.stop()


def _ok(client):
    try:
        client.call("ListJobs", pb.ListJobsRequest(), timeout=10)
        return True
    except grpc.RpcError:
        return False


if __name__ == "__main__":
    main()
