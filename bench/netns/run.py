#!/usr/bin/python3
"""All-reduce between hosts that are network namespaces (tests/support/netns.sh), with
each link limited by tc: kolo (kolo-allreduce-perf, one rank per host, TCP between hosts)
and Open MPI (mpi-allreduce-perf over its TCP BTL, started through netns.sh as its rsh
agent) side by side, interleaved, medians of several runs; busbw against the link rate.

Usage: bench/netns/run.py [--runs N] [--ranks 2,4] [--rates 10gbit,1gbit]
                          [--sizes 4K:64M:4] [--iters N]
Binaries from $KOLO_BIN_DIR (default build/bin). Needs root. Prints one table per
(ranks, rate): size, kolo busbw, MPI busbw, kolo/link, kolo/MPI."""
import argparse
import os
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tests", "support"))
from netns import HostSet, NamespacesUnavailable  # noqa: E402

BIN = os.environ.get("KOLO_BIN_DIR", os.path.join(ROOT, "build", "bin"))
NETNS = os.path.join(ROOT, "tests", "support", "netns.sh")


def rate_gbytes(rate):
    """'10gbit' -> 1.25 (GB/s)."""
    units = {"kbit": 1e3, "mbit": 1e6, "gbit": 1e9}
    for suffix, scale in units.items():
        if rate.endswith(suffix):
            return float(rate[: -len(suffix)]) * scale / 8 / 1e9
    raise ValueError("rate like 1gbit or 500mbit: " + rate)


def parse_rows(text):
    """size -> busbw (GB/s) from nccl-tests-style rows (kolo's or the MPI peer's)."""
    rows = {}
    for line in text.splitlines():
        words = line.split()
        if len(words) >= 8 and not line.lstrip().startswith("#") and words[0].isdigit():
            rows[int(words[0])] = float(words[6])
    return rows


def sweep_args(sizes, iters):
    low, high, factor = sizes.split(":")
    return ["-b", low, "-e", high, "-f", factor, "-w", "3", "-n", str(iters)]


def run_kolo(hosts, n, args):
    """One rank per host; rank 0 holds the rendezvous; returns rank 0's output."""
    procs = []
    for rank in range(n):
        env = ["env", "KOLO_RANK=%d" % rank, "KOLO_SIZE=%d" % n, "KOLO_LOCAL_RANK=0", "KOLO_LOCAL_SIZE=1",
               "KOLO_HOST=%s" % hosts.addresses[rank], "KOLO_RENDEZVOUS=%s:29500" % hosts.addresses[0],
               "KOLO_SECRET=bench", "KOLO_TIMEOUT=120"]
        procs.append(subprocess.Popen(hosts.command(rank, env + [os.path.join(BIN, "kolo-allreduce-perf")] + args),
                                      stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
    outputs = [p.communicate(timeout=900)[0] for p in procs]
    if any(p.returncode for p in procs):
        raise RuntimeError("kolo run failed:\n" + "\n".join(outputs))
    return outputs[0]


def run_mpi(hosts, n, args, agent):
    host_list = ",".join(hosts.addresses[:n])
    command = ["env", "KOLO_NETNS_OWNER=%d" % hosts.owner, "mpirun", "--allow-run-as-root", "-np", str(n),
               "--host", host_list, "--mca", "plm_rsh_agent", agent, "--mca", "btl", "tcp,self",
               "--mca", "btl_tcp_if_include", "eth0", "--mca", "oob_tcp_if_include", "eth0",
               os.path.join(BIN, "mpi-allreduce-perf")] + args
    out = subprocess.run(hosts.command(0, command), capture_output=True, text=True, timeout=900)
    if out.returncode:
        raise RuntimeError("mpirun failed:\n" + out.stdout + out.stderr)
    return out.stdout


def write_agent(directory):
    """Open MPI's rsh agent: `agent HOST CMD...` runs CMD in the namespace host HOST."""
    path = os.path.join(directory, "netns-rsh")
    with open(path, "w") as f:
        f.write('#!/bin/sh\nhost="$1"; shift\n[ "$host" = "-x" ] && { host="$1"; shift; }\n'
                'exec %s exec "$KOLO_NETNS_OWNER" $(( ${host##*.} - 1 )) /bin/sh -c "$*"\n' % NETNS)
    os.chmod(path, 0o755)
    return path


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--ranks", default="2,4")
    p.add_argument("--rates", default="10gbit,1gbit")
    p.add_argument("--sizes", default="4K:64M:4")
    p.add_argument("--iters", type=int, default=10)
    o = p.parse_args()
    for binary in ("kolo-allreduce-perf", "mpi-allreduce-perf"):
        if not os.access(os.path.join(BIN, binary), os.X_OK):
            sys.exit("run.py: %s not built in %s" % (binary, BIN))
    args = sweep_args(o.sizes, o.iters)
    with open("/proc/loadavg") as f:
        print("# load average at start: %s" % " ".join(f.read().split()[:3]))
    with tempfile.TemporaryDirectory() as tmp:
        agent = write_agent(tmp)
        for n in [int(x) for x in o.ranks.split(",")]:
            for rate in o.rates.split(","):
                try:
                    hosts = HostSet(n, rate)
                except NamespacesUnavailable as e:
                    sys.exit("run.py: %s" % e)
                kolo_runs, mpi_runs = [], []
                try:
                    for run in range(o.runs):  # interleaved: kolo, MPI, kolo, MPI, ...
                        kolo_runs.append(parse_rows(run_kolo(hosts, n, args)))
                        mpi_runs.append(parse_rows(run_mpi(hosts, n, args, agent)))
                        print("# %d ranks at %s: run %d/%d done" % (n, rate, run + 1, o.runs), file=sys.stderr)
                finally:
                    hosts.close()
                sizes = set(kolo_runs[0])
                if not sizes or any(set(r) != sizes for r in kolo_runs + mpi_runs):
                    sys.exit("run.py: the runs did not all report the same sizes: %s" % (kolo_runs + mpi_runs))
                link = rate_gbytes(rate)
                print("\n## %d ranks (one per host), links %s (%.3f GB/s each way), medians of %d runs"
                      % (n, rate, link, o.runs))
                print("| size | kolo busbw GB/s | Open MPI busbw GB/s | kolo / link | kolo / MPI |")
                print("|---|---|---|---|---|")
                for size in sorted(kolo_runs[0]):
                    k = statistics.median(r[size] for r in kolo_runs if size in r)
                    m = statistics.median(r[size] for r in mpi_runs if size in r)
                    print("| %s | %.3f | %.3f | %.2f | %.2fx |" % (human(size), k, m, k / link, k / m if m else 0))
    with open("/proc/loadavg") as f:
        print("\n# load average at end: %s" % " ".join(f.read().split()[:3]))


def human(size):
    for unit, scale in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if size >= scale and size % scale == 0:
            return "%d %s" % (size // scale, unit)
    return "%d B" % size


if __name__ == "__main__":
    main()
