#!/usr/bin/python3
"""Recovery benchmark: how long a running job needs from losing a worker to its
next completed step on the new ring, split into detection (loss -> the
coordinator's WORKER_LOST event) and re-form (that event -> first step done at
the new epoch, as printed by rank 0). Starts its own etcd, kolo-server and
kolo-workers on 127.0.0.1, runs recovery_loop as an exec job with min_workers 2
and max_workers 3, and for each round removes one non-zero rank, then starts a
fresh worker so the job grows back to 3 for the next round.

  --mode kill   SIGKILL the worker (its process dies, its sockets close)
  --mode stop   SIGSTOP the worker and its process (a host that vanishes silently:
                nothing closes, only the lease TTL tells)

Usage: bench/recovery/run.py [--build build] [--rounds 5] [--mode kill|stop] [--ttl 2]
Prints one line per round and the medians, and a JSON summary on the last line."""
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
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=data, method=method)
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


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--mode", choices=["kill", "stop"], default="kill")
    ap.add_argument("--ttl", type=int, default=2)
    ap.add_argument("--step-ms", type=int, default=10)
    ap.add_argument("--keep", action="store_true", help="keep the temp dir")
    args = ap.parse_args()

    tmp = tempfile.mkdtemp(prefix="kolo-recovery-")
    procs = []
    workers = {}

    def spawn(argv, log):
        p = subprocess.Popen(argv, stdout=open(os.path.join(tmp, log), "w"), stderr=subprocess.STDOUT)
        procs.append(p)
        return p

    try:
        program = os.path.join(tmp, "recovery_loop")
        subprocess.check_call(["cc", "-O2", "-I", os.path.join(ROOT, "include"),
                               os.path.join(ROOT, "bench/recovery/recovery_loop.c"),
                               "-L", os.path.join(args.build, "lib"), "-lkolo",
                               "-Wl,-rpath," + os.path.join(args.build, "lib"), "-o", program])
        client, peer = free_port(), free_port()
        etcd_url = f"http://127.0.0.1:{client}"
        spawn(["etcd", "--name", "b", "--data-dir", os.path.join(tmp, "etcd"),
               "--listen-client-urls", etcd_url, "--advertise-client-urls", etcd_url,
               "--listen-peer-urls", f"http://127.0.0.1:{peer}",
               "--initial-advertise-peer-urls", f"http://127.0.0.1:{peer}",
               "--initial-cluster", f"b=http://127.0.0.1:{peer}"], "etcd.log")
        wait("etcd", lambda: urllib.request.urlopen(etcd_url + "/health", timeout=1).status == 200, 30)
        port_file = os.path.join(tmp, "server.ports")
        spawn([os.path.join(args.build, "bin/kolo-server"), "--etcd", etcd_url, "--grpc-listen", "127.0.0.1:0",
               "--http-listen", "127.0.0.1:0", "--port-file", port_file, "--leader-ttl", str(args.ttl)],
              "server.log")
        wait("server ports", lambda: os.path.exists(port_file), 20)
        http_port = int(dict(l.strip().split("=") for l in open(port_file))["http_port"])
        wait("leader", lambda: http(http_port, "GET", "/readyz").get("is_leader"), 20)

        def start_worker(n):
            wid = f"w{n}"
            work = os.path.join(tmp, wid)
            workers[wid] = spawn([os.path.join(args.build, "bin/kolo-worker"), "--etcd", etcd_url,
                                  "--advertise", f"127.0.0.1:{free_port()}", "--id", wid,
                                  "--lease-ttl", str(args.ttl), "--work-dir", work], wid + ".log")
            return wid

        next_id = 1
        for _ in range(3):
            start_worker(next_id)
            next_id += 1
        job = "bench"
        http(http_port, "POST", "/v1/jobs", {
            "id": job, "name": "recovery", "min_workers": 2, "max_workers": 3,
            "max_reconfigurations": 1000,
            "exec": {"argv": [program, "100000000", "1024", str(args.step_ms)]}})

        def status():
            return http(http_port, "GET", f"/v1/jobs/{job}")

        def full_ring():
            j = status()
            s = j["status"]
            return j if s["phase"] == "RUNNING" and len(s["members"]) == 3 else None

        rows = []
        for round_no in range(args.rounds):
            j = wait("a full ring", full_ring, 60)
            epoch = j["status"]["epoch"]
            rank0 = j["status"]["members"][0]["worker_id"]
            victim = j["status"]["members"][1 + round_no % 2]["worker_id"]
            log = os.path.join(tmp, rank0, f"{job}.log")
            # let the ring run a moment on this epoch
            wait("steps at the epoch", lambda: any(l.startswith(f"STEP {epoch} ") for l in open(log)), 30)
            time.sleep(0.5)
            seen_events = len(j["events"])
            victim_pids = job_processes(job, victim)
            t0 = now_ms()
            if args.mode == "kill":
                workers[victim].kill()
                workers[victim].wait()
            else:
                workers[victim].send_signal(signal.SIGSTOP)
                for pid in victim_pids:
                    os.kill(pid, signal.SIGSTOP)

            def lost_event():
                for e in status()["events"][seen_events:]:
                    if e["type"] == "WORKER_LOST":
                        return e
                return None

            event = wait("WORKER_LOST", lost_event, 60)
            new_epoch = event["epoch"]

            def first_step():
                for line in open(log):
                    parts = line.split()
                    if len(parts) == 4 and parts[0] == "STEP" and int(parts[1]) >= new_epoch:
                        return int(parts[3])
                return None

            t_step = wait("a step on the new ring", first_step, 60)
            detection = event["time_unix_ms"] - t0
            reform = t_step - event["time_unix_ms"]
            rows.append((detection, reform, t_step - t0))
            print(f"round {round_no + 1}: {args.mode} {victim} at epoch {epoch}: detection {detection} ms, "
                  f"re-form {reform} ms, total {t_step - t0} ms", flush=True)
            if args.mode == "stop":
                for pid in victim_pids:
                    os.kill(pid, signal.SIGKILL)
                workers[victim].kill()
                workers[victim].wait()
            start_worker(next_id)
            next_id += 1

        med = [statistics.median(c) for c in zip(*rows)]
        print(f"median over {len(rows)} rounds ({args.mode}, lease TTL {args.ttl} s): detection {med[0]:.0f} ms, "
              f"re-form {med[1]:.0f} ms, total {med[2]:.0f} ms")
        print(json.dumps({"mode": args.mode, "ttl_s": args.ttl, "rounds": len(rows),
                          "median_detection_ms": med[0], "median_reform_ms": med[1], "median_total_ms": med[2],
                          "rounds_ms": rows}))
    finally:
        for p in reversed(procs):
            if p.poll() is None:
                try:
                    p.send_signal(signal.SIGCONT)
                except OSError:
                    pass
                p.kill()
                p.wait()
        if args.keep:
            print("kept", tmp, file=sys.stderr)
        else:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
