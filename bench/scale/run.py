#!/usr/bin/python3
"""The control plane at scale (issue #35), on one machine: a real etcd, two real kolo-server
replicas and kolo-fleet's simulated workers (bench/scale/fleet.c), for each fleet size in
--workers:

  1. idle:  the fleet registers and idles --idle-s seconds: etcd requests per idle worker
            (keep-alives only) and the servers' RSS per idle worker;
  2. churn: jobs of 2-32 workers (--jobs-per-100 per 100 workers, min = max) submitted over
            gRPC, a busy worker killed every --kill-every-ms (its ring's neighbours report
            FAILED, as libkolo's would), one drained every --drain-every-ms, each replaced
            --rejoin-ms later, every finished job replaced by a new submission, for --churn-s;
            with --real-job, 4 real kolo-workers run a real elastic job (bench/recovery's
            recovery_loop) through it, and two of them are SIGKILLed mid-run: SIGKILL ->
            first step on the new ring;
  3. failover: the leading replica is SIGKILLed: time until the other leads and has run a pass.

Reported per size: scheduler pass p50/p99/max (and the snapshot part), worker loss -> new
ring at a survivor (kill -> first agent holding the next epoch), SubmitJob and GetJob latency,
etcd requests/s by kind (total and per worker), etcd's database size over time, the servers'
RSS per idle worker and per job, failover time. One JSON object per size, then a table.

  --finished 1,100,10000  instead: a pass's cost with that many finished jobs in etcd
                          (written straight into etcd as kolo-server and the scheduler do)

Usage: bench/scale/run.py [--build build] [--workers 100,300,1000] [--churn-s 120] [--real-job]
"""
import argparse
import base64
import json
import os
import random
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tests/integration"))


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def get(url, timeout=5):
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return r.read().decode()


def post(url, body, timeout=30):
    req = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST")
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return json.loads(r.read())


def wait(what, predicate, timeout_s):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            v = predicate()
            if v:
                return v
        except Exception:
            pass
        time.sleep(0.05)
    raise RuntimeError("timed out waiting for " + what)


def metrics(text):
    """{name{labels}: value} of a Prometheus text page."""
    out = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            try:
                out[name] = float(value)
            except ValueError:
                pass
    return out


def rss_kib(pid):
    for line in open("/proc/%d/status" % pid):
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def pct(values, q):
    if not values:
        return None
    v = sorted(values)
    return v[min(len(v) - 1, int(round(q * (len(v) - 1))))]


def hist_quantile(before, after, name, q):
    """q-quantile (seconds) of a Prometheus histogram's increase between two scrapes."""
    buckets = []
    for key, value in after.items():
        m = re.match(re.escape(name) + r'_bucket\{le="([^"]+)"\}$', key)
        if m:
            le = float("inf") if m.group(1) == "+Inf" else float(m.group(1))
            buckets.append((le, value - before.get(key, 0)))
    buckets.sort()
    total = buckets[-1][1] if buckets else 0
    if total <= 0:
        return None
    lower, below = 0.0, 0.0
    for le, count in buckets:
        if count >= q * total:
            if le == float("inf"):
                return lower
            inside = count - below
            return lower + (le - lower) * ((q * total - below) / inside if inside else 1)
        lower, below = le, count
    return lower


class Plane:
    """etcd + two kolo-servers in a temp dir."""

    def __init__(self, build, tmp, compaction, server_bin=None):
        self.build, self.tmp, self.procs = build, tmp, []
        self.server_bin = server_bin or os.path.join(build, "bin/kolo-server")
        client, peer = free_port(), free_port()
        self.etcd_url = "http://127.0.0.1:%d" % client
        self.etcd = self.spawn(["etcd", "--name", "s", "--data-dir", os.path.join(tmp, "etcd"),
                                "--listen-client-urls", self.etcd_url, "--advertise-client-urls", self.etcd_url,
                                "--listen-peer-urls", "http://127.0.0.1:%d" % peer,
                                "--initial-advertise-peer-urls", "http://127.0.0.1:%d" % peer,
                                "--initial-cluster", "s=http://127.0.0.1:%d" % peer,
                                "--auto-compaction-mode", "revision", "--auto-compaction-retention", str(compaction),
                                "--quota-backend-bytes", str(4 << 30)], "etcd.log")
        wait("etcd", lambda: "true" in get(self.etcd_url + "/health"), 30)
        self.servers = [self.start_server(n) for n in ("a", "b")]
        wait("a leader", lambda: self.leader() is not None, 30)

    def spawn(self, argv, log, **kw):
        p = subprocess.Popen(argv, stdout=open(os.path.join(self.tmp, log), "a"), stderr=subprocess.STDOUT, **kw)
        self.procs.append(p)
        return p

    def start_server(self, name):
        ports = os.path.join(self.tmp, name + ".ports")
        p = self.spawn([self.server_bin, "--etcd", self.etcd_url, "--grpc-listen",
                        "127.0.0.1:0", "--http-listen", "127.0.0.1:0", "--port-file", ports, "--leader-ttl", "2",
                        "--name", "scale-" + name, "--data-dir", os.path.join(self.tmp, "data-" + name)],
                       "server-%s.log" % name)
        wait("server ports", lambda: os.path.exists(ports), 30)
        kv = dict(line.strip().split("=") for line in open(ports))
        return {"name": name, "proc": p, "http": int(kv["http_port"]), "grpc": "127.0.0.1:" + kv["grpc_port"]}

    def readyz(self, s):
        return json.loads(get("http://127.0.0.1:%d/readyz" % s["http"], timeout=2))

    def leader(self):
        for s in self.servers:
            if s["proc"].poll() is None:
                try:
                    if self.readyz(s).get("is_leader"):
                        return s
                except Exception:
                    pass
        return None

    def server_metrics(self, s):
        return metrics(get("http://127.0.0.1:%d/metrics" % s["http"], timeout=10))

    def etcd_metrics(self):
        return metrics(get(self.etcd_url + "/metrics", timeout=10))

    def stop(self):
        for p in reversed(self.procs):
            if p.poll() is None:
                p.kill()
                p.wait()


def etcd_requests(m):
    """{method: messages received} from etcd's gRPC counters (the JSON gateway goes through them)."""
    out = {}
    for key, value in m.items():
        mm = re.match(r'grpc_server_msg_received_total\{.*grpc_method="(\w+)".*\}$', key)
        if mm:
            out[mm.group(1)] = out.get(mm.group(1), 0) + value
    return out


class Sampler(threading.Thread):
    """Every period: etcd's database size, the servers' RSS; GetJob latency on the side."""

    def __init__(self, plane, client, jobs, period=2.0):
        super().__init__(daemon=True)
        self.plane, self.client, self.jobs, self.period = plane, client, jobs, period
        self.samples, self.get_ms, self.stop_flag = [], [], threading.Event()
        self.t0 = time.monotonic()

    def run(self):
        from test_server_support import pb
        next_sample = 0
        while not self.stop_flag.is_set():
            now = time.monotonic()
            if now >= next_sample:
                next_sample = now + self.period
                try:
                    m = self.plane.etcd_metrics()
                    self.samples.append({"t": round(now - self.t0, 1),
                                         "db_bytes": m.get("etcd_mvcc_db_total_size_in_bytes", 0),
                                         "db_in_use_bytes": m.get("etcd_mvcc_db_total_size_in_use_in_bytes", 0),
                                         "keys": m.get("etcd_debugging_mvcc_keys_total", 0),
                                         "rss_kib": [rss_kib(s["proc"].pid) for s in self.plane.servers
                                                     if s["proc"].poll() is None]})
                except Exception:
                    pass
            if self.jobs:
                job = random.choice(self.jobs)
                t = time.monotonic()
                try:
                    self.client.call("GetJob", pb.GetJobRequest(id=job), timeout=10)
                    self.get_ms.append((time.monotonic() - t) * 1000)
                except Exception:
                    pass
            self.stop_flag.wait(0.1)


def loss_to_ring(events):
    """[ms] from each kill of a job's member to the first agent holding a later epoch of it."""
    out, kills = [], [e for e in events if e["ev"] == "kill" and e["job"]]
    assigned = {}
    for e in events:
        if e["ev"] == "assigned":
            assigned.setdefault(e["job"], []).append((e["t"], e["epoch"]))
    for k in kills:
        later = [t for t, epoch in assigned.get(k["job"], []) if epoch > k["epoch"] and t >= k["t"]]
        if later:
            out.append(min(later) - k["t"])
    return out


def submit(client, pb, job_id, size, steps):
    spec = pb.JobSpec(id=job_id, name="scale", min_workers=size, max_workers=size, max_reconfigurations=100000,
                      mode=pb.SYNC)
    spec.builtin.model = "mlp"
    spec.builtin.dataset = "synthetic"
    spec.builtin.steps = steps
    t = time.monotonic()
    client.call("SubmitJob", spec, timeout=30)
    return (time.monotonic() - t) * 1000


class RealJob:
    """4 real kolo-workers (ids sorting before the fleet's) running bench/recovery's
    recovery_loop as an elastic exec job (min 2, max 4) in the middle of the fleet."""

    def __init__(self, args, plane, tmp):
        import importlib.util
        spec = importlib.util.spec_from_file_location("recovery", os.path.join(ROOT, "bench/recovery/run.py"))
        self.rec = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(self.rec)
        self.plane, self.tmp, self.args = plane, tmp, args
        self.program = os.path.join(tmp, "recovery_loop")
        subprocess.check_call(["cc", "-O2", "-I", os.path.join(ROOT, "include"),
                               os.path.join(ROOT, "bench/recovery/recovery_loop.c"),
                               "-L", os.path.join(args.build, "lib"), "-lkolo",
                               "-Wl,-rpath," + os.path.join(args.build, "lib"), "-o", self.program])
        self.steps = os.path.join(tmp, "steps")
        os.makedirs(self.steps)
        self.workers, self.next_id, self.job = {}, 1, "real-job"
        for _ in range(4):
            self.start_worker()

    def start_worker(self):
        wid = "a-real-%d" % self.next_id
        self.next_id += 1
        self.workers[wid] = self.plane.spawn([os.path.join(self.args.build, "bin/kolo-worker"), "--etcd",
                                              self.plane.etcd_url, "--advertise", "127.0.0.1:%d" % free_port(),
                                              "--id", wid, "--lease-ttl", str(self.args.lease_ttl),
                                              "--work-dir", os.path.join(self.tmp, wid)], wid + ".log")
        return wid

    def submit(self, client, pb):
        spec = pb.JobSpec(id=self.job, name="real", min_workers=2, max_workers=4, max_reconfigurations=100000,
                          mode=pb.SYNC)
        spec.exec.argv.extend([self.program, "100000000", "1024", "10"])
        spec.exec.env["KOLO_STEP_DIR"] = self.steps
        client.call("SubmitJob", spec, timeout=30)

    def status(self, client, pb):
        return client.call("GetJob", pb.GetJobRequest(id=self.job), timeout=30)

    def kill_round(self, client, pb, fleet):
        """SIGKILL of a non-zero rank's worker -> first step of rank 0 on the new ring (fleet held:
        no simulated worker idles, so the ring re-forms with the real survivors only)."""
        wait("a real ring of 3 or more", lambda: (lambda j: j if pb.Phase.Name(j.status.phase) == "RUNNING" and len(
            j.status.members) >= 3 else None)(self.status(client, pb)), 30)
        fleet.send("hold 1")
        time.sleep(3)
        j = self.status(client, pb)
        rank0, victim = j.status.members[0].worker_id, j.status.members[1].worker_id
        epoch = j.status.epoch
        wait("rank 0 stepping", lambda: any(e == epoch for e, _, _ in self.rec.read_steps(
            os.path.join(self.steps, rank0 + ".steps"))), 60)
        pids = self.rec.job_processes(self.job, victim)
        t0 = int(time.time() * 1000)
        self.workers[victim].kill()
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        self.workers[victim].wait()
        new = wait("a new ring", lambda: (lambda j: j if j.status.epoch > epoch else None)(self.status(client, pb)), 60)
        members = [m.worker_id for m in new.status.members]
        t_step = wait("a step on the new ring", lambda: next((at for e, _, at in self.rec.read_steps(
            os.path.join(self.steps, rank0 + ".steps")) if e > epoch), None), 60)
        fleet.send("hold 0")
        return {"kill_to_step_ms": t_step - t0, "members": members,
                "only_real": all(m.startswith("a-real-") for m in members)}


def run_size(args, n):
    from fleet_support import Fleet
    from test_server_support import Client, pb
    tmp = tempfile.mkdtemp(prefix="kolo-scale-")
    plane = fleet = client = sampler = None
    result = {"workers": n}
    try:
        plane = Plane(args.build, tmp, args.compaction, args.server_bin)
        client = Client(plane.leader()["grpc"])
        rss0 = [rss_kib(s["proc"].pid) for s in plane.servers]
        # 1. idle
        t = time.monotonic()
        fleet = Fleet(os.path.join(args.build, "bin"), plane.etcd_url, n, "--threads", str(args.threads),
                      "--step-ms", str(args.step_ms), "--form-ms", str(args.form_ms),
                      "--kill-every-ms", "0", "--seed", "35", lease_ttl=args.lease_ttl,
                      events=os.path.join(tmp, "events.jsonl"))
        result["register_s"] = round(time.monotonic() - t, 1)
        time.sleep(args.lease_ttl + 2)
        e0, t0 = etcd_requests(plane.etcd_metrics()), time.monotonic()
        time.sleep(args.idle_s)
        e1, t1 = etcd_requests(plane.etcd_metrics()), time.monotonic()
        idle_rate = {k: (e1.get(k, 0) - e0.get(k, 0)) / (t1 - t0) for k in e1 if e1.get(k, 0) > e0.get(k, 0)}
        result["idle_etcd_requests_per_s"] = {k: round(v, 1) for k, v in sorted(idle_rate.items())}
        result["idle_etcd_requests_per_s_per_worker"] = round(sum(idle_rate.values()) / n, 3)
        rss1 = [rss_kib(s["proc"].pid) for s in plane.servers]
        result["rss_kib_before_workers"] = rss0
        result["rss_kib_idle_workers"] = rss1
        result["rss_bytes_per_idle_worker"] = [round((b - a) * 1024 / n) for a, b in zip(rss0, rss1)]
        real = None
        if args.real_job:
            real = RealJob(args, plane, tmp)
            time.sleep(2)
            real.submit(client, pb)
        # 2. churn
        jobs, submit_ms, live = [], [], set()
        n_jobs = max(2, n * args.jobs_per_100 // 100)
        rng = random.Random(35)
        sampler = Sampler(plane, client, jobs)
        sampler.start()
        leader = plane.leader()
        m0, e0, t0 = plane.server_metrics(leader), etcd_requests(plane.etcd_metrics()), time.monotonic()
        for i in range(n_jobs):
            job = "s%d-%04d" % (n, i)
            submit_ms.append(submit(client, pb, job, rng.randint(2, min(32, n // 4)), args.steps))
            jobs.append(job)
            live.add(job)
        rss_jobs = [rss_kib(s["proc"].pid) for s in plane.servers]
        fleet.send("churn %d %d %d" % (args.kill_every_ms, args.drain_every_ms, args.rejoin_ms))
        finished = failed = 0
        next_id = n_jobs
        start = time.monotonic()
        end = start + args.churn_s
        real_rounds, real_at = [], [start + args.churn_s * f for f in (0.35, 0.7)] if real else []
        while time.monotonic() < end:
            if real_at and time.monotonic() >= real_at[0]:
                real_at.pop(0)
                try:
                    real_rounds.append(real.kill_round(client, pb, fleet))
                except Exception as e:
                    real_rounds.append({"error": str(e)})
                    fleet.send("hold 0")
            for job in list(live):
                phase = pb.Phase.Name(client.call("GetJob", pb.GetJobRequest(id=job), timeout=30).status.phase)
                if phase in ("SUCCEEDED", "FAILED", "CANCELLED"):
                    live.discard(job)
                    finished += phase == "SUCCEEDED"
                    failed += phase != "SUCCEEDED"
                    new = "s%d-%04d" % (n, next_id)
                    next_id += 1
                    submit_ms.append(submit(client, pb, new, rng.randint(2, min(32, n // 4)), args.steps))
                    jobs.append(new)
                    live.add(new)
            time.sleep(1)
        fleet.send("churn 0 0 %d" % args.rejoin_ms)
        m1, e1, t1 = plane.server_metrics(leader), etcd_requests(plane.etcd_metrics()), time.monotonic()
        sampler.stop_flag.set()
        sampler.join()
        rate = {k: (e1.get(k, 0) - e0.get(k, 0)) / (t1 - t0) for k in e1 if e1.get(k, 0) > e0.get(k, 0)}
        q = lambda name, p: (lambda v: None if v is None else round(v * 1000, 2))(hist_quantile(m0, m1, name, p))
        result.update({
            "churn_s": round(t1 - t0), "jobs_submitted": len(jobs), "jobs_succeeded": finished,
            "jobs_failed": failed,
            "passes": int(m1.get("kolo_scheduler_passes_total", 0) - m0.get("kolo_scheduler_passes_total", 0)),
            "pass_ms": {"p50": q("kolo_scheduler_pass_seconds", 0.5), "p99": q("kolo_scheduler_pass_seconds", 0.99),
                        "max_ever": round(m1.get("kolo_scheduler_pass_seconds_max", 0) * 1000, 1)},
            "snapshot_ms": {"p50": q("kolo_scheduler_snapshot_seconds", 0.5),
                            "p99": q("kolo_scheduler_snapshot_seconds", 0.99),
                            "max_ever": round(m1.get("kolo_scheduler_snapshot_seconds_max", 0) * 1000, 1)},
            "submit_ms": {"p50": round(pct(submit_ms, 0.5), 1), "p99": round(pct(submit_ms, 0.99), 1),
                          "n": len(submit_ms)},
            "getjob_ms": {"p50": round(pct(sampler.get_ms, 0.5), 2), "p99": round(pct(sampler.get_ms, 0.99), 2),
                          "n": len(sampler.get_ms)},
            "etcd_requests_per_s": {k: round(v, 1) for k, v in sorted(rate.items())},
            "etcd_requests_per_s_per_worker": round(sum(rate.values()) / n, 3),
            "rss_kib_jobs": rss_jobs,
            "rss_bytes_per_job": [round((b - a) * 1024 / n_jobs) for a, b in zip(rss1, rss_jobs)],
            "db": sampler.samples[::max(1, len(sampler.samples) // 20)],
            "load_average": os.getloadavg()[0],
        })
        result["real_job"] = real_rounds
        events = fleet.events()
        lr = loss_to_ring(events)
        result["kills"] = sum(1 for e in events if e["ev"] == "kill")
        result["drains"] = sum(1 for e in events if e["ev"] == "drain")
        result["loss_to_ring_ms"] = {"p50": pct(lr, 0.5), "p99": pct(lr, 0.99), "max": max(lr) if lr else None,
                                     "n": len(lr)}
        # 3. failover
        leader = plane.leader()
        other = [s for s in plane.servers if s is not leader][0]
        passes0 = plane.server_metrics(other).get("kolo_scheduler_passes_total", 0)
        t = time.monotonic()
        leader["proc"].kill()
        wait("the other replica leads", lambda: plane.readyz(other).get("is_leader"), 60)
        result["failover_lead_ms"] = round((time.monotonic() - t) * 1000)
        wait("its first pass", lambda: plane.server_metrics(other).get("kolo_scheduler_passes_total", 0) > passes0, 60)
        result["failover_first_pass_ms"] = round((time.monotonic() - t) * 1000)
        return result
    finally:
        if sampler:
            sampler.stop_flag.set()
        if fleet:
            fleet.kill()
        if client:
            client.close()
        if plane:
            plane.stop()
        if args.keep:
            print("kept", tmp, file=sys.stderr)
        else:
            shutil.rmtree(tmp, ignore_errors=True)


def b64(s):
    return base64.b64encode(s.encode() if isinstance(s, str) else s).decode()


def prefix_range(etcd_url, prefix):
    end = prefix[:-1] + chr(ord(prefix[-1]) + 1)
    kvs = post(etcd_url + "/v3/kv/range", {"key": b64(prefix), "range_end": b64(end)}).get("kvs", [])
    return [(base64.b64decode(kv["key"]).decode(), base64.b64decode(kv["value"]).decode()) for kv in kvs]


def write_finished(etcd_url, template_id, count, start=0):
    """count finished jobs, each a copy of finished job template_id's records (spec, status,
    events, ring records, reports) under a new id, 96 keys a txn."""
    records = prefix_range(etcd_url, "/kolo/v1/jobs/%s/" % template_id)
    puts = []
    for i in range(start, start + count):
        j = "done-%06d" % i
        puts += [(k.replace(template_id, j), v.replace(template_id, j)) for k, v in records]
    for k in range(0, len(puts), 96):
        post(etcd_url + "/v3/kv/txn", {"success": [{"request_put": {"key": b64(key), "value": b64(v)}}
                                                   for key, v in puts[k:k + 96]]})
    return len(records)


def run_finished(args, counts):
    from fleet_support import Fleet
    tmp = tempfile.mkdtemp(prefix="kolo-scale-finished-")
    plane = fleet = None
    rows = []
    try:
        plane = Plane(args.build, tmp, args.compaction, args.server_bin)
        fleet = Fleet(os.path.join(args.build, "bin"), plane.etcd_url, 20, "--threads", "2",
                      "--step-ms", "20", lease_ttl=args.lease_ttl)
        from test_server_support import Client, pb
        client = Client(plane.leader()["grpc"])
        submit(client, pb, "template", 2, 20)
        wait("the template job", lambda: pb.Phase.Name(client.call("GetJob", pb.GetJobRequest(
            id="template")).status.phase) == "SUCCEEDED", 120)
        client.close()
        have = 0
        for count in counts:
            keys = write_finished(plane.etcd_url, "template", count - have, have)
            have = count
            time.sleep(3)
            leader = plane.leader()
            m0 = plane.server_metrics(leader)
            time.sleep(args.idle_s)
            m1 = plane.server_metrics(leader)
            q = lambda name, p: round(hist_quantile(m0, m1, name, p) * 1000, 3)
            # the mean from _sum/_count: the histogram's first bucket (0.25 ms) hides what is below it
            mean = lambda name: round((m1[name + "_sum"] - m0.get(name + "_sum", 0)) * 1000 /
                                      max(1, m1[name + "_count"] - m0.get(name + "_count", 0)), 3)
            rows.append({"finished_jobs": count, "keys_per_job": keys,
                         "passes": int(m1["kolo_scheduler_passes_total"] - m0["kolo_scheduler_passes_total"]),
                         "pass_ms_p50": q("kolo_scheduler_pass_seconds", 0.5),
                         "pass_ms_p99": q("kolo_scheduler_pass_seconds", 0.99),
                         "snapshot_ms_p50": q("kolo_scheduler_snapshot_seconds", 0.5),
                         "pass_ms_mean": mean("kolo_scheduler_pass_seconds"),
                         "snapshot_ms_mean": mean("kolo_scheduler_snapshot_seconds"),
                         "load_average": os.getloadavg()[0],
                         "rss_kib": [rss_kib(s["proc"].pid) for s in plane.servers]})
            print(json.dumps(rows[-1]), flush=True)
        return rows
    finally:
        if fleet:
            fleet.kill()
        if plane:
            plane.stop()
        shutil.rmtree(tmp, ignore_errors=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--workers", default="100,300,1000")
    ap.add_argument("--finished", default="", help="e.g. 1,100,10000: pass cost with finished jobs instead")
    ap.add_argument("--churn-s", type=int, default=120)
    ap.add_argument("--idle-s", type=int, default=15)
    ap.add_argument("--jobs-per-100", type=int, default=10)
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--step-ms", type=int, default=100)
    ap.add_argument("--form-ms", type=int, default=200)
    ap.add_argument("--lease-ttl", type=int, default=3)
    ap.add_argument("--threads", type=int, default=16)
    ap.add_argument("--kill-every-ms", type=int, default=1000)
    ap.add_argument("--drain-every-ms", type=int, default=10000)
    ap.add_argument("--rejoin-ms", type=int, default=2000)
    ap.add_argument("--compaction", type=int, default=20000, help="etcd --auto-compaction-retention (revisions)")
    ap.add_argument("--real-job", action="store_true", help="a real elastic job in the middle, killed twice")
    ap.add_argument("--server-bin", default=None, help="another kolo-server (e.g. before a change)")
    ap.add_argument("--keep", action="store_true")
    ap.add_argument("--out", default="")
    args = ap.parse_args()
    if args.finished:
        rows = run_finished(args, [int(x) for x in args.finished.split(",")])
        print(json.dumps({"finished": rows}))
        return
    results = []
    for n in [int(x) for x in args.workers.split(",")]:
        r = run_size(args, n)
        print(json.dumps(r), flush=True)
        results.append(r)
        if args.out:
            json.dump(results, open(args.out, "w"), indent=1)
    print("\n| workers | pass p50/p99/max ms | loss->ring p50/p99/max ms | submit p50/p99 ms | getjob p50/p99 ms "
          "| etcd req/s (per worker) idle / churn | RSS/idle worker B | failover ms |")
    print("|---|---|---|---|---|---|---|---|")
    for r in results:
        p, l = r["pass_ms"], r["loss_to_ring_ms"]
        print("| %d | %s / %s / %s | %s / %s / %s | %s / %s | %s / %s | %.0f (%.2f) / %.0f (%.2f) | %s | %s |" % (
            r["workers"], p["p50"], p["p99"], p["max_ever"], l["p50"], l["p99"], l["max"],
            r["submit_ms"]["p50"], r["submit_ms"]["p99"], r["getjob_ms"]["p50"], r["getjob_ms"]["p99"],
            sum(r["idle_etcd_requests_per_s"].values()), r["idle_etcd_requests_per_s_per_worker"],
            sum(r["etcd_requests_per_s"].values()), r["etcd_requests_per_s_per_worker"],
            r["rss_bytes_per_idle_worker"], r["failover_first_pass_ms"]))


if __name__ == "__main__":
    main()
