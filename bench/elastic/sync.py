#!/usr/bin/python3
"""The state sync alone (issue 28's joiner), old path against new, interleaved: 3 ranks
under kolorun (shared memory between them), kolo_sync_buffers of one --state-mb MiB
buffer, timed from a barrier to the slowest rank's return; "join" (the last rank a
newcomer) and "loss" (every rank holds rank 0's bytes). "root" is KOLO_STATE_SYNC=root
(the whole buffer broadcast from rank 0 around the ring, as before issue 28's joiner
change), "sources" KOLO_STATE_SYNC=sources (digests, then only to the ranks that differ,
from the nearest holder). --hosts puts each rank on its own faked host (127.0.0.<r+1>):
TCP between ranks, where auto (unset) picks sources. Medians over --runs kolorun runs x --rounds rounds.

--netns RATE puts each rank in its own network namespace with tc-limited links
(tests/support/netns.sh, root).

Usage: bench/elastic/sync.py [--build build] [--state-mb 100] [--runs 4] [--rounds 5] [--np 3]
                             [--hosts | --netns 1gbit]
Run it under flock -o /tmp/kolo-heavy.lock."""
import argparse, os, shutil, statistics, subprocess, sys, tempfile, time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tests", "support"))


def run_netns(hostset, args, program, mode, variant):
    """rank r in namespace host r (bench/netns/run.py's launch); rank 0's output."""
    procs = []
    for rank in range(args.np):
        env = ["env", "KOLO_RANK=%d" % rank, "KOLO_SIZE=%d" % args.np, "KOLO_LOCAL_RANK=0", "KOLO_LOCAL_SIZE=1",
               "KOLO_HOST=%s" % hostset.addresses[rank], "KOLO_RENDEZVOUS=%s:29500" % hostset.addresses[0],
               "KOLO_SECRET=bench", "KOLO_TIMEOUT=120", "KOLO_STATE_SYNC=%s" % variant]
        procs.append(subprocess.Popen(hostset.command(rank, env + [program, str(args.state_mb), str(args.rounds), mode]),
                                      stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
    outputs = [p.communicate(timeout=600)[0] for p in procs]
    if any(p.returncode for p in procs):
        raise SystemExit("netns run failed:\n" + "\n".join(o[-1500:] for o in outputs))
    return outputs[0]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--state-mb", type=int, default=100)
    ap.add_argument("--runs", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--np", type=int, default=3)
    ap.add_argument("--netns", metavar="RATE", help="each rank in its own network namespace, links limited to "
                    "RATE by tc (e.g. 1gbit; tests/support/netns.sh, needs root)")
    ap.add_argument("--hosts", action="store_true",
                    help="each rank on its own faked host (a loopback address): TCP links, and auto picks sources")
    args = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="kolo-sync-bench-")
    results = {}
    try:
        program = os.path.join(tmp, "sync_bench")
        subprocess.check_call(["cc", "-O2", "-I", os.path.join(ROOT, "include"),
                               os.path.join(ROOT, "bench/elastic/sync_bench.c"), "-L", os.path.join(args.build, "lib"),
                               "-lkolo", "-Wl,-rpath," + os.path.join(args.build, "lib"), "-o", program])
        hostset = None
        if args.netns:
            from netns import HostSet
            hostset = HostSet(args.np, args.netns)
        load_before = os.getloadavg()
        for run in range(args.runs):
            variants = ["root", "sources"] if run % 2 == 0 else ["sources", "root"]
            for mode in ("join", "loss"):
                for variant in variants:
                    env = dict(os.environ)
                    if hostset is not None:
                        stdout = run_netns(hostset, args, program, mode, variant)
                        times = [float(l.split()[-1]) for l in stdout.splitlines() if l.startswith("SYNC")]
                        results.setdefault((mode, variant), []).extend(times[1:])
                        continue
                    env["KOLO_STATE_SYNC"] = variant
                    argv = [program, str(args.state_mb), str(args.rounds), mode]
                    if args.hosts:  # every rank its own host: 127.0.0.<rank + 1>, TCP between them
                        argv = ["/bin/sh", "-c", 'KOLO_HOST=127.0.0.$((KOLO_RANK + 1)) exec "$0" "$@"'] + argv
                    out = subprocess.run([os.path.join(args.build, "bin/kolorun"), "--timeout", "300", "-np",
                                          str(args.np), "--"] + argv, env=env, capture_output=True, text=True,
                                         timeout=320)
                    if out.returncode != 0:
                        raise SystemExit("kolorun failed: " + out.stdout[-1000:] + out.stderr[-2000:])
                    times = [float(l.split()[-1]) for l in out.stdout.splitlines() if " SYNC " in l or
                             l.startswith("SYNC")]
                    results.setdefault((mode, variant), []).extend(times[1:])  # the first round warms up
        load_after = os.getloadavg()
        if hostset is not None:
            hostset.close()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    where = "one host each (TCP over loopback)" if args.hosts else "one host (shared memory)"
    if args.netns:
        where = "one network namespace each, links %s" % args.netns
    print(f"state sync of {args.state_mb} MiB on {args.np} ranks, {where}, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, "
          f"load average {load_before[0]:.1f} before, {load_after[0]:.1f} after, {os.cpu_count()} CPUs")
    print("| case | root (old) ms, median (min-max) | sources (new) ms | rounds |")
    print("|---|---|---|---|")
    for mode in ("join", "loss"):
        cells = []
        for variant in ("root", "sources"):
            v = results[(mode, variant)]
            cells.append(f"{statistics.median(v):.1f} ({min(v):.1f}-{max(v):.1f})")
        print(f"| {mode} | {cells[0]} | {cells[1]} | {len(results[(mode, 'root')])} |")


if __name__ == "__main__":
    main()
