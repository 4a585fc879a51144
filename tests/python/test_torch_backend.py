"""torch.distributed backend "kolo" (kolo.torch.distributed, c10d/): every collective
against gloo's results (and the single-process reference where gloo lacks a dtype or
op) on 2 and 3 real ranks, for every dtype kolo reduces; the rendezvous from torchrun's
env:// variables and from a kolo launch's KOLO_* variables; DDP on it; a dead peer.
Skipped when the extension is not built (CTest registers it only when it is)."""
from __future__ import annotations

import os
import re
import socket
import subprocess
import time
from typing import Dict, List, Optional

import pytest

import kolotest

BUILD = os.environ.get("KOLO_BUILD_DIR", os.path.join(kolotest.SRC, "build"))
EXTENSION = os.path.join(BUILD, "lib", "_kolo_c10d.so")

pytestmark = pytest.mark.skipif(not os.path.exists(EXTENSION), reason="the kolo c10d extension is not built")


class TorchRanks:
    """np processes of script launched as torchrun would: MASTER_ADDR/PORT, RANK,
    WORLD_SIZE, LOCAL_RANK (no KOLO_* variables)."""

    def __init__(self, np: int, script: str, *args: str, extra_env: Optional[Dict[str, str]] = None):
        self.held: List[socket.socket] = []
        port = kolotest.free_port(self.held)
        self.procs: List[subprocess.Popen] = []
        for rank in range(np):
            rank_env = kolotest.env(extra_env)
            rank_env.update({"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "RANK": str(rank),
                             "WORLD_SIZE": str(np), "LOCAL_RANK": str(rank), "LOCAL_WORLD_SIZE": str(np)})
            self.procs.append(subprocess.Popen([kolotest.PYTHON, script] + list(args), env=rank_env,
                                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))

    def wait(self, timeout: float = 180) -> List[kolotest.Result]:
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
            out.append(kolotest.Result(proc.returncode, stdout, stderr))
        self.release()
        return out

    def release(self) -> None:
        for s in self.held:
            s.close()
        self.held = []

    def kill(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        self.release()


def value_of(result: kolotest.Result, key: str) -> Optional[str]:
    for line in result.stdout.splitlines():
        if line.startswith(key + " "):
            return line.split(" ", 1)[1]
    return None


def check_all_ok(results: List[kolotest.Result]) -> None:
    for rank, result in enumerate(results):
        assert result.returncode == 0 and "OK" in result.stdout.splitlines(), "rank %d: %r" % (rank, result)
        assert int(value_of(result, "CHECKS")) > 150, result
        assert int(value_of(result, "GLOO_CHECKS")) > 20, result


def test_every_collective_matches_gloo_on_two_ranks_launched_as_torchrun_does():
    ranks = TorchRanks(2, kolotest.worker("c10d_collectives.py"))
    try:
        check_all_ok(ranks.wait())
    finally:
        ranks.kill()


def test_every_collective_matches_gloo_on_three_ranks_of_a_kolo_launch():
    # KOLO_RANK/KOLO_SIZE/KOLO_RENDEZVOUS as kolorun sets them, no MASTER_ADDR: env:// takes
    # the kolo ring and the default group runs on it
    ranks = kolotest.Ranks(3, kolotest.worker("c10d_collectives.py"))
    try:
        results = ranks.wait(timeout=240)
    finally:
        ranks.kill()
    check_all_ok(results)


def test_ddp_trains_the_same_weights_on_kolo_as_on_gloo_with_hooks_no_sync_static_graph_and_join():
    ranks = kolotest.Ranks(2, kolotest.worker("c10d_ddp.py"))
    try:
        results = ranks.wait(timeout=300)
    finally:
        ranks.kill()
    for rank, result in enumerate(results):
        assert result.returncode == 0 and "OK" in result.stdout.splitlines(), "rank %d: %r" % (rank, result)
        cases = {line.split()[1] for line in result.stdout.splitlines() if line.startswith("CASE ")}
        assert cases == {"buckets", "static_graph", "no_sync", "no_sync_local", "fp16_hook", "powersgd_hook",
                         "join"}, result


def test_a_sigkilled_rank_fails_the_survivors_pending_work_within_a_second():
    ranks = TorchRanks(3, kolotest.worker("c10d_peer_lost.py"))
    try:
        deadline = time.monotonic() + 120
        line = ""
        while time.monotonic() < deadline:
            line = ranks.procs[2].stdout.readline()
            if line.strip() == "READY" or not line:
                break
        assert line.strip() == "READY", ranks.wait(10)
        time.sleep(0.5)  # the survivors' all-reduce is pending
        killed_at = time.time()
        ranks.procs[2].kill()
        results = ranks.wait(60)
    finally:
        ranks.kill()
    for rank in (0, 1):
        out = results[rank].stdout
        failed = re.search(r"FAILED ([\d.]+)", out)
        assert failed and results[rank].returncode == 0, results[rank]
        assert float(failed.group(1)) - killed_at < 1.5, "failed %.3fs after the kill" % (
            float(failed.group(1)) - killed_at)
        message = re.search(r"MESSAGE (.*)", out).group(1)
        assert "rank 2" in message and "KOLO_ERR_PEER_LOST" in message, out
        assert "FUTURE kolo: allreduce failed" in out, out
        assert "AGAIN kolo: allreduce failed" in out, out


def exit_case(mode: str) -> List[kolotest.Result]:
    ranks = TorchRanks(2, kolotest.worker("c10d_exit.py"), mode)
    try:
        return ranks.wait(60)
    finally:
        ranks.kill()


def test_a_callback_still_running_at_exit_finishes_before_python_finalises():
    # without the atexit shutdown the callback's thread takes the GIL during
    # finalisation and the process aborts ("terminate called without an active exception")
    results = exit_case("callback")
    late = ["EXITING", "CALLBACK [2.0, 2.0, 2.0, 2.0]"]
    for result in results:
        assert result.returncode == 0, result
    # rank 0 chained on a pending Future; rank 1's may have completed (run inline)
    assert results[0].stdout.splitlines() == late, results[0]
    assert results[1].stdout.splitlines() in (late, ["INLINE", "EXITING"]), results[1]


def test_a_collective_after_the_exit_shutdown_fails_with_a_clear_error():
    for result in exit_case("after"):
        assert result.returncode == 0 and value_of(result, "COUNT") == "1", result
        assert "shut down (the interpreter is exiting)" in value_of(result, "AFTER"), result
