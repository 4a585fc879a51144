#!/usr/bin/python3
"""kolo's chaos suite: a real cluster (etcd, two kolo-server replicas, several
kolo-workers) runs elastic_loop exec jobs (exact results) and a builtin kolo-train
job (a fixed step count) while random faults hit it for a bounded time: SIGKILL and
SIGSTOP/SIGCONT of workers, of training processes, of the leading server and of etcd
(restarted on the same data dir). Afterwards every fault is undone and the suite
checks what a user is promised:

  - every job that was submitted exists, with its spec, and ends in a final phase
    (SUCCEEDED: nothing here is meant to fail);
  - every elastic_loop job's result is exact (no step lost or counted twice) and
    every builtin job reached exactly its step count;
  - no event is lost: each job's events are numbered 1..n without a gap, start with
    SUBMITTED and end with the job's end;
  - no process and no /dev/shm object is left behind once the cluster is stopped.

Seeded: the seed is printed first and KOLO_CHAOS_SEED=<seed> replays the same
sequence of faults (timing on a loaded machine still varies).
KOLO_CHAOS_SECONDS sets how long faults are injected (default 45: CI's short run);
docs/CHAOS.md describes the longer run. Exits 0 when every check holds, 1 with the
list of violations, and prints a summary table either way."""
import base64
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
import urllib.request

SRC = os.environ.get("KOLO_SOURCE_DIR", os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
sys.path.insert(0, os.path.join(SRC, "tests", "integration"))
sys.path.insert(0, os.path.join(SRC, "tests", "python"))

from kolo_cluster import Worker  # noqa: E402
from kolotest import free_port  # noqa: E402  (with hold: kept bound while a worker is down)
from test_server_support import BIN, TESTS, Etcd, Server, curl, wait_for  # noqa: E402

FINAL = ("SUCCEEDED", "FAILED", "CANCELLED")
TTL = "2"
TRAIN_STEPS = 1500


def log(fmt, *args):
    print("chaos %7.2fs: %s" % (time.monotonic() - START, fmt % args if args else fmt), flush=True)


START = time.monotonic()


def children(pid):
    """Pids whose parent is pid (a worker's training processes)."""
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % entry) as f:
                fields = f.read().rsplit(")", 1)[1].split()
            if int(fields[1]) == pid and fields[0] != "Z":
                out.append(int(entry))
        except (OSError, IndexError, ValueError):
            continue
    return out


def cmdline(pid):
    try:
        with open("/proc/%d/cmdline" % pid, "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return ""


def alive(pid):
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


class Chaos:
    def __init__(self, seed, seconds):
        self.rng = random.Random(seed)
        self.seed = seed
        self.seconds = seconds
        self.root = os.path.join("/tmp", "kolo-chaos-%d-%d" % (os.getpid(), seed))
        os.makedirs(self.root, exist_ok=True)
        self.etcd = Etcd()
        self.all_servers = []  # every replica started, for their logs
        self.servers = [self.start_server(), self.start_server()]
        self.workers = {}
        self.ports = {}
        self.held = []  # the data-plane ports, for the run (free_port)
        self.health_ports = {}
        for i in range(4):
            self.start_worker("cw%d" % i)
        self.submitted = {}   # id -> spec
        self.stopped = []     # (kind, pid) SIGSTOPped, to SIGCONT
        self.training = {}    # pid -> cmdline of every training process seen
        self.actions = []
        self.shm_before = set(os.listdir("/dev/shm"))

    # ---- the cluster ----

    def start_server(self):
        s = Server(self.etcd.url, "--leader-ttl", TTL, "--grace-ms", "200")
        self.all_servers.append(s)
        return s

    def start_worker(self, worker_id):
        if worker_id not in self.ports:
            self.ports[worker_id] = free_port(self.held)
        port = self.ports[worker_id]
        health = self.health_ports.setdefault(worker_id, free_port())  # its /metrics: the agent's own view
        self.workers[worker_id] = Worker(self.etcd.url, worker_id, "127.0.0.1", port, self.root,
                                         "--http-listen", "127.0.0.1:%d" % health)

    def live_servers(self):
        """Servers running and not SIGSTOPped (a stopped one would hold a request for curl's 10 s)."""
        paused = {pid for _, pid in self.stopped}
        return [s for s in self.servers if s.proc.poll() is None and s.proc.pid not in paused]

    def http(self, method, path, body=None):
        """The first live, answering server's reply: (code, body); (0, None) if none answers."""
        for s in self.rng.sample(self.live_servers(), len(self.live_servers())):
            code, reply = curl(s.http_port, path, method, json.dumps(body) if body is not None else None)
            if code and code < 500:
                return code, reply
        return 0, None

    def leader(self):
        for s in self.live_servers():
            code, body = curl(s.http_port, "/readyz")
            if code == 200 and isinstance(body, dict) and body.get("is_leader"):
                return s
        return None

    def note_training(self):
        for w in self.workers.values():
            if w.proc.poll() is None:
                for pid in children(w.proc.pid):
                    self.training.setdefault(pid, cmdline(pid))

    # ---- jobs ----

    def submit(self, spec):
        """Submits until a server says it has the job (a retry of a lost answer is ALREADY_EXISTS)."""
        def once():
            code, body = self.http("POST", "/v1/jobs", spec)
            if code == 200 or (code == 409 and isinstance(body, dict)):
                return True
            if code and code not in (409, 429):
                raise AssertionError("submit %s: HTTP %s %s" % (spec["id"], code, body))
            return False
        wait_for(once, 60, "a server to take job %s" % spec["id"], interval=0.5)
        self.submitted[spec["id"]] = spec
        log("submitted %s", spec["id"])

    def loop_job(self, index, steps):
        job = "loop-%d-%d" % (self.seed, index)
        return {"id": job, "name": "chaos-loop", "min_workers": 1, "max_workers": 2, "max_reconfigurations": 10000,
                "labels": {"chaos": str(self.seed)},
                "exec": {"argv": [os.path.join(TESTS, "elastic_loop"), str(steps), "1000", "5", "20"],
                         "env": {"KOLO_RESULT_FILE": os.path.join(self.root, job + ".result")}}}

    def train_job(self, steps):
        return {"id": "train-%d" % self.seed, "name": "chaos-train", "min_workers": 1, "max_workers": 2,
                "max_reconfigurations": 10000, "labels": {"chaos": str(self.seed)},
                "builtin": {"model": "mlp", "dataset": "synthetic", "steps": steps, "batch_size": 32,
                            "learning_rate": 0.05}}

    # ---- faults ----

    def act(self, what, *details):
        self.actions.append((round(time.monotonic() - START, 2), what) + details)
        log("%s %s", what, " ".join(str(d) for d in details))

    def pause(self, kind, pid, low=0.5, high=3.5):
        os.kill(pid, signal.SIGSTOP)
        self.stopped.append((kind, pid))
        self.act("SIGSTOP " + kind, pid)
        time.sleep(self.rng.uniform(low, high))
        self.resume_all()

    def resume_all(self):
        for kind, pid in self.stopped:
            try:
                os.kill(pid, signal.SIGCONT)
                self.act("SIGCONT " + kind, pid)
            except ProcessLookupError:
                pass
        self.stopped = []

    def fault_worker(self, stop):
        worker_id = self.rng.choice(sorted(self.workers))
        w = self.workers[worker_id]
        if w.proc.poll() is not None:
            return
        if stop:
            return self.pause("worker " + worker_id, w.proc.pid)
        w.proc.send_signal(signal.SIGKILL)
        w.proc.wait()
        self.act("SIGKILL worker", worker_id)
        time.sleep(self.rng.uniform(0.5, 4))
        self.start_worker(worker_id)
        self.act("restarted worker", worker_id)

    def fault_training(self, stop):
        self.note_training()
        pids = sorted(p for w in self.workers.values() if w.proc.poll() is None for p in children(w.proc.pid))
        if not pids:
            return
        pid = self.rng.choice(pids)
        if stop:
            return self.pause("training process", pid, 0.3, 2.5)
        line = cmdline(pid)
        os.kill(pid, signal.SIGKILL)
        self.act("SIGKILL training process", pid, os.path.basename(line.split(" ")[0]))

    def fault_leader(self, stop):
        s = self.leader()
        if s is None:
            return
        if stop:
            return self.pause("leader", s.proc.pid, 1, 4)
        s.kill()
        self.act("SIGKILL leader", s.proc.pid)
        time.sleep(self.rng.uniform(0.5, 3))
        self.servers = [x for x in self.servers if x is not s] + [self.start_server()]
        self.act("restarted a server")

    def fault_etcd(self, stop):
        if stop:
            return self.pause("etcd", self.etcd.pid(), 0.5, 3)
        self.etcd.command("kill")
        self.act("SIGKILL etcd")
        time.sleep(self.rng.uniform(0.5, 3))
        self.etcd.command("start")
        self.act("restarted etcd (same data dir)")

    def inject(self):
        """Faults until the time is up; jobs arrive meanwhile."""
        faults = [self.fault_worker, self.fault_training, self.fault_leader, self.fault_etcd]
        weights = [3, 4, 2, 1]
        deadline = time.monotonic() + self.seconds
        late = [self.loop_job(10, 800), self.train_job(TRAIN_STEPS), self.loop_job(11, 600)]
        while time.monotonic() < deadline:
            if late and self.rng.random() < 0.25:
                self.submit(late.pop(0))
            fault = self.rng.choices(faults, weights)[0]
            fault(self.rng.random() < 0.4)
            self.note_training()
            time.sleep(self.rng.uniform(0.5, 2.5))
        for spec in late:
            self.submit(spec)

    # ---- checks ----

    def settle(self, timeout):
        """Undoes every fault, then waits for every job's final phase."""
        self.resume_all()
        for worker_id, w in list(self.workers.items()):
            if w.proc.poll() is not None:
                self.start_worker(worker_id)
        if len(self.live_servers()) < 2:
            self.servers = self.live_servers() + [self.start_server()]
        log("faults over; waiting for every job to end")

        def all_final():
            self.note_training()
            phases = {}
            for job_id in self.submitted:
                code, body = self.http("GET", "/v1/jobs/" + job_id)
                phases[job_id] = body["status"]["phase"] if code == 200 else None
            return phases if all(p in FINAL for p in phases.values()) else None
        try:
            wait_for(all_final, timeout, "every job to end", interval=1)
        except AssertionError as error:
            log("%s", error)

    def check(self):
        bad = []
        rows = []
        code, listed = self.http("GET", "/v1/jobs?label=chaos=%d&page_size=1000" % self.seed)
        listed_ids = {j["id"] for j in listed.get("jobs", [])} if code == 200 else set()
        if listed_ids != set(self.submitted):
            bad.append("ListJobs has %s, submitted %s" % (sorted(listed_ids), sorted(self.submitted)))
        for job_id, spec in sorted(self.submitted.items()):
            code, job = self.http("GET", "/v1/jobs/" + job_id)
            if code != 200:
                bad.append("%s: lost (HTTP %s)" % (job_id, code))
                continue
            st = job["status"]
            phase = st["phase"]
            progress = st.get("progress", {})
            row = [job_id, phase, st.get("reconfigurations", 0), progress.get("step", 0), ""]
            if job["spec"].get("name") != spec["name"] or job["spec"].get("max_workers") != spec["max_workers"]:
                bad.append("%s: spec changed: %s" % (job_id, json.dumps(job["spec"])[:300]))
            if phase != "SUCCEEDED":
                bad.append("%s: ended %s: %s" % (job_id, phase, st.get("error", "")[:500]))
            if "exec" in spec:
                row[4] = self.check_result(job_id, spec, bad)
            else:
                want = spec["builtin"]["steps"]
                if int(progress.get("step", 0)) != want or int(progress.get("total_steps", 0)) != want:
                    bad.append("%s: step %s of %s, want exactly %d" % (job_id, progress.get("step"),
                                                                       progress.get("total_steps"), want))
                row[4] = "steps %s/%s" % (progress.get("step"), progress.get("total_steps"))
            self.check_events(job_id, phase, bad)
            rows.append(row)
        return bad, rows

    def check_result(self, job_id, spec, bad):
        steps = spec["exec"]["argv"][1]
        path = spec["exec"]["env"]["KOLO_RESULT_FILE"]
        lines = open(path).read().split("\n") if os.path.exists(path) else []
        results = [line.split() for line in lines if line.startswith("RESULT ")]
        wrong = [r for r in results if r[1] != steps or r[-1] != "exact"]
        if not results:
            bad.append("%s: no RESULT line" % job_id)
        if wrong:
            bad.append("%s: inexact results %s" % (job_id, wrong))
        return "%d exact RESULT lines" % (len(results) - len(wrong))

    def check_events(self, job_id, phase, bad):
        code, body = self.http("GET", "/v1/jobs/%s/events" % job_id)
        events = body.get("events", []) if code == 200 else []
        seqs = [int(e.get("seq", 0)) for e in events]
        if seqs != list(range(1, len(seqs) + 1)):
            bad.append("%s: event numbers %s are not 1..%d" % (job_id, seqs, len(seqs)))
        if not events or events[0].get("type") != "SUBMITTED":
            bad.append("%s: the first event is not SUBMITTED: %s" % (job_id, events[:1]))
        if phase == "SUCCEEDED" and (not events or events[-1].get("type") != "FINISHED"):
            bad.append("%s: SUCCEEDED but the last event is %s" % (job_id, events[-1:]))

    # ---- diagnosis (printed on failure, while the cluster still runs) ----

    def etcd_get(self, key):
        """(value, lease) of a key, read from etcd's JSON gateway; (None, 0) if absent or unreadable."""
        body = json.dumps({"key": base64.b64encode(key.encode()).decode()}).encode()
        try:
            req = urllib.request.Request(self.etcd.url + "/v3/kv/range", data=body, method="POST")
            with urllib.request.urlopen(req, timeout=5) as resp:
                kvs = json.loads(resp.read()).get("kvs", [])
        except (OSError, ValueError) as error:
            return "(etcd: %s)" % error, 0
        if not kvs:
            return None, 0
        return base64.b64decode(kvs[0]["value"]).decode(errors="replace"), int(kvs[0].get("lease", 0))

    def agent_metrics(self, worker_id):
        """The agent's own view (its /metrics): job, epoch, process, step, registrations."""
        out = subprocess.run(["curl", "-s", "--max-time", "3", "http://127.0.0.1:%d/metrics" % self.health_ports[worker_id]],
                             capture_output=True, text=True)
        keep = ("kolo_worker_registered", "kolo_worker_state{", "kolo_worker_job{", "kolo_worker_epoch",
                "kolo_worker_process_running", "kolo_worker_step", "kolo_worker_registrations_total",
                "kolo_worker_leases_lost_total", "kolo_worker_processes_started_total",
                "kolo_worker_report_errors_total")
        lines = [line for line in out.stdout.splitlines()
                 if line.startswith(keep) and not (line.startswith("kolo_worker_state{") and line.endswith(" 0"))]
        return " ".join(lines) or "(no answer)"

    def diagnose(self, job_ids):
        """Everything needed to see why these jobs went wrong without a rerun: status, events,
        the ring, and for each worker that is or was in it: its record's lease, assignment,
        report, the agent's own view and its last log lines; the servers' lines about the job."""
        for job_id in job_ids:
            print("\n==== diagnosis of %s" % job_id)
            code, job = self.http("GET", "/v1/jobs/" + job_id)
            st = job.get("status", {}) if code == 200 and isinstance(job, dict) else {}
            print("status: %s" % json.dumps(st)[:1500])
            code, body = self.http("GET", "/v1/jobs/%s/events" % job_id)
            for e in body.get("events", []) if code == 200 and isinstance(body, dict) else []:
                print("  event %3s %-14s epoch %s: %s" % (e.get("seq"), e.get("type"), e.get("epoch"),
                                                         e.get("message", "").replace("\n", " | ")[:400]))
            epoch = int(st.get("epoch", 0) or 0)
            ring, _ = self.etcd_get("/kolo/v1/jobs/%s/ring/%020d" % (job_id, epoch))
            print("ring of epoch %d: %s" % (epoch, (ring or "(none)")[:800]))
            ids = {m.get("worker_id") for m in st.get("members", [])}
            for worker_id in sorted(self.workers):
                assignment, _ = self.etcd_get("/kolo/v1/assign/" + worker_id)
                if worker_id not in ids and job_id not in (assignment or ""):
                    continue
                record, lease = self.etcd_get("/kolo/v1/workers/" + worker_id)
                report, _ = self.etcd_get("/kolo/v1/jobs/%s/reports/%s" % (job_id, worker_id))
                print("-- worker %s: record lease %x state %s" % (worker_id, lease,
                      (json.loads(record).get("state") if record and record.startswith("{") else record)))
                print("   assignment: %s" % assignment)
                print("   report: %s" % (report or "(none)")[:800])
                print("   agent: %s" % self.agent_metrics(worker_id))
                w = self.workers[worker_id]
                for line in w.read_log().splitlines()[-15:]:
                    print("   | " + line)
            for i, s in enumerate(self.all_servers):
                lines = [line for line in s.read_log().splitlines() if job_id in line][-10:]
                for line in lines:
                    print("   server%d | %s" % (i, line))

    def stop(self):
        """Stops the cluster the way an operator would, then looks for leftovers."""
        self.resume_all()
        for w in self.workers.values():
            w.kill(signal.SIGTERM)
        for s in self.servers:
            if s.proc.poll() is None:
                s.terminate()
        self.etcd.stop()
        for i, s in enumerate(self.all_servers):  # their temporary dirs go at exit: keep the logs with ours
            try:
                shutil.copy(s.log_path, os.path.join(self.root, "server%d.log" % i))
            except OSError:
                pass
        time.sleep(1)
        leaks = []
        for pid, line in sorted(self.training.items()):
            if alive(pid) and cmdline(pid) == line:
                leaks.append("training process %d still runs: %s" % (pid, line[:100]))
        for entry in os.listdir("/proc"):
            if entry.isdigit() and int(entry) != os.getpid() and self.root in cmdline(int(entry)):
                leaks.append("process %s still runs: %s" % (entry, cmdline(int(entry))[:100]))
        ours = {"kolo-%d-" % pid for pid in self.training}
        for name in sorted(set(os.listdir("/dev/shm")) - self.shm_before):
            if any(name.startswith(prefix) for prefix in ours):
                leaks.append("/dev/shm/%s left behind" % name)
        return leaks


def main():
    seed = int(os.environ.get("KOLO_CHAOS_SEED") or random.SystemRandom().randrange(1, 1 << 31))
    seconds = float(os.environ.get("KOLO_CHAOS_SECONDS", "45"))
    settle = float(os.environ.get("KOLO_CHAOS_SETTLE", "150"))
    print("chaos: seed %d (replay: KOLO_CHAOS_SEED=%d), %.0f s of faults, load %s" %
          (seed, seed, seconds, open("/proc/loadavg").read().split()[0]), flush=True)
    c = Chaos(seed, seconds)
    bad, rows, leaks = [], [], []
    try:
        for i in range(3):
            c.submit(c.loop_job(i, 1200))
        c.inject()
        c.settle(settle)
        bad, rows = c.check()
        wrong = sorted({v.split(":")[0] for v in bad if v.split(":")[0] in c.submitted})
        if wrong:
            try:
                c.diagnose(wrong)
            except Exception as error:  # the diagnosis must never hide the verdict
                print("chaos: diagnosis failed: %r" % error)
    finally:
        leaks = c.stop()
    print("\n%-22s %-10s %8s %6s  %s" % ("job", "phase", "reconfs", "step", "result"))
    for row in rows:
        print("%-22s %-10s %8s %6s  %s" % tuple(row))
    kinds = {}
    for action in c.actions:
        kind = action[1].replace("restarted ", "").split(" (")[0]
        if not kind.startswith("SIGCONT"):
            kinds[action[1]] = kinds.get(action[1], 0) + 1
    print("\n%d faults: %s" % (sum(1 for a in c.actions if a[1].startswith("SIGKILL") or a[1].startswith("SIGSTOP")),
                               ", ".join("%s x%d" % (k, n) for k, n in sorted(kinds.items()) if k.startswith("SIG"))))
    problems = bad + leaks
    for p in problems:
        print("VIOLATION: " + p)
    print("chaos: seed %d: %s" % (seed, "FAILED" if problems else "ok"))
    if problems:
        print("logs kept in " + c.root)
    else:
        shutil.rmtree(c.root, ignore_errors=True)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
