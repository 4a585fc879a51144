"""Helpers of the Python package tests: run a script as N real ranks (under the
real kolorun, or started here with a hand-made rendezvous so a test can kill one
rank), with /usr/bin/python3, the source tree's kolo package and the build's
libkolo. Every wait has a deadline; every process started is killed in cleanup."""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from typing import Dict, List, Optional, Sequence

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.environ.get("KOLO_SOURCE_DIR", os.path.dirname(os.path.dirname(HERE)))
BIN = os.environ.get("KOLO_BIN_DIR", os.path.join(SRC, "build", "bin"))
TESTS = os.environ.get("KOLO_TEST_DIR", os.path.join(SRC, "build", "tests"))
WORKERS = os.path.join(HERE, "workers")
PYTHON = "/usr/bin/python3"


def env(extra: Optional[Dict[str, str]] = None) -> Dict[str, str]:
    """The environment of a rank: this tree's package first on the path, one
    thread per rank (two cores shared by everyone), libkolo from the build."""
    out = dict(os.environ)
    for name in list(out):
        if name.startswith("KOLO_") and name not in ("KOLO_LIBRARY", "KOLO_BIN_DIR", "KOLO_TEST_DIR",
                                                      "KOLO_SOURCE_DIR", "KOLO_BUILD_DIR", "KOLO_PY_ENGINE"):
            del out[name]
    out["PYTHONPATH"] = os.path.join(SRC, "python") + (":" + out["PYTHONPATH"] if out.get("PYTHONPATH") else "")
    out.setdefault("OMP_NUM_THREADS", "1")
    out.setdefault("KOLO_TIMEOUT", "60")
    if "KOLO_LIBRARY" not in out and os.environ.get("KOLO_BUILD_DIR"):
        out["KOLO_LIBRARY"] = os.path.join(os.environ["KOLO_BUILD_DIR"], "lib", "libkolo.so")
    out.update(extra or {})
    return out


def worker(name: str) -> str:
    return os.path.join(WORKERS, name)


class Result:
    def __init__(self, returncode: int, stdout: str, stderr: str):
        self.returncode = returncode
        self.stdout = stdout
        self.stderr = stderr

    def lines(self, rank: int) -> List[str]:
        """kolorun prefixes each rank's lines with [rank]."""
        prefix = "[%d] " % rank
        return [line[len(prefix):] for line in self.stdout.splitlines() if line.startswith(prefix)]

    def values(self, key: str) -> Dict[int, str]:
        """'KEY value' lines by rank."""
        out = {}
        for line in self.stdout.splitlines():
            if line.startswith("[") and "] %s " % key in line:
                rank = int(line[1:line.index("]")])
                out[rank] = line.split("] %s " % key, 1)[1].strip()
        return out

    def __repr__(self) -> str:
        return "rc=%d\n--- stdout\n%s\n--- stderr\n%s" % (self.returncode, self.stdout[-6000:], self.stderr[-6000:])


def kolorun(np: int, script: str, *args: str, timeout: int = 240, extra_env: Optional[Dict[str, str]] = None,
            check: bool = True) -> Result:
    """Runs script on np ranks under build/bin/kolorun."""
    command = [os.path.join(BIN, "kolorun"), "-np", str(np), "--timeout", str(timeout), PYTHON, script] + list(args)
    proc = subprocess.run(command, capture_output=True, text=True, env=env(extra_env), timeout=timeout + 30)
    result = Result(proc.returncode, proc.stdout, proc.stderr)
    if check:
        assert proc.returncode == 0, result
    return result


def free_port(hold: Optional[List[socket.socket]] = None) -> int:
    """A free port on 127.0.0.1. With hold, the port stays ours until the caller closes the
    socket appended there: bound with SO_REUSEADDR and never listening, so no bind to port 0
    nor connect() on the machine is given it, while kolo's listeners (SO_REUSEADDR: the TCP
    transport, the rendezvous, kolo-worker) still listen there (tests/support/ports.h). A
    port picked and closed is anyone's until its program listens."""
    s = socket.socket()
    if hold is None:
        with s:
            s.bind(("127.0.0.1", 0))
            return s.getsockname()[1]
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("127.0.0.1", 0))
    hold.append(s)
    return s.getsockname()[1]


class Ranks:
    """np processes of script with a rendezvous made here (no kolorun), so a
    test can signal one rank and watch the others."""

    def __init__(self, np: int, script: str, *args: str, extra_env: Optional[Dict[str, str]] = None):
        self.held: List[socket.socket] = []  # the rendezvous port until the ranks end
        rendezvous = "127.0.0.1:%d" % free_port(self.held)
        self.procs: List[subprocess.Popen] = []
        for rank in range(np):
            rank_env = env(extra_env)
            rank_env.update({"KOLO_RANK": str(rank), "KOLO_SIZE": str(np), "KOLO_LOCAL_RANK": str(rank),
                             "KOLO_LOCAL_SIZE": str(np), "KOLO_RENDEZVOUS": rendezvous, "KOLO_SECRET": "test"})
            self.procs.append(subprocess.Popen([PYTHON, script] + list(args), env=rank_env, stdout=subprocess.PIPE,
                                               stderr=subprocess.PIPE, text=True))

    def wait(self, timeout: float = 120) -> List[Result]:
        deadline = time.monotonic() + timeout
        out = []
        for proc in self.procs:
            try:
                stdout, stderr = proc.communicate(timeout=max(deadline - time.monotonic(), 0.1))
            except subprocess.TimeoutExpired:
                self.kill()
                stdout, stderr = proc.communicate()
                raise AssertionError("rank pid %d did not finish in %ss:\n%s\n%s" % (proc.pid, timeout, stdout,
                                                                                    stderr))
            out.append(Result(proc.returncode, stdout, stderr))
        self.release()
        return out

    def release(self) -> None:
        for s in self.held:
            s.close()
        self.held = []

    def signal(self, rank: int, sig: int = signal.SIGKILL) -> None:
        self.procs[rank].send_signal(sig)

    def kill(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        self.release()


def run_python(code: str, extra_env: Optional[Dict[str, str]] = None, timeout: int = 120) -> Result:
    """One /usr/bin/python3 -c code with the test environment."""
    proc = subprocess.run([PYTHON, "-c", code], capture_output=True, text=True, env=env(extra_env), timeout=timeout)
    return Result(proc.returncode, proc.stdout, proc.stderr)


def sys_path_entry() -> str:
    return os.path.join(SRC, "python")


if os.path.join(SRC, "python") not in sys.path:
    sys.path.insert(0, os.path.join(SRC, "python"))


def tail(text: str, lines: int = 40) -> str:
    return "\n".join(text.splitlines()[-lines:])


def args_list(values: Sequence[object]) -> List[str]:
    return [str(v) for v in values]
