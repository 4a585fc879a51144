#!/usr/bin/python3
"""All-reduce between hosts that are network namespaces (tests/support/netns.sh), with
each link limited by tc: kolo (kolo-allreduce-perf: its flat ring, its two-level all-reduce,
its recursive doubling and its automatic choice), Open MPI (mpi-allreduce-perf; tcp between
hosts, vader inside; netns.sh as its rsh agent) and PyTorch's gloo (gloo_perf.py), on shapes
of HOSTS x RANKS per host, interleaved (one run of every system, then the next run), medians
of several runs; busbw against the link rate, and each system's time.

Usage: bench/netns/run.py [--runs N] [--shapes 4x2,2x4,8x1] [--rates 10gbit,1gbit]
                          [--sizes 4K:64M:4] [--iters N] [--warmups N] [--systems flat,two_level,...]
                          [--mpi-tuned 1]
Binaries from $KOLO_BIN_DIR (default build/bin). Needs root. Prints one table per
(shape, rate): size, then each system's busbw (GB/s) and time (us), kolo's best against
the link and against the better of Open MPI and gloo."""
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
    """size -> (busbw GB/s, time us) from nccl-tests-style rows (kolo's, MPI's, gloo's)."""
    rows = {}
    for line in text.splitlines():
        words = line.split()
        if len(words) >= 8 and not line.lstrip().startswith("#") and words[0].isdigit():
            rows[int(words[0])] = (float(words[6]), float(words[4]))
    return rows


def sweep_args(sizes, iters, warmups=3):
    low, high, factor = sizes.split(":")
    return ["-b", low, "-e", high, "-f", factor, "-w", str(warmups), "-n", str(iters)]


KOLO_SYSTEMS = {  # name -> extra environment of every rank
    "flat": ["KOLO_MESH=0"],  # kolo before the mesh: gather / pair / flat ring
    "two_level": ["KOLO_ALLREDUCE_ALGO=two_level"],
    "doubling": ["KOLO_ALLREDUCE_ALGO=doubling"],
    "halving": ["KOLO_ALLREDUCE_ALGO=halving"],  # recursive halving, then doubling (Rabenseifner)
    "auto": [],
    "auto_yield": ["KOLO_SPIN_YIELD=1"],  # auto with a stalled spin that always yields (before #34)
}


def run_kolo(hosts, shape, args, extra_env):
    """per ranks on each of shape's hosts (rank r on host r // per); rank 0 holds the
    rendezvous; returns rank 0's output."""
    n_hosts, per = shape
    n = n_hosts * per
    procs = []
    for rank in range(n):
        host = rank // per
        env = ["env", "KOLO_RANK=%d" % rank, "KOLO_SIZE=%d" % n, "KOLO_LOCAL_RANK=%d" % (rank % per),
               "KOLO_LOCAL_SIZE=%d" % per, "KOLO_HOST=%s" % hosts.addresses[host],
               "KOLO_RENDEZVOUS=%s:29500" % hosts.addresses[0], "KOLO_SECRET=bench", "KOLO_TIMEOUT=120"]
        procs.append(subprocess.Popen(hosts.command(host, env + extra_env + [os.path.join(BIN, "kolo-allreduce-perf")] + args),
                                      stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
    outputs = [p.communicate(timeout=900)[0] for p in procs]
    if any(p.returncode for p in procs):
        raise RuntimeError("kolo run failed:\n" + "\n".join(outputs))
    return outputs[0]


# Open MPI across namespaces: its TCP BTL on the namespace's link only, vader between the
# ranks of one host, no binding (more ranks than the 2 cores). --mpi-tuned adds what the
# comparison needs to be fair here (docs/PERFORMANCE.md): ranks that wait yield the CPU
# (mpi_yield_when_idle) instead of spinning over the kernel's network work.
MPI_TUNED = ["--mca", "mpi_yield_when_idle", "1"]


def run_mpi(hosts, shape, args, agent, tuned):
    n_hosts, per = shape
    host_list = ",".join("%s:%d" % (a, per) for a in hosts.addresses[:n_hosts])
    command = ["env", "KOLO_NETNS_OWNER=%d" % hosts.owner, "mpirun", "--allow-run-as-root", "-np", str(n_hosts * per),
               "--host", host_list, "--bind-to", "none", "--mca", "plm_rsh_agent", agent,
               "--mca", "btl", "tcp,self,vader", "--mca", "btl_tcp_if_include", "eth0",
               "--mca", "oob_tcp_if_include", "eth0"] + (MPI_TUNED if tuned else []) + [
               os.path.join(BIN, "mpi-allreduce-perf")] + args
    out = subprocess.run(hosts.command(0, command), capture_output=True, text=True, timeout=900)
    if out.returncode:
        raise RuntimeError("mpirun failed:\n" + out.stdout + out.stderr)
    return out.stdout


def run_gloo(hosts, shape, args):
    n_hosts, per = shape
    n = n_hosts * per
    script = os.path.join(ROOT, "bench", "netns", "gloo_perf.py")
    procs = []
    for rank in range(n):
        host = rank // per
        env = ["env", "GLOO_SOCKET_IFNAME=eth0", "OMP_NUM_THREADS=1"]
        procs.append(subprocess.Popen(hosts.command(host, env + ["/usr/bin/python3", script, str(rank), str(n),
                                                                 "%s:29501" % hosts.addresses[0]] + args),
                                      stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
    outputs = [p.communicate(timeout=900)[0] for p in procs]
    if any(p.returncode for p in procs):
        raise RuntimeError("gloo run failed:\n" + "\n".join(outputs))
    return outputs[0]


def write_agent(directory):
    """Open MPI's rsh agent: `agent HOST CMD...` runs CMD in the namespace host HOST."""
    path = os.path.join(directory, "netns-rsh")
    with open(path, "w") as f:
        f.write('#!/bin/sh\nhost="$1"; shift\n[ "$host" = "-x" ] && { host="$1"; shift; }\n'
                'exec %s exec "$KOLO_NETNS_OWNER" $(( ${host##*.} - 1 )) /bin/sh -c "$*"\n' % NETNS)
    os.chmod(path, 0o755)
    return path


def run_system(system, hosts, shape, args, agent, tuned):
    if system in KOLO_SYSTEMS:
        return run_kolo(hosts, shape, args, KOLO_SYSTEMS[system])
    if system == "mpi":
        return run_mpi(hosts, shape, args, agent, tuned)
    return run_gloo(hosts, shape, args)


def table(shape, rate, systems, runs, n_runs):
    link = rate_gbytes(rate)
    n_hosts, per = shape
    print("\n## %d hosts x %d ranks, links %s (%.3f GB/s each way), medians of %d runs"
          % (n_hosts, per, rate, link, n_runs))
    print("| size | " + " | ".join("%s GB/s (us)" % s for s in systems) + " | best kolo / link | best kolo / best other |")
    print("|---|" + "---|" * (len(systems) + 2))
    for size in sorted(runs[systems[0]][0]):
        med = {}
        for s in systems:
            values = [r[size] for r in runs[s] if size in r]
            med[s] = (statistics.median(v[0] for v in values), statistics.median(v[1] for v in values))
        kolo = max((med[s][0] for s in systems if s in KOLO_SYSTEMS), default=0)
        other = max((med[s][0] for s in systems if s not in KOLO_SYSTEMS), default=0)
        cells = ["%.3f (%.0f)" % med[s] for s in systems]
        print("| %s | %s | %.2f | %s |" % (human(size), " | ".join(cells), kolo / link,
                                           "%.2fx" % (kolo / other) if other else "-"))
    sys.stdout.flush()


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--shapes", default="4x2,2x4,8x1")
    p.add_argument("--rates", default="10gbit,1gbit")
    p.add_argument("--sizes", default="4K:64M:4")
    p.add_argument("--iters", type=int, default=10)
    p.add_argument("--warmups", type=int, default=3)
    p.add_argument("--systems", default="flat,two_level,doubling,halving,auto,mpi,gloo")
    p.add_argument("--mpi-tuned", type=int, default=1)
    o = p.parse_args()
    for binary in ("kolo-allreduce-perf", "mpi-allreduce-perf"):
        if not os.access(os.path.join(BIN, binary), os.X_OK):
            sys.exit("run.py: %s not built in %s" % (binary, BIN))
    args = sweep_args(o.sizes, o.iters, o.warmups)
    systems = o.systems.split(",")
    with open("/proc/loadavg") as f:
        print("# load average at start: %s" % " ".join(f.read().split()[:3]))
    with tempfile.TemporaryDirectory() as tmp:
        agent = write_agent(tmp)
        for shape_text in o.shapes.split(","):
            shape = tuple(int(x) for x in shape_text.split("x"))
            for rate in o.rates.split(","):
                try:
                    hosts = HostSet(shape[0], rate)
                except NamespacesUnavailable as e:
                    sys.exit("run.py: %s" % e)
                runs = {s: [] for s in systems}
                try:
                    for run in range(o.runs):  # interleaved: every system once, then again
                        for s in systems:
                            runs[s].append(parse_rows(run_system(s, hosts, shape, args, agent, o.mpi_tuned)))
                        print("# %s at %s: run %d/%d done" % (shape_text, rate, run + 1, o.runs), file=sys.stderr)
                finally:
                    hosts.close()
                sizes = set(runs[systems[0]][0])
                if not sizes or any(set(r) != sizes for s in systems for r in runs[s]):
                    sys.exit("run.py: the runs did not all report the same sizes: %s" % runs)
                table(shape, rate, systems, runs, o.runs)
    with open("/proc/loadavg") as f:
        print("\n# load average at end: %s" % " ".join(f.read().split()[:3]))


def human(size):
    for unit, scale in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if size >= scale and size % scale == 0:
            return "%d %s" % (size // scale, unit)
    return "%d B" % size


if __name__ == "__main__":
    main()
