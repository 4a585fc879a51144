"""kolo-fleet (bench/scale/) from Python: N simulated kolo-worker agents in one process,
driven over its stdin (kill, drain, join N, stats, quit) and read back from its events
file (one JSON object a line). Used by the fleet tests and bench/scale/run.py."""
import json
import os
import subprocess
import tempfile
import time


class Fleet:
    """One kolo-fleet process; stop() ends it (every agent deregisters)."""

    def __init__(self, bin_dir, etcd_url, workers, *extra, prefix="sim", lease_ttl=3, events=None):
        self.dir = tempfile.mkdtemp(prefix="kolo-fleet-")
        self.events_path = events or os.path.join(self.dir, "events.jsonl")
        self.log_path = os.path.join(self.dir, "fleet.log")
        self.log = open(self.log_path, "w")
        args = [os.path.join(bin_dir, "kolo-fleet"), "--etcd", etcd_url, "--workers", str(workers),
                "--prefix", prefix, "--lease-ttl", str(lease_ttl), "--events", self.events_path]
        self.proc = subprocess.Popen(args + [str(a) for a in extra], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=self.log, text=True)
        line = self.proc.stdout.readline()
        ready = json.loads(line) if line.startswith("{") else {}
        if ready.get("failed", 1) != 0:
            self.kill()
            raise RuntimeError("kolo-fleet did not start: %r\n%s" % (line, self.read_log()))
        self.ready = ready["ready"]

    def read_log(self):
        self.log.flush()
        with open(self.log_path) as f:
            return f.read()

    def send(self, command):
        self.proc.stdin.write(command + "\n")
        self.proc.stdin.flush()

    def stats(self):
        self.send("stats")
        return json.loads(self.proc.stdout.readline())

    def events(self):
        out = []
        try:
            with open(self.events_path) as f:
                for line in f:
                    if line.endswith("\n"):
                        out.append(json.loads(line))
        except OSError:
            pass
        return out

    def stop(self, timeout=120):
        """quit: every agent deregisters; returns the exit code."""
        if self.proc.poll() is None:
            try:
                self.send("quit")
                self.proc.stdin.close()
            except (BrokenPipeError, ValueError):
                pass
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                raise AssertionError("kolo-fleet did not quit:\n" + self.read_log())
        if not self.log.closed:
            self.log.close()
        return self.proc.returncode

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        if not self.log.closed:
            self.log.close()


def wait_until(predicate, timeout, what, interval=0.1):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError("timed out after %.0f s waiting for %s" % (timeout, what))
