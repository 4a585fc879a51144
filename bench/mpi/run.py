#!/usr/bin/python3
"""kolo vs Open MPI all-reduce on one machine, both paths, side by side (issue #16).

TCP path:  kolo with KOLO_SHM=0           vs  mpirun --mca btl tcp,self
one host:  kolo default (shared memory)   vs  mpirun --mca btl vader,self (Open MPI's default)

Runs are interleaved (kolo TCP, MPI TCP, kolo shm, MPI shm, then again), each one a whole
size sweep of kolo-allreduce-perf / mpi-allreduce-perf (float32 sum, out of place; each
program reports the median of its per-iteration times, slowest rank). The table gives, per
size and path, the median over the runs of both times and the ratio MPI time / kolo time
(above 1.00x = kolo faster), plus the load average at start and end.

Usage: bench/mpi/run.py [--runs N] [--ranks N] [--sizes 4K:64M:4] [--iters N] [--warmups N]
                        [--paths tcp,shm] [--rt] [--bind core|none]
--rt runs both sides under `chrt -f 10` (root): on a machine loaded by others, the two
programs then get the cores as on a quiet one (for A/B runs; the figures that count are
taken on a quiet machine without it).
--bind core (default) binds rank r of both sides to CPU r (mod the CPU count): Open MPI's own
default for 2 ranks, and kolo's ranks through taskset, so both get the same placement (unbound,
two spinning ranks can share one core while another program busies the other: shm 4 KiB then
reads 5-10 us instead of 1.2). --bind none leaves both to the scheduler (mpirun --bind-to none).
Binaries from $KOLO_BIN_DIR (default build/bin). Exit 1 when a run fails or returns wrong
results."""
import argparse
import os
import statistics
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BIN = os.environ.get("KOLO_BIN_DIR", os.path.join(ROOT, "build", "bin"))
PATHS = {"tcp": ("TCP (KOLO_SHM=0 vs btl tcp,self)", {"KOLO_SHM": "0"}, "tcp,self"),
         "shm": ("one host (kolo default vs btl vader,self)", {}, "vader,self")}
OPTIONS = argparse.Namespace(rt=False, bind="core")
# rank r on CPU r (mod the CPU count), as mpirun --bind-to core places 2 ranks
BIND_KOLO = ["/bin/sh", "-c", 'exec taskset -c $((KOLO_LOCAL_RANK %% %d)) "$@"' % (os.cpu_count() or 1),
             "bind"]


def parse_rows(text):
    """size -> (time in us, #wrong) from nccl-tests-style rows (kolo's or the MPI peer's)."""
    rows = {}
    for line in text.splitlines():
        if line.startswith("["):  # kolorun's "[rank] " prefix
            line = line.split("] ", 1)[-1]
        words = line.split()
        if len(words) >= 8 and not line.lstrip().startswith("#") and words[0].isdigit():
            rows[int(words[0])] = (float(words[4]), words[7])
    return rows


def sweep_args(o):
    low, high, factor = o.sizes.split(":")
    return ["-b", low, "-e", high, "-f", factor, "-w", str(o.warmups), "-n", str(o.iters), "-c", "1"]


def run(command, env_extra):
    if OPTIONS.rt:
        command = ["chrt", "-f", "10"] + command
    env = dict(os.environ)
    env.update(env_extra)
    out = subprocess.run(command, capture_output=True, text=True, timeout=900, env=env)
    if out.returncode:
        sys.exit("run.py: %s failed (exit %d):\n%s%s" % (command[0], out.returncode, out.stdout, out.stderr))
    rows = parse_rows(out.stdout)
    if not rows:
        sys.exit("run.py: no result rows from %s:\n%s%s" % (" ".join(command), out.stdout, out.stderr))
    bad = {size: wrong for size, (_, wrong) in rows.items() if wrong not in ("0", "N/A")}
    if bad:
        sys.exit("run.py: wrong results from %s: %s" % (command[0], bad))
    return {size: t for size, (t, _) in rows.items()}


def run_kolo(o, path):
    command = [os.path.join(BIN, "kolorun"), "--timeout", "600", "-np", str(o.ranks), "--"]
    if o.bind == "core":
        command += BIND_KOLO
    command += [os.path.join(BIN, "kolo-allreduce-perf")] + sweep_args(o)
    return run(command, PATHS[path][1])


def run_mpi(o, path):
    command = ["mpirun", "--allow-run-as-root", "-np", str(o.ranks), "--bind-to", o.bind,
               "--mca", "btl", PATHS[path][2], os.path.join(BIN, "mpi-allreduce-perf")] + sweep_args(o)
    return run(command, {"OMPI_MCA_btl_tcp_if_include": "lo"} if path == "tcp" else {})


def human(size):
    for unit, scale in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if size >= scale and size % scale == 0:
            return "%d %s" % (size // scale, unit)
    return "%d B" % size


def load():
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--ranks", type=int, default=2)
    p.add_argument("--sizes", default="4K:64M:4")
    p.add_argument("--iters", type=int, default=20)
    p.add_argument("--warmups", type=int, default=5)
    p.add_argument("--paths", default="tcp,shm")
    p.add_argument("--rt", action="store_true")
    p.add_argument("--bind", choices=("core", "none"), default="core")
    o = p.parse_args()
    OPTIONS.rt = o.rt
    paths = o.paths.split(",")
    if any(path not in PATHS for path in paths) or o.runs < 1 or o.ranks < 2:
        sys.exit("run.py: --paths takes tcp and/or shm, --runs >= 1, --ranks >= 2")
    if o.bind == "core" and o.ranks > (os.cpu_count() or 1):
        sys.exit("run.py: --bind core needs --ranks <= %d (the CPUs); use --bind none" % (os.cpu_count() or 1))
    for binary in ("kolorun", "kolo-allreduce-perf", "mpi-allreduce-perf"):
        if not os.access(os.path.join(BIN, binary), os.X_OK):
            sys.exit("run.py: %s not built in %s (mpi-allreduce-perf needs libopenmpi-dev)" % (binary, BIN))
    start_load = load()
    results = {(path, side): [] for path in paths for side in ("kolo", "mpi")}
    for r in range(o.runs):  # interleaved: every configuration once per round
        for path in paths:
            results[(path, "kolo")].append(run_kolo(o, path))
            results[(path, "mpi")].append(run_mpi(o, path))
        print("# round %d/%d done (load %s)" % (r + 1, o.runs, load()), file=sys.stderr)
    sizes = sorted(results[(paths[0], "kolo")][0])
    if any(sorted(rows) != sizes for runs in results.values() for rows in runs):
        sys.exit("run.py: the runs did not all report the same sizes")
    print("# kolo vs Open MPI all-reduce, %d ranks on one host, float32 sum, medians of %d "
          "interleaved runs (%d timed iterations each), ranks bound: %s%s" % (
              o.ranks, o.runs, o.iters, "rank r to CPU r" if o.bind == "core" else "no",
              ", both under chrt -f 10" if o.rt else ""))
    print("# load average at start: %s, at end: %s; ratio = MPI time / kolo time (>= 1.00x: kolo "
          "at or ahead)" % (start_load, load()))
    header = "| size |"
    rule = "|---|"
    for path in paths:
        header += " %s: kolo us | MPI us | ratio |" % path
        rule += "---|---|---|"
    print(header)
    print(rule)
    behind = []
    for size in sizes:
        line = "| %s |" % human(size)
        for path in paths:
            k = statistics.median(rows[size] for rows in results[(path, "kolo")])
            m = statistics.median(rows[size] for rows in results[(path, "mpi")])
            ratio = m / k if k > 0 else float("inf")
            if ratio < 1.0:
                behind.append("%s %s" % (path, human(size)))
            line += " %.1f | %.1f | %.2fx |" % (k, m, ratio)
        print(line)
    print("# kolo behind Open MPI at: %s" % (", ".join(behind) if behind else "none"), flush=True)


if __name__ == "__main__":
    main()
