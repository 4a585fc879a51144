"""kolo-server's writes under contention and shutdown, against a real etcd.

Every job write is a read-modify-write of the job's status and event log, guarded by
compares on their revisions and retried when another writer won. Two replicas scaling
one job at once must lose no update and number its events without a gap or a repeat.
A unary call already running when SIGTERM arrives must finish with its real answer
(here: a CancelJob held up by a paused etcd), not be cut off."""
import os
import signal
import threading
import time
import unittest

import grpc

from test_server_support import Client, Etcd, Server, curl, main, pb, spec, wait_for

CALLS_PER_WRITER = 20


def process_state(pid):
    """The state letter of /proc/PID/stat (R, S, T, ...)."""
    with open("/proc/%d/stat" % pid) as f:
        return f.read().rsplit(")", 1)[1].split()[0]


class RaceTest(unittest.TestCase):
    def setUp(self):
        self.etcd = Etcd()
        self.servers = []
        self.stopped_pid = None

    def tearDown(self):
        if self.stopped_pid:
            os.kill(self.stopped_pid, signal.SIGCONT)
        for s in self.servers:
            s.kill()
        self.etcd.stop()

    def start(self, *args):
        s = Server(self.etcd.url, *args)
        self.servers.append(s)
        return s

    def test_two_replicas_scaling_one_job_at_once_lose_no_update(self):
        a, b = self.start(), self.start()
        first = Client(a.grpc_target)
        first.call("SubmitJob", spec("race-1"))
        wait_for(lambda: _exists(Client(b.grpc_target), "race-1"), 10, "the job on the second replica")
        results = {"a": [], "b": []}
        errors = []
        begin = threading.Barrier(2)

        def writer(server, key, base):
            client = Client(server.grpc_target)
            begin.wait()
            for i in range(CALLS_PER_WRITER):
                wanted = base + i
                try:
                    job = client.call("ScaleJob", pb.ScaleJobRequest(id="race-1", min_workers=1,
                                                                      max_workers=wanted), timeout=30)
                    results[key].append((wanted, job))
                except grpc.RpcError as e:
                    errors.append("%s max=%d: %s %s" % (key, wanted, e.code(), e.details()))
            client.close()

        threads = [threading.Thread(target=writer, args=(a, "a", 100)),
                   threading.Thread(target=writer, args=(b, "b", 200))]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        self.assertEqual(errors, [], "every write retried until it won")

        job = first.call("GetJob", pb.GetJobRequest(id="race-1"))
        seqs = [e.seq for e in job.events]
        self.assertEqual(seqs, list(range(seqs[0], seqs[0] + len(seqs))), "events numbered without gaps")
        scaled = [e.message for e in job.events if e.type == "SCALED"]
        self.assertEqual(len(scaled), 2 * CALLS_PER_WRITER, "one SCALED event per successful call")
        for key in ("a", "b"):
            self.assertEqual(len(results[key]), CALLS_PER_WRITER)
            for wanted, answer in results[key]:
                self.assertEqual(sum(m.endswith("to 1-%d workers" % wanted) for m in scaled), 1,
                                 "the scale to %d recorded once" % wanted)
                # each answer is the job as that write left it (or later)
                self.assertIn("to 1-%d workers" % wanted, " ".join(e.message for e in answer.events))
        self.assertTrue(scaled[-1].endswith("to 1-%d workers" % job.status.max_workers),
                        "the status holds the last write")
        # the chain of "from X to Y" links up: no write started from a state another overwrote
        previous = None
        for message in scaled:
            frm = message.split("from ", 1)[1].split(" to ")[0]
            to = message.split(" to ", 1)[1].split(" ")[0]
            if previous is not None:
                self.assertEqual(frm, previous, "a write based on a stale status: " + message)
            previous = to
        first.close()

    def test_a_call_in_flight_at_sigterm_finishes_with_its_answer(self):
        # The call goes to a replica that does not lead, so no scheduler pass of its own
        # is also waiting on etcd when it stops: what keeps the call alive is the drain.
        leader = self.start("--leader-ttl", "2")
        wait_for(lambda: _is_leader(leader), 15, "the first replica leads")
        srv = self.start("--grace-ms", "8000", "--leader-ttl", "2")
        client = Client(srv.grpc_target)
        client.call("SubmitJob", spec("sig-1"))
        wait_for(lambda: _exists(Client(srv.grpc_target), "sig-1"), 10, "the job on the replica")
        pid = self.etcd.pid()
        os.kill(pid, signal.SIGSTOP)
        self.stopped_pid = pid
        wait_for(lambda: process_state(pid) == "T", 5, "etcd stopped")
        outcome = {}

        def cancel():
            try:
                outcome["job"] = client.call("CancelJob", pb.CancelJobRequest(id="sig-1", reason="bye"),
                                             timeout=20)
            except grpc.RpcError as e:
                outcome["error"] = "%s %s" % (e.code(), e.details())

        caller = threading.Thread(target=cancel)
        caller.start()
        time.sleep(0.7)  # the call is in the server, waiting on etcd
        self.assertTrue(caller.is_alive(), "the call must still be waiting on the paused etcd")
        srv.proc.send_signal(signal.SIGTERM)
        time.sleep(0.5)
        self.assertIsNone(srv.proc.poll(), "the server waits for the call in flight")
        os.kill(pid, signal.SIGCONT)
        self.stopped_pid = None
        caller.join(30)
        self.assertNotIn("error", outcome, outcome.get("error"))
        self.assertEqual(outcome["job"].status.phase, pb.CANCELLED)
        self.assertEqual(srv.terminate(timeout=20), 0)
        client.close()
        # the write really happened: a new server reads it back from etcd
        again = self.start()
        c2 = Client(again.grpc_target)
        self.assertEqual(c2.call("GetJob", pb.GetJobRequest(id="sig-1")).status.phase, pb.CANCELLED)
        c2.close()


def _is_leader(server):
    code, body = curl(server.http_port, "/readyz")
    return code == 200 and isinstance(body, dict) and body.get("is_leader")


def _exists(client, job_id):
    try:
        return client.call("GetJob", pb.GetJobRequest(id=job_id)).id == job_id
    except grpc.RpcError:
        return False
    finally:
        client.close()


if __name__ == "__main__":
    main()
