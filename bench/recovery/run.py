#!/usr/bin/python3
"""Recovery benchmark: how fast a running elastic job gets back to training after
its ring changes, against real etcd, kolo-server and kolo-workers on 127.0.0.1
(started here, lease TTL --ttl). The job runs recovery_loop (a small all-reduce
per step, --step-ms apart, every step committed) as an exec job with
min_workers 2, max_workers 3. Each round measures from the event to the first
step rank 0 completes on the new ring.

  --mode kill   SIGKILL a non-zero rank's worker (its sockets close).
  --mode stop   SIGSTOP a worker and its process (a host that vanishes silently:
                nothing closes). The ring's liveness beat finds it
                (KOLO_PEER_TIMEOUT, --peer-timeout, default 0.5 s); with
                --peer-timeout 0 only the lease TTL does.
  --mode grow   a ring of 2 and a new worker started: from starting kolo-worker
                to the first step on the ring of 3 (registration, WORKER_JOINED,
                re-form).
  --mode etcd   etcd SIGKILLed and started again --outage-ms later: the job must
                not notice; reports steps redone (target 0), re-forms and lost
                workers (target 0) and the steps trained during the outage.
  --mode stopload  --mode stop on a loaded machine: two busy loops fill both
                cores for --warm-s seconds before the SIGSTOP (the adaptive beat
                timeout has stretched to the load by then) and until the ring
                re-formed; the target is under 3 s (issue 28).
  --mode load   no loss at all: a ring of 3 trains next to two busy loops (both
                cores full) for --load-s seconds per round; counts WORKER_LOST
                events, i.e. live workers taken for dead (target 0).
  --mode all    every mode above (stop twice: beat and lease), then one table.

Detection = event -> the scheduler's WORKER_LOST / WORKER_JOINED event;
re-form = that event -> first step at the new epoch; total = event -> that step.
Usage: bench/recovery/run.py [--build build] [--rounds 5] [--mode all] [--ttl 2]
Prints one line per round, the medians per mode, the machine's load, and a JSON
summary on the last line."""
import argparse, json, os, shutil, signal, socket, statistics, subprocess, sys, tempfile, time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def now_ms():
    return int(time.time() * 1000)


def http(port, method, path, body=None):
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=data, method=method,
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=3) as r:
        return json.load(r)


def wait(what, predicate, timeout_s):
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        try:
            value = predicate()
            if value:
                return value
        except Exception:
            pass
        time.sleep(0.02)
    raise RuntimeError(f"timed out waiting for {what}")


def job_processes(job, worker):
    """pids whose environment says KOLO_JOB_ID=job and KOLO_WORKER_ID=worker"""
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            env = open(f"/proc/{pid}/environ", "rb").read().split(b"\0")
        except OSError:
            continue
        if f"KOLO_JOB_ID={job}".encode() in env and f"KOLO_WORKER_ID={worker}".encode() in env:
            found.append(int(pid))
    return found


def read_steps(path):
    """[(epoch, step, unix_ms)] from a STEP file"""
    rows = []
    try:
        for line in open(path):
            parts = line.split()
            if len(parts) == 4 and parts[0] == "STEP":
                rows.append((int(parts[1]), int(parts[2]), int(parts[3])))
    except OSError:
        pass
    return rows


class Cluster:
    """etcd, one kolo-server and kolo-workers in a temp dir; everything dies with stop()."""

    def __init__(self, args, program, tmp, env):
        self.args, self.program, self.tmp, self.env = args, program, tmp, env
        self.procs, self.workers, self.next_id = [], {}, 1
        self.steps = os.path.join(tmp, "steps")
        os.makedirs(self.steps)
        client, peer = free_port(), free_port()
        self.etcd_url = f"http://127.0.0.1:{client}"
        self.etcd_argv = ["etcd", "--name", "b", "--data-dir", os.path.join(tmp, "etcd"),
                          "--listen-client-urls", self.etcd_url, "--advertise-client-urls", self.etcd_url,
                          "--listen-peer-urls", f"http://127.0.0.1:{peer}",
                          "--initial-advertise-peer-urls", f"http://127.0.0.1:{peer}",
                          "--initial-cluster", f"b=http://127.0.0.1:{peer}"]
        self.etcd = self.spawn(self.etcd_argv, "etcd.log")
        self.wait_etcd()
        port_file = os.path.join(tmp, "server.ports")
        self.spawn([os.path.join(args.build, "bin/kolo-server"), "--etcd", self.etcd_url, "--grpc-listen",
                    "127.0.0.1:0", "--http-listen", "127.0.0.1:0", "--port-file", port_file, "--leader-ttl",
                    str(args.ttl)], "server.log")
        wait("server ports", lambda: os.path.exists(port_file), 20)
        self.port = int(dict(l.strip().split("=") for l in open(port_file))["http_port"])
        wait("leader", lambda: http(self.port, "GET", "/readyz").get("is_leader"), 20)

    def spawn(self, argv, log):
        p = subprocess.Popen(argv, stdout=open(os.path.join(self.tmp, log), "a"), stderr=subprocess.STDOUT,
                             env=self.env)
        self.procs.append(p)
        return p

    def wait_etcd(self):
        wait("etcd", lambda: urllib.request.urlopen(self.etcd_url + "/health", timeout=1).status == 200, 30)

    def start_worker(self):
        wid = f"w{self.next_id}"
        self.next_id += 1
        self.workers[wid] = self.spawn([os.path.join(self.args.build, "bin/kolo-worker"), "--etcd", self.etcd_url,
                                        "--advertise", f"127.0.0.1:{free_port()}", "--id", wid, "--lease-ttl",
                                        str(self.args.ttl), "--work-dir", os.path.join(self.tmp, wid)],
                                       wid + ".log")
        return wid

    def submit(self, job):
        http(self.port, "POST", "/v1/jobs", {
            "id": job, "name": "recovery", "min_workers": 2, "max_workers": 3, "max_reconfigurations": 1000,
            "exec": {"argv": [self.program, "100000000", "1024", str(self.args.step_ms)],
                     "env": {"KOLO_STEP_DIR": self.steps}}})

    def status(self, job):
        return http(self.port, "GET", f"/v1/jobs/{job}")

    def ring(self, job, size):
        j = self.status(job)
        s = j["status"]
        return j if s["phase"] == "RUNNING" and len(s["members"]) == size else None

    def step_file(self, worker):
        return os.path.join(self.steps, worker + ".steps")

    def event_after(self, job, seen, kind):
        for e in self.status(job)["events"][seen:]:
            if e["type"] == kind:
                return e
        return None

    def first_step(self, worker, epoch):
        for e, _, at in read_steps(self.step_file(worker)):
            if e >= epoch:
                return at
        return None

    def settle(self, job, j):
        """lets the ring run a moment at its epoch (rank 0 stepping there)"""
        epoch, rank0 = j["status"]["epoch"], j["status"]["members"][0]["worker_id"]
        wait("steps at the epoch", lambda: any(e == epoch for e, _, _ in read_steps(self.step_file(rank0))), 30)
        time.sleep(0.5)

    def stop(self):
        for p in reversed(self.procs):
            if p.poll() is None:
                try:
                    p.send_signal(signal.SIGCONT)
                except OSError:
                    pass
                p.kill()
                p.wait()


def start_hogs():
    return [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(2)]


def stop_hogs(hogs):
    for h in hogs:
        h.kill()
        h.wait()
    hogs.clear()


def loss_round(c, job, round_no, mode):
    j = wait("a full ring", lambda: c.ring(job, 3), 60)
    c.settle(job, j)
    hogs = []
    try:
        if mode == "stopload":
            hogs = start_hogs()
            time.sleep(c.args.warm_s)
        return loss_round_loaded(c, job, round_no, mode, hogs)
    finally:
        stop_hogs(hogs)


def loss_round_loaded(c, job, round_no, mode, hogs):
    j = c.status(job)
    rank0 = j["status"]["members"][0]["worker_id"]
    victim = j["status"]["members"][1 + round_no % 2]["worker_id"]
    seen = len(j["events"])
    victim_pids = job_processes(job, victim)
    t0 = now_ms()
    if mode == "kill":
        c.workers[victim].kill()
        c.workers[victim].wait()
    else:
        c.workers[victim].send_signal(signal.SIGSTOP)
        for pid in victim_pids:
            os.kill(pid, signal.SIGSTOP)
    load = round(os.getloadavg()[0], 1)
    event = wait("WORKER_LOST", lambda: c.event_after(job, seen, "WORKER_LOST"), 60)
    t_step = wait("a step on the new ring", lambda: c.first_step(rank0, event["epoch"]), 60)
    stop_hogs(hogs)
    if mode != "kill":
        for pid in victim_pids:
            os.kill(pid, signal.SIGKILL)
        c.workers[victim].kill()
        c.workers[victim].wait()
    c.start_worker()  # the job grows back to 3 for the next round
    why = "neighbours" if "ring neighbours" in event["message"] else (
        "lease" if "lease expired" in event["message"] else "other")
    return {"detection_ms": event["time_unix_ms"] - t0, "reform_ms": t_step - event["time_unix_ms"],
            "total_ms": t_step - t0, "found_by": why, "victim": victim, "load_average": load}


def grow_round(c, job, round_no):
    j = wait("a ring of 2", lambda: c.ring(job, 2), 60)
    c.settle(job, j)
    j = c.status(job)
    rank0 = j["status"]["members"][0]["worker_id"]
    seen = len(j["events"])
    t0 = now_ms()
    wid = c.start_worker()
    event = wait("WORKER_JOINED", lambda: c.event_after(job, seen, "WORKER_JOINED"), 60)
    t_step = wait("a step on the ring of 3", lambda: c.first_step(rank0, event["epoch"]), 60)
    # back to 2 for the next round: the newcomer leaves (SIGKILL: a loss, re-formed fast)
    j3 = wait("the ring of 3 running", lambda: c.ring(job, 3), 60)
    c.workers[wid].kill()
    c.workers[wid].wait()
    return {"detection_ms": event["time_unix_ms"] - t0, "reform_ms": t_step - event["time_unix_ms"],
            "total_ms": t_step - t0, "epoch": j3["status"]["epoch"]}


def etcd_round(c, job, round_no):
    j = wait("a full ring", lambda: c.ring(job, 3), 60)
    c.settle(job, j)
    j = c.status(job)
    epoch, rank0 = j["status"]["epoch"], j["status"]["members"][0]["worker_id"]
    seen, reconfigurations = len(j["events"]), j["status"].get("reconfigurations", 0)
    pids = {w["worker_id"]: job_processes(job, w["worker_id"]) for w in j["status"]["members"]}
    t0 = now_ms()
    c.etcd.kill()
    c.etcd.wait()
    time.sleep(c.args.outage_ms / 1000.0)
    c.etcd = c.spawn(c.etcd_argv, "etcd.log")
    c.wait_etcd()
    back = now_ms()
    time.sleep(c.args.ttl + 1.0)  # past another TTL: an agent giving up would have acted by now
    after = c.status(job)
    steps = [s for s in read_steps(c.step_file(rank0)) if s[2] >= t0 - 1000]
    redone, high = 0, -1
    for _, step, _ in steps:
        if step <= high:
            redone += 1
        high = max(high, step)
    during = sum(1 for _, _, at in steps if t0 <= at <= back)
    same = all(job_processes(job, w) == p for w, p in pids.items())
    lost = sum(1 for e in after["events"][seen:] if e["type"] in ("WORKER_LOST", "RING_STALLED"))
    return {"outage_ms": back - t0, "steps_redone": redone, "steps_during_outage": during,
            "reconfigurations": after["status"].get("reconfigurations", 0) - reconfigurations,
            "epoch_changes": after["status"]["epoch"] - epoch, "workers_lost": lost, "same_processes": same}


def load_round(c, job, round_no):
    j = wait("a full ring", lambda: c.ring(job, 3), 60)
    c.settle(job, j)
    j = c.status(job)
    seen, epoch, rank0 = len(j["events"]), j["status"]["epoch"], j["status"]["members"][0]["worker_id"]
    hogs = start_hogs()
    t0 = now_ms()
    try:
        time.sleep(c.args.load_s)
    finally:
        stop_hogs(hogs)
    after = c.status(job)
    lost = [e for e in after["events"][seen:] if e["type"] in ("WORKER_LOST", "RING_STALLED")]
    steps = sum(1 for e, _, at in read_steps(c.step_file(rank0)) if at >= t0)
    return {"seconds": c.args.load_s, "workers_lost": len(lost), "epoch_changes": after["status"]["epoch"] - epoch,
            "steps": steps, "load_average": round(os.getloadavg()[0], 1)}


def run_mode(args, program, mode, peer_timeout):
    tmp = tempfile.mkdtemp(prefix="kolo-recovery-")
    env = dict(os.environ)
    if peer_timeout is not None:
        env["KOLO_PEER_TIMEOUT"] = str(peer_timeout)
    c = None
    try:
        c = Cluster(args, program, tmp, env)
        job = "bench"
        for _ in range(2 if mode == "grow" else 3):
            c.start_worker()
        c.submit(job)
        rows = []
        label = mode if mode != "stop" else ("stop, beat" if peer_timeout != 0 else "stop, lease only")
        if mode == "stopload":
            label = "stop, beat, loaded"
        for r in range(args.rounds):
            if mode in ("kill", "stop", "stopload"):
                row = loss_round(c, job, r, mode)
            elif mode == "grow":
                row = grow_round(c, job, r)
            elif mode == "load":
                row = load_round(c, job, r)
            else:
                row = etcd_round(c, job, r)
            rows.append(row)
            print(f"{label} round {r + 1}: " + ", ".join(f"{k} {v}" for k, v in row.items()), flush=True)
        return label, rows
    finally:
        if c:
            c.stop()
        if args.keep:
            print("kept", tmp, file=sys.stderr)
        else:
            shutil.rmtree(tmp, ignore_errors=True)


def median(rows, key):
    return statistics.median(r[key] for r in rows)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--mode", choices=["kill", "stop", "stopload", "grow", "etcd", "load", "all"], default="all")
    ap.add_argument("--load-s", type=int, default=20, help="--mode load: seconds per round")
    ap.add_argument("--warm-s", type=float, default=10.0,
                    help="--mode stopload: seconds of full CPU load before the SIGSTOP")
    ap.add_argument("--ttl", type=int, default=2)
    ap.add_argument("--step-ms", type=int, default=10)
    ap.add_argument("--peer-timeout", type=float, default=None,
                    help="KOLO_PEER_TIMEOUT for the workers in seconds (0: lease only; default: libkolo's 0.5)")
    ap.add_argument("--outage-ms", type=int, default=1000, help="--mode etcd: etcd down this long")
    ap.add_argument("--keep", action="store_true", help="keep the temp dirs")
    args = ap.parse_args()

    build_dir = tempfile.mkdtemp(prefix="kolo-recovery-build-")
    try:
        program = os.path.join(build_dir, "recovery_loop")
        subprocess.check_call(["cc", "-O2", "-I", os.path.join(ROOT, "include"),
                               os.path.join(ROOT, "bench/recovery/recovery_loop.c"),
                               "-L", os.path.join(args.build, "lib"), "-lkolo",
                               "-Wl,-rpath," + os.path.join(args.build, "lib"), "-o", program])
        if args.mode == "all":
            plan = [("kill", None), ("stop", args.peer_timeout), ("stop", 0), ("stopload", args.peer_timeout),
                    ("grow", None), ("etcd", None), ("load", args.peer_timeout)]
        else:
            plan = [(args.mode, args.peer_timeout)]
        load_before = os.getloadavg()
        results = [run_mode(args, program, mode, timeout) for mode, timeout in plan]
        load_after = os.getloadavg()
    finally:
        shutil.rmtree(build_dir, ignore_errors=True)

    print(f"\nrecovery, lease TTL {args.ttl} s, {args.rounds} rounds per mode, step every {args.step_ms} ms; "
          f"load average {load_before[0]:.1f} before, {load_after[0]:.1f} after, {os.cpu_count()} CPUs")
    print(f"| {'event':<24} | {'detection ms':>12} | {'re-form ms':>10} | {'total ms':>8} | notes |")
    print(f"|{'-' * 26}|{'-' * 14}|{'-' * 12}|{'-' * 10}|-------|")
    summary = []
    for label, rows in results:
        if label == "load":
            note = (f"{sum(r['seconds'] for r in rows)} s next to two busy loops: workers lost "
                    f"{sum(r['workers_lost'] for r in rows)}, re-forms {sum(r['epoch_changes'] for r in rows)}, "
                    f"load average up to {max(r['load_average'] for r in rows)}")
            print(f"| {'full CPU load':<24} | {'-':>12} | {'-':>10} | {'-':>8} | {note} |")
        elif label == "etcd":
            note = (f"outage {median(rows, 'outage_ms'):.0f} ms: steps redone {sum(r['steps_redone'] for r in rows)}, "
                    f"re-forms {sum(r['epoch_changes'] for r in rows)}, lost {sum(r['workers_lost'] for r in rows)}, "
                    f"same processes {all(r['same_processes'] for r in rows)}, "
                    f"steps during the outage (median) {median(rows, 'steps_during_outage'):.0f}")
            print(f"| {'etcd restart mid-job':<24} | {'-':>12} | {'-':>10} | {'-':>8} | {note} |")
        else:
            notes = ""
            if "found_by" in rows[0]:
                notes = "found by " + ", ".join(sorted({r["found_by"] for r in rows}))
                notes += (f"; detection max {max(r['detection_ms'] for r in rows)} ms, "
                          f"load average {min(r['load_average'] for r in rows)}-{max(r['load_average'] for r in rows)}")
            print(f"| {label:<24} | {median(rows, 'detection_ms'):>12.0f} | {median(rows, 'reform_ms'):>10.0f} | "
                  f"{median(rows, 'total_ms'):>8.0f} | {notes} |")
        summary.append({"mode": label, "rounds": rows})
    print(json.dumps({"ttl_s": args.ttl, "step_ms": args.step_ms, "load": [load_before[0], load_after[0]],
                      "modes": summary}))


if __name__ == "__main__":
    main()
