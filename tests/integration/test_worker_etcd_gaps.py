"""What kolo-worker and the scheduler do across gaps in etcd, with real etcd, kolo-server
and kolo-workers on 127.0.0.1 (every wait has a deadline); both cases were jobs stuck
RUNNING for ever before their fix.

- A worker whose etcd lease expired is a new worker, even under the same id (test_chaos,
  seed 1365150667, found the contrary). etcd paused past the workers' lease TTL expires
  their leases when it resumes; each kolo-worker then stops its training process and
  registers again under its id within milliseconds. A scheduler that judged members by
  their id alone never saw them missing (here the leading kolo-server is paused over that
  gap, as a busy or re-electing leader may be), so the job stayed RUNNING with no process
  left. The ring record names each member's lease; a member whose record now has another
  lease is lost, the job re-forms on the workers that came back and ends SUCCEEDED with an
  exact result.
- A report the agent cannot write (etcd down when the process exits) is written once etcd
  is back: before, only progress reports were retried, so a job whose only process exited
  during an outage never ended. Its workers run with --partition-fence=off: the fence (on by
  default) would pause the process before it could exit in the outage, which is the point
  here (docs/ELASTIC.md, "etcd outages")."""
import json
import os
import shutil
import signal
import socket
import tempfile
import time
import unittest

from kolo_cluster import Worker
from test_server_support import TESTS, Etcd, Server, curl, main, wait_for

STEPS = 600  # 20 ms a step: long enough to still run when the leases expire


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def registrations(w):
    """How many times the agent registered (its own line, not membership's)."""
    return w.read_log().count("registered worker %s at 127.0.0.1:" % w.id)


class EtcdGaps(unittest.TestCase):
    def setUp(self):
        # the exit case needs a process that can exit while etcd is down: no partition fence
        fence = ["--partition-fence=off"] if "exit_report" in self.id() else []
        self.root = tempfile.mkdtemp(prefix="kolo-lease-")
        self.etcd = Etcd()
        self.paused = []
        # the leader's own lease outlives the pause: only the workers' expire
        self.server = Server(self.etcd.url, "--leader-ttl", "60")
        self.workers = [Worker(self.etcd.url, "gw%d" % i, "127.0.0.1", free_port(), self.root, *fence)
                        for i in range(2)]
        for w in self.workers:
            wait_for(lambda: registrations(w) >= 1, 30, "%s registered" % w.id)

    def tearDown(self):
        for pid in self.paused:
            try:
                os.kill(pid, signal.SIGCONT)
            except ProcessLookupError:
                pass
        for w in self.workers:
            w.kill(signal.SIGTERM)
        self.server.terminate()
        self.etcd.stop()
        if os.environ.get("KOLO_KEEP_CLUSTER") == "1":  # as tests/python/cluster.py: keep the logs
            print("logs kept in " + self.root)
        else:
            shutil.rmtree(self.root, ignore_errors=True)

    def pause(self, pid):
        os.kill(pid, signal.SIGSTOP)
        self.paused.append(pid)

    def resume(self, pid):
        os.kill(pid, signal.SIGCONT)
        self.paused.remove(pid)

    def job(self, job_id):
        code, body = curl(self.server.http_port, "/v1/jobs/" + job_id)
        return body if code == 200 else None

    def events(self, job_id):
        code, body = curl(self.server.http_port, "/v1/jobs/%s/events" % job_id)
        return body.get("events", []) if code == 200 else []

    def diagnosis(self, job_id):
        lines = ["job: %s" % json.dumps(self.job(job_id))]
        lines += ["event %s %s epoch %s: %s" % (e.get("seq"), e.get("type"), e.get("epoch"), e.get("message"))
                  for e in self.events(job_id)]
        for w in self.workers:
            lines += ["--- %s" % w.id] + w.read_log().splitlines()[-12:]
        return "\n".join(lines)

    def test_a_job_whose_members_came_back_under_new_leases_re_forms_and_succeeds(self):
        job_id = "lease-loss"
        result = os.path.join(self.root, "result")
        spec = {"id": job_id, "name": job_id, "min_workers": 1, "max_workers": 2,
                "exec": {"argv": [os.path.join(TESTS, "elastic_loop"), str(STEPS), "1000", "5", "20"],
                         "env": {"KOLO_RESULT_FILE": result}}}
        code, body = curl(self.server.http_port, "/v1/jobs", "POST", json.dumps(spec))
        self.assertEqual(code, 200, body)

        def running_on_both():
            job = self.job(job_id)
            st = job["status"] if job else {}
            return (st.get("phase") == "RUNNING" and len(st.get("members", [])) == 2 and
                    int(st.get("progress", {}).get("step", 0)) >= 10)
        wait_for(running_on_both, 60, "the job running on both workers", interval=0.2)
        for w in self.workers:
            self.assertEqual(registrations(w), 1)

        # The leader does not look while etcd is away and the workers come back.
        self.pause(self.server.proc.pid)
        etcd_pid = self.etcd.pid()
        self.pause(etcd_pid)
        time.sleep(4.5)  # past the workers' lease TTL (2 s): etcd expires the leases when it resumes
        self.resume(etcd_pid)
        for w in self.workers:
            wait_for(lambda: registrations(w) >= 2, 30,
                     "%s registered again under a new lease" % w.id)
        time.sleep(0.5)
        self.resume(self.server.proc.pid)

        try:
            job = wait_for(lambda: (lambda j: j if j and j["status"]["phase"] in ("SUCCEEDED", "FAILED") else None)(
                self.job(job_id)), 90, "the job to end", interval=0.2)
        except AssertionError as error:
            self.fail("%s\n%s" % (error, self.diagnosis(job_id)))
        self.assertEqual(job["status"]["phase"], "SUCCEEDED", self.diagnosis(job_id))
        lost = [e for e in self.events(job_id) if e.get("type") == "WORKER_LOST"]
        self.assertTrue(any("its lease expired and it registered again" in e.get("message", "") for e in lost),
                        self.diagnosis(job_id))
        with open(result) as f:
            results = [line.split() for line in f if line.startswith("RESULT ")]
        self.assertTrue(results, self.diagnosis(job_id))
        for r in results:
            self.assertEqual((r[1], r[-1]), (str(STEPS), "exact"), results)


    def test_an_exit_report_written_while_etcd_is_down_reaches_the_scheduler_later(self):
        job_id = "exit-in-outage"
        mark = os.path.join(self.root, "started")
        spec = {"id": job_id, "name": job_id, "min_workers": 1, "max_workers": 1,
                "exec": {"argv": ["/bin/sh", "-c", "touch %s; sleep 3" % mark]}}
        code, body = curl(self.server.http_port, "/v1/jobs", "POST", json.dumps(spec))
        self.assertEqual(code, 200, body)
        wait_for(lambda: os.path.exists(mark), 60, "the job's process to start")
        time.sleep(0.5)  # the agent wrote its start report
        self.etcd.command("kill")
        try:
            wait_for(lambda: any("process of job %s exited with code 0" % job_id in w.read_log() and
                                 "cannot write report /kolo/v1/jobs/%s/" % job_id in w.read_log()
                                 for w in self.workers), 20, "the process to exit while etcd is down")
        finally:
            self.etcd.command("start")
        try:
            job = wait_for(lambda: (lambda j: j if j and j["status"]["phase"] in ("SUCCEEDED", "FAILED") else None)(
                self.job(job_id)), 60, "the job to end", interval=0.2)
        except AssertionError as error:
            self.fail("%s\n%s" % (error, self.diagnosis(job_id)))
        self.assertEqual(job["status"]["phase"], "SUCCEEDED", self.diagnosis(job_id))

if __name__ == "__main__":
    main()
