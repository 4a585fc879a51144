#!/usr/bin/python3
"""The torchft-rate chaos run (issue 28): an elastic kolo.torch job on 4 workers
through the service (etcd, kolo-server and 4 kolo-workers on 127.0.0.1, started
here) trains the Fashion-MNIST MLP of bench/chaos/train.py with a commit every
step, while a seeded schedule injects failures; side by side, the same model and
data order under torchrun (Debian's torch 1.13 torch.distributed.run, through
kolo.torch.torchrun for its Python 3.11 fix; gloo DDP, --max_restarts,
a checkpoint every --ckpt-every steps) on the same schedule.

The schedule (seeded, times from the job's first step): every --interval s
(+-33% jitter) a fault at a random rank (rank 0 a quarter of the time):
  kill-proc   SIGKILL of the rank's training process (kolo: its agent stays and the
              service takes the worker back itself; torchrun restarts every process)
  kill-agent  SIGKILL of the rank's kolo-worker (its process dies with it,
              PDEATHSIG); a new kolo-worker with the same id and port 2-5 s later
              (torchrun has no such agent: its rank's process is SIGKILLed)
  stop        SIGSTOP of the rank's agent and process (torchrun: the process) for 5 s,
              then SIGCONT (one per run)
and about one fault in five comes 0.3-1.5 s after the previous victim's restart,
i.e. while the ring re-forms to take it back.

Each backend runs twice: undisturbed for --duration s (its final step count S),
then S steps under the schedule. Reported per backend: steps redone per failure
(max, mean: at each (re)start of training, the highest step any process had
completed before it minus the step it resumes from, summed over the re-forms
after a failure; the step in flight when a failure strikes, completed nowhere, is
not counted), goodput (S / wall time under failures over S / the undisturbed wall
time, first step to last), final test accuracy against the undisturbed run,
re-forms, and whether every process that survived a failure finished as the same
process (pid). Targets: <= 1 step redone per failure, goodput >= 85%, accuracy
within 0.5 points, kolo's goodput >= 2x torchrun's.

    bench/chaos/run.py                              # 600 s per run, both backends
    bench/chaos/run.py --duration 240 --seed 7
    bench/chaos/run.py --only kolo --chaos-only --duration 75 --interval 15   # the CI shape

--chaos-only: no undisturbed run; the chaos run stops by time (--duration after its
first step) instead of a step count; goodput and accuracy are not reported.
The last line is a JSON summary.
"""
import argparse
import json
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
PYTHON = "/usr/bin/python3"
WORKERS = 4
STOP_S = 5.0


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def wait(what, predicate, timeout_s, interval=0.1):
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        try:
            value = predicate()
            if value:
                return value
        except Exception:  # noqa: BLE001 (a server not up yet, a file being written)
            pass
        time.sleep(interval)
    raise RuntimeError("timed out after %.0f s waiting for %s" % (timeout_s, what))


def http(port, method, path, body=None):
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request("http://127.0.0.1:%d%s" % (port, path), data=data, method=method,
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=5) as r:
        return json.load(r)


def processes_with(*pairs):
    """pids whose environment holds every NAME=value of pairs."""
    wanted = [("%s=%s" % p).encode() for p in pairs]
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            env = open("/proc/%s/environ" % pid, "rb").read().split(b"\0")
        except OSError:
            continue
        if all(w in env for w in wanted):
            found.append(int(pid))
    return found


def signal_pids(pids, sig):
    for pid in pids:
        try:
            os.kill(pid, sig)
        except OSError:
            pass


# ---- the schedule ----

def make_schedule(seed, duration, interval):
    """[{at, kind, rank, restart_after}] with at in seconds from the first step."""
    rng = random.Random(seed)
    events, at, stop_done = [], 0.0, False
    while True:
        reform = events and events[-1]["kind"] != "stop" and not events[-1]["reform"] and rng.random() < 0.2
        if reform:  # while the last victim is being taken back
            at = events[-1]["at"] + events[-1]["restart_after"] + rng.uniform(0.3, 1.5)
        else:
            at += interval * rng.uniform(0.67, 1.33)
        if at > duration - 5:
            break
        rank = 0 if rng.random() < 0.25 else rng.randint(1, WORKERS - 1)
        kind = rng.choice(["kill-proc", "kill-agent"])
        if not stop_done and not reform and len(events) >= 1 and rng.random() < 0.5:
            kind, stop_done = "stop", True
        events.append({"at": round(at, 2), "kind": kind, "rank": rank, "reform": bool(reform),
                       "restart_after": STOP_S if kind == "stop" else round(rng.uniform(2, 5), 2)})
    if not stop_done and len(events) >= 3:  # one SIGSTOP per run when the run is long enough
        for ev in events[1:]:
            if not ev["reform"]:
                ev["kind"], ev["restart_after"] = "stop", STOP_S
                break
    return events


# ---- kolo: the service ----

class KoloCluster:
    """etcd, one kolo-server and 4 kolo-workers in a temp dir; stop() kills them all."""

    def __init__(self, args, tmp):
        self.args, self.tmp, self.procs, self.agents, self.ports = args, tmp, [], {}, {}
        self.env = dict(os.environ, OMP_NUM_THREADS="1",
                        PYTHONPATH=os.path.join(ROOT, "python") + ":" + os.environ.get("PYTHONPATH", ""))
        client, peer = free_port(), free_port()
        self.etcd_url = "http://127.0.0.1:%d" % client
        self.spawn(["etcd", "--name", "c", "--data-dir", os.path.join(tmp, "etcd"), "--listen-client-urls",
                    self.etcd_url, "--advertise-client-urls", self.etcd_url, "--listen-peer-urls",
                    "http://127.0.0.1:%d" % peer, "--initial-advertise-peer-urls", "http://127.0.0.1:%d" % peer,
                    "--initial-cluster", "c=http://127.0.0.1:%d" % peer], "etcd.log")
        wait("etcd", lambda: urllib.request.urlopen(self.etcd_url + "/health", timeout=1).status == 200, 60)
        port_file = os.path.join(tmp, "server.ports")
        self.spawn([os.path.join(args.build, "bin/kolo-server"), "--etcd", self.etcd_url, "--grpc-listen",
                    "127.0.0.1:0", "--http-listen", "127.0.0.1:0", "--port-file", port_file, "--leader-ttl", "2",
                    "--data-dir", os.path.join(tmp, "server-data")], "server.log")
        wait("server ports", lambda: "http_port=" in open(port_file).read(), 60)
        self.port = int(dict(line.strip().split("=") for line in open(port_file) if "=" in line)["http_port"])
        wait("a leading server", lambda: http(self.port, "GET", "/readyz").get("is_leader"), 60)

    def spawn(self, argv, log):
        p = subprocess.Popen(argv, stdout=open(os.path.join(self.tmp, log), "a"), stderr=subprocess.STDOUT,
                             env=self.env)
        self.procs.append(p)
        return p

    def start_agent(self, wid):
        self.ports.setdefault(wid, free_port())
        self.agents[wid] = self.spawn([os.path.join(self.args.build, "bin/kolo-worker"), "--etcd", self.etcd_url,
                                       "--advertise", "127.0.0.1:%d" % self.ports[wid], "--id", wid,
                                       "--lease-ttl", "2", "--work-dir", os.path.join(self.tmp, wid)]
                                      + self.args.worker_arg, wid + ".log")

    def registered(self):
        return {w["id"] for w in http(self.port, "GET", "/v1/workers").get("workers", [])}

    def job(self, job):
        return http(self.port, "GET", "/v1/jobs/" + job)

    def stop(self):
        for p in reversed(self.procs):
            if p.poll() is None:
                signal_pids([p.pid], signal.SIGCONT)
                p.kill()
                p.wait()


class KoloRun:
    """One kolo job on a fresh cluster; faults by rank through the job's members."""

    name = "kolo"

    def __init__(self, args, tmp, train_args):
        self.c = KoloCluster(args, tmp)
        self.job_id = "chaos"
        for i in range(WORKERS):
            self.c.start_agent("w%d" % (i + 1))
        wait("4 registered workers", lambda: len(self.c.registered()) == WORKERS, 60)
        http(self.c.port, "POST", "/v1/jobs", {
            "id": self.job_id, "name": "chaos", "min_workers": 2, "max_workers": WORKERS,
            "max_reconfigurations": 1000,
            "exec": {"argv": [PYTHON, os.path.join(HERE, "train.py"), "--backend", "kolo"] + train_args,
                     "env": {"OMP_NUM_THREADS": "1", "PYTHONPATH": self.c.env["PYTHONPATH"]}}})

    def status(self):
        return self.c.job(self.job_id)["status"]

    def ended(self):
        phase = self.status()["phase"]
        return phase if phase in ("SUCCEEDED", "FAILED", "CANCELLED") else None

    def training_pids(self, wid):
        return processes_with(("KOLO_JOB_ID", self.job_id), ("KOLO_WORKER_ID", wid))

    def members(self):
        """[(rank, worker id)] of the job's current members whose agent runs."""
        out = []
        for m in self.status().get("members", []):
            wid = m["worker_id"]
            if wid in self.c.agents and self.c.agents[wid].poll() is None:
                out.append((m.get("rank", 0), wid))
        return sorted(out)

    def fault(self, ev):
        """Injects ev; returns (victim pids, survivor pids, undo callable or None)."""
        members = self.members()
        # the member at that rank, else the next one whose training process runs (a worker
        # taken back may not have started its process yet)
        order = [m for m in members if m[0] >= ev["rank"]] + [m for m in members if m[0] < ev["rank"]]
        running = [(r, w) for r, w in order if self.training_pids(w)]
        if not running:
            return [], [], None
        wid = running[0][1]
        victims = self.training_pids(wid)
        survivors = [p for r, w in members if w != wid for p in self.training_pids(w)]
        agent = self.c.agents[wid]
        ev["worker"] = wid
        if ev["kind"] == "kill-proc":
            signal_pids(victims, signal.SIGKILL)
            return victims, survivors, None
        if ev["kind"] == "kill-agent":
            agent.kill()
            agent.wait()
            return victims, survivors, lambda: self.c.start_agent(wid)
        signal_pids([agent.pid] + victims, signal.SIGSTOP)
        return victims, survivors, lambda: signal_pids([agent.pid] + victims, signal.SIGCONT)

    def reforms(self):
        s = self.status()
        return {"epoch_changes": int(s.get("epoch", 1)) - 1, "reconfigurations": int(s.get("reconfigurations", 0))}

    def stop(self):
        self.c.stop()


# ---- torchrun ----

class TorchrunRun:
    """torch.distributed.run with 4 processes; faults by rank through RANK in their environment."""

    name = "torchrun"

    def __init__(self, args, tmp, train_args):
        self.tag = "chaos-%d" % os.getpid()
        self.log_path = os.path.join(tmp, "torchrun.log")
        env = dict(os.environ, OMP_NUM_THREADS="1", KOLO_CHAOS_TAG=self.tag,
                   PYTHONPATH=os.path.join(ROOT, "python") + ":" + os.environ.get("PYTHONPATH", ""))
        # Debian's torchrun with its Python 3.11 fix (python/kolo/torch/torchrun.py), nothing else changed
        self.proc = subprocess.Popen([PYTHON, "-m", "kolo.torch.torchrun", "--standalone", "--nproc_per_node",
                                      str(WORKERS), "--max_restarts", str(args.max_restarts), "--monitor_interval",
                                      "1", os.path.join(HERE, "train.py"), "--backend", "torchrun",
                                      "--ckpt-every", str(args.ckpt_every)] + train_args,
                                     stdout=open(self.log_path, "a"), stderr=subprocess.STDOUT,
                                     env=env, start_new_session=True)

    def ended(self):
        rc = self.proc.poll()
        return None if rc is None else ("SUCCEEDED" if rc == 0 else "FAILED (exit %d)" % rc)

    def rank_pids(self):
        out = {}
        for pid in processes_with(("KOLO_CHAOS_TAG", self.tag)):
            try:
                env = dict(kv.split(b"=", 1) for kv in open("/proc/%d/environ" % pid, "rb").read().split(b"\0")
                           if b"=" in kv)
            except OSError:
                continue
            if b"RANK" in env and pid != self.proc.pid:
                out[int(env[b"RANK"])] = pid
        return out

    def fault(self, ev):
        ranks = self.rank_pids()
        if ev["rank"] not in ranks:
            return [], [], None  # (between two restarts: no process of that rank)
        victim = ranks[ev["rank"]]
        survivors = [p for r, p in ranks.items() if r != ev["rank"]]
        ev["worker"] = "rank%d" % ev["rank"]
        if ev["kind"] in ("kill-proc", "kill-agent"):
            signal_pids([victim], signal.SIGKILL)
            return [victim], survivors, None
        signal_pids([victim], signal.SIGSTOP)
        return [victim], survivors, lambda: signal_pids([victim], signal.SIGCONT)

    def reforms(self):
        """torchrun's re-forms: each worker group it restarted (its log's failed-worker lines)."""
        log = open(self.log_path, errors="replace").read()
        return {"epoch_changes": len(re.findall(r"failed \(exitcode: ", log))}

    def stop(self):
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGCONT)
                os.killpg(self.proc.pid, signal.SIGKILL)
            except OSError:
                pass
        self.proc.wait()
        signal_pids(processes_with(("KOLO_CHAOS_TAG", self.tag)), signal.SIGKILL)


# ---- one run ----

def read_logs(log_dir):
    """[(time_ms, pid, kind, step, rest)] from every <pid>.log, in time order."""
    rows = []
    for name in os.listdir(log_dir):
        if not name.endswith(".log") or not name[:-4].isdigit():
            continue
        for line in open(os.path.join(log_dir, name)):
            f = line.split()
            if len(f) >= 3 and f[0] in ("START", "RESUME", "STEP", "END") and f[-1].isdigit():
                step = int(f[1]) if f[0] != "START" else 0
                rows.append((int(f[-1]), int(name[:-4]), f[0], step, f[2:-1]))
    return sorted(rows)


def run_one(backend, args, tmp, train_args, schedule):
    """Runs one job (faults from schedule, if any) to its end; returns (phase, logs, faults)."""
    log_dir = os.path.join(tmp, "logs")
    os.makedirs(log_dir)
    train_args = [a.replace("STOP_FILE", os.path.join(log_dir, "stop")) for a in train_args]
    run = (KoloRun if backend == "kolo" else TorchrunRun)(args, tmp, ["--log-dir", log_dir] + train_args)
    faults, pending = [], []  # pending: (at unix s, undo)
    try:
        first = wait("the first step", lambda: min((r[0] for r in read_logs(log_dir) if r[2] == "STEP"), default=0),
                     args.start_timeout, 0.2) / 1000.0
        stop_at = first + args.duration if "--stop-file" in train_args else float("inf")
        for ev in schedule:
            ev = dict(ev)
            while time.time() < first + ev["at"] and not run.ended():
                pending = undo_due(pending)
                stop_at = stop_file(log_dir, stop_at)
                time.sleep(0.05)
            if run.ended():
                break
            victims, survivors, undo = run.fault(ev)
            ev.update({"time_ms": int(time.time() * 1000), "victims": victims, "survivors": survivors})
            faults.append(ev)
            print("  %s t=%5.1fs %-10s rank %d (%s)%s victims %s" % (
                backend, time.time() - first, ev["kind"], ev["rank"], ev.get("worker", "-"),
                " during a re-form" if ev["reform"] else "", victims or "none"), flush=True)
            if undo:
                pending.append((time.time() + ev["restart_after"], undo))
        deadline = time.time() + args.end_timeout
        while not run.ended() and time.time() < deadline:
            pending = undo_due(pending)
            stop_at = stop_file(log_dir, stop_at)
            time.sleep(0.2)
        for _, undo in pending:
            undo()
        phase = run.ended() or "TIMED OUT"
        reforms = run.reforms()
    finally:
        run.stop()
    return phase, read_logs(log_dir), faults, reforms, log_dir


def stop_file(log_dir, stop_at):
    """Makes <log_dir>/stop once stop_at has passed (a run by time); the next stop_at."""
    if time.time() >= stop_at:
        open(os.path.join(log_dir, "stop"), "w").close()
        return float("inf")
    return stop_at


def undo_due(pending):
    left = []
    for at, undo in pending:
        if time.time() >= at:
            undo()
        else:
            left.append((at, undo))
    return left


def analyse(logs, faults):
    """The figures of one run from its logs and faults (those that hit a process)."""
    faults = [f for f in faults if f["victims"]]
    steps = [r for r in logs if r[2] == "STEP"]
    final = max((r[3] for r in steps), default=0)
    first = min((r[0] for r in steps), default=0)
    last = min((r[0] for r in steps if r[3] == final), default=first)
    times = [f["time_ms"] for f in faults] + [float("inf")]
    per_failure = [0] * len(faults)
    high, seen = 0, {}  # seen: (failure, resumed step) -> counted
    for t, pid, kind, step, _ in logs:
        if kind == "STEP":
            high = max(high, step)
        elif kind == "RESUME":
            i = max([k for k in range(len(faults)) if times[k] <= t], default=-1)
            if i >= 0 and (i, step) not in seen:
                seen[(i, step)] = True
                per_failure[i] += max(0, high - step)
    ended = {pid for _, pid, kind, _, _ in logs if kind == "END"}
    victims = {p for f in faults for p in f["victims"]}
    survivors = {p for f in faults for p in f["survivors"]} - victims
    resumes = sorted({(step, t // 1000) for t, _, kind, step, _ in logs if kind == "RESUME"})
    return {"steps": final, "wall_s": round((last - first) / 1000.0, 2),
            "rate": round(final / max((last - first) / 1000.0, 1e-9), 2),
            "redone": per_failure, "redone_max": max(per_failure, default=0),
            "redone_mean": round(sum(per_failure) / len(per_failure), 2) if per_failure else 0.0,
            "survivors": len(survivors), "survivors_kept": len(survivors & ended),
            "same_processes": survivors <= ended, "processes": len({r[1] for r in logs}),
            "trainings_started": len(resumes)}


def result_of(log_dir):
    try:
        return json.load(open(os.path.join(log_dir, "result.json")))
    except OSError:
        return {}


def measure(backend, args, schedule):
    """The undisturbed run (unless --chaos-only), then the run under the schedule."""
    out = {"backend": backend}
    if args.chaos_only:
        train_args = ["--stop-file", "STOP_FILE"]
    else:
        tmp = tempfile.mkdtemp(prefix="kolo-chaos-%s-calm-" % backend)
        try:
            phase, logs, _, reforms, log_dir = run_one(backend, args, tmp, ["--stop-file", "STOP_FILE"], [])
            out["undisturbed"] = dict(analyse(logs, []), phase=phase, accuracy=result_of(log_dir).get("accuracy"),
                                      **reforms)
        finally:
            keep_or_remove(args, tmp)
        print("  %s undisturbed: %s" % (backend, json.dumps(out["undisturbed"])), flush=True)
        train_args = ["--steps", str(out["undisturbed"]["steps"])]
    tmp = tempfile.mkdtemp(prefix="kolo-chaos-%s-" % backend)
    try:
        phase, logs, faults, reforms, log_dir = run_one(backend, args, tmp, train_args, schedule)
        result = result_of(log_dir)
        out["chaos"] = dict(analyse(logs, faults), phase=phase, accuracy=result.get("accuracy"), **reforms)
        out["faults"] = faults
    finally:
        keep_or_remove(args, tmp)
    print("  %s under failures: %s" % (backend, json.dumps(out["chaos"])), flush=True)
    calm = out.get("undisturbed")
    if calm and calm["rate"] and out["chaos"]["steps"] == calm["steps"]:
        out["goodput"] = round(out["chaos"]["rate"] / calm["rate"], 3)
    if calm and calm.get("accuracy") is not None and out["chaos"].get("accuracy") is not None:
        out["accuracy_delta_points"] = round(100 * (out["chaos"]["accuracy"] - calm["accuracy"]), 2)
    return out


def keep_or_remove(args, tmp):
    if args.keep:
        print("  kept %s" % tmp, flush=True)
    else:
        shutil.rmtree(tmp, ignore_errors=True)


def fmt(value, pattern="%s"):
    return "-" if value is None else pattern % value


def table(args, schedule, results):
    kills = sum(1 for e in schedule if e["kind"] != "stop")
    print("\nchaos run, seed %d: %d s undisturbed per backend, %d faults (%d SIGKILL, %d SIGSTOP of %.0f s) every "
          "~%.0f s; 4 workers on 127.0.0.1, %d CPUs, load average %.1f" % (
              args.seed, args.duration, len(schedule), kills, len(schedule) - kills, STOP_S, args.interval,
              os.cpu_count(), os.getloadavg()[0]))
    print("| backend | faults hit | steps redone per failure (max / mean) | steps | wall s (calm / chaos) | "
          "goodput | accuracy (calm / chaos) | re-forms | survivors same pid |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in results:
        c, u = r["chaos"], r.get("undisturbed", {})
        print("| %s | %d | %d / %.2f | %d | %s / %.1f | %s | %s / %s | %s | %s (%d of %d) |" % (
            r["backend"] + ("" if r["backend"] == "kolo" else " (ckpt every %d)" % args.ckpt_every),
            sum(1 for f in r["faults"] if f["victims"]), c["redone_max"], c["redone_mean"], c["steps"],
            fmt(u.get("wall_s"), "%.1f"),
            c["wall_s"], fmt(r.get("goodput") and 100 * r["goodput"], "%.1f%%"),
            fmt(u.get("accuracy") and 100 * u["accuracy"], "%.2f%%"),
            fmt(c.get("accuracy") and 100 * c["accuracy"], "%.2f%%"), fmt(c.get("epoch_changes")),
            "yes" if c["same_processes"] else "no", c["survivors_kept"], c["survivors"]))
    verdicts = targets(results)
    for name, ok, detail in verdicts:
        print("- %s: %s (%s)" % (name, "met" if ok else "NOT met", detail))
    return verdicts


def targets(results):
    by = {r["backend"]: r for r in results}
    out = []
    k = by.get("kolo")
    if k:
        out.append(("kolo: at most 1 step redone per failure", k["chaos"]["redone_max"] <= 1,
                    "max %d" % k["chaos"]["redone_max"]))
        out.append(("kolo: every survivor is the same process at the end", k["chaos"]["same_processes"],
                    "%d of %d" % (k["chaos"]["survivors_kept"], k["chaos"]["survivors"])))
        if "goodput" in k:
            out.append(("kolo: goodput >= 85%", k["goodput"] >= 0.85, "%.1f%%" % (100 * k["goodput"])))
        if "accuracy_delta_points" in k:
            out.append(("kolo: accuracy within 0.5 points", abs(k["accuracy_delta_points"]) <= 0.5,
                        "%+.2f points" % k["accuracy_delta_points"]))
    t = by.get("torchrun")
    if k and t and "goodput" in k and "goodput" in t:
        out.append(("kolo's goodput >= 2x torchrun's", k["goodput"] >= 2 * t["goodput"],
                    "%.2fx" % (k["goodput"] / max(t["goodput"], 1e-9))))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--duration", type=float, default=600, help="seconds of the undisturbed run and the schedule")
    ap.add_argument("--interval", type=float, default=15, help="mean seconds between faults")
    ap.add_argument("--seed", type=int, default=28)
    ap.add_argument("--only", choices=["kolo", "torchrun"], help="one backend")
    ap.add_argument("--chaos-only", action="store_true", help="no undisturbed run (the CI shape)")
    ap.add_argument("--ckpt-every", type=int, default=50, help="torchrun: checkpoint every N steps")
    ap.add_argument("--max-restarts", type=int, default=1000, help="torchrun's --max_restarts")
    ap.add_argument("--start-timeout", type=float, default=300, help="seconds to the first step")
    ap.add_argument("--end-timeout", type=float, default=900, help="seconds past the schedule to the job's end")
    ap.add_argument("--keep", action="store_true", help="keep the logs")
    ap.add_argument("--worker-arg", action="append", default=[],
                    help="one more kolo-worker argument (repeatable), e.g. --worker-arg=--warm-join-ms=0")
    args = ap.parse_args()
    schedule = make_schedule(args.seed, args.duration, args.interval)
    print("schedule (seed %d): %s" % (args.seed, "; ".join(
        "%.1fs %s rank %d%s" % (e["at"], e["kind"], e["rank"], " (re-form)" if e["reform"] else "")
        for e in schedule)), flush=True)
    results = [measure(b, args, schedule) for b in (["kolo", "torchrun"] if not args.only else [args.only])]
    verdicts = table(args, schedule, results)
    print(json.dumps({"seed": args.seed, "duration_s": args.duration, "schedule": schedule, "results": results,
                      "targets": [{"target": n, "met": ok, "measured": d} for n, ok, d in verdicts]}))
    phases = [r["chaos"]["phase"] for r in results if r["backend"] == "kolo"]
    sys.exit(0 if all(p == "SUCCEEDED" for p in phases) else 1)


if __name__ == "__main__":
    main()
