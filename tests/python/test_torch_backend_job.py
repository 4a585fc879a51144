"""One DDP script (examples/pytorch/ddp_train.py, backend "kolo") under torchrun (through
python3 -m kolo.torch.torchrun, Debian's torchrun with its Python 3.11 fix) and as a kolo
`exec` job on a real cluster (etcd, kolo-server, two kolo-workers): both run, the job's
ranks take the agent's ring, and both end with the same weights (same data, same ring
arithmetic on 2 ranks)."""
from __future__ import annotations

import json
import os
import subprocess
import time
from typing import List

import pytest

import cluster
import kolotest

BUILD = os.environ.get("KOLO_BUILD_DIR", os.path.join(kolotest.SRC, "build"))
SCRIPT = os.path.join(kolotest.SRC, "examples", "pytorch", "ddp_train.py")
ELASTIC = os.path.join(kolotest.SRC, "examples", "pytorch", "ddp_elastic.py")

pytestmark = pytest.mark.skipif(not os.path.exists(os.path.join(BUILD, "lib", "_kolo_c10d.so")),
                                reason="the kolo c10d extension is not built")


def read(results: str) -> List[dict]:
    return [json.load(open(os.path.join(results, "rank%d.json" % r))) for r in range(2)]


def test_the_same_ddp_script_runs_under_torchrun_and_as_a_kolo_exec_job(tmp_path):
    under_torchrun = tmp_path / "torchrun"
    under_torchrun.mkdir()
    held: list = []
    port = kolotest.free_port(held)
    for s in held:  # torchrun's store binds it (a moment later; the test's own risk)
        s.close()
    proc = subprocess.run([kolotest.PYTHON, "-m", "kolo.torch.torchrun", "--nproc_per_node=2",
                           "--master_port=%d" % port, SCRIPT, "--steps", "12", "--result-dir", str(under_torchrun)],
                          capture_output=True, text=True, env=kolotest.env(), timeout=240)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    torchrun_ranks = read(str(under_torchrun))
    assert [r["rank"] for r in torchrun_ranks] == [0, 1] and all(r["size"] == 2 for r in torchrun_ranks)
    assert not any(r["kolo_job"] for r in torchrun_ranks)

    c = cluster.Cluster()
    try:
        c.start_worker("w1")
        c.start_worker("w2")
        results = os.path.join(c.dir, "results")
        os.makedirs(results)
        c.submit({"id": "ddp", "name": "ddp", "min_workers": 2, "max_workers": 2,
                  "exec": {"argv": [kolotest.PYTHON, SCRIPT, "--steps", "12"],
                           "env": {"RESULT_DIR": results, "OMP_NUM_THREADS": "1",
                                   "PYTHONPATH": kolotest.sys_path_entry()}}})
        job = c.wait_phase("ddp", ["SUCCEEDED", "FAILED", "CANCELLED"], 180)
        assert job["status"]["phase"] == "SUCCEEDED", (json.dumps(job)[:2000], c.logs_tail())
        job_ranks = read(results)
    finally:
        c.stop()
    assert all(r["kolo_job"] and r["size"] == 2 for r in job_ranks), job_ranks
    for ours, theirs in zip(job_ranks, torchrun_ranks):
        assert abs(ours["checksum"] - theirs["checksum"]) < 1e-6, (job_ranks, torchrun_ranks)
    assert job_ranks[0]["checksum"] == job_ranks[1]["checksum"]


def test_an_elastic_ddp_job_goes_on_in_the_same_processes_after_a_worker_is_killed():
    """examples/pytorch/ddp_elastic.py (kolo.torch.distributed.elastic_run) as a job of three
    workers, one SIGKILLed mid-run: the two survivors re-form, build a new DDP on the new
    ring and finish every step in the processes they started in, with identical weights."""
    c = cluster.Cluster()
    try:
        for worker in ("w1", "w2", "w3"):
            c.start_worker(worker)
        results = os.path.join(c.dir, "results")
        os.makedirs(results)
        steps = 150
        c.submit({"id": "ddp-elastic", "name": "ddp-elastic", "min_workers": 2, "max_workers": 3,
                  "exec": {"argv": [kolotest.PYTHON, ELASTIC, "--steps", str(steps), "--step-sleep", "0.05"],
                           "env": {"RESULT_DIR": results, "OMP_NUM_THREADS": "1",
                                   "PYTHONPATH": kolotest.sys_path_entry()}}})

        def started() -> List[str]:
            return [n for n in os.listdir(results) if n.startswith("started-")]
        cluster.wait_for(lambda: len(started()) == 3, 120, "three processes started")
        cluster.wait_for(lambda: (c.job("ddp-elastic") or {}).get("status", {}).get("phase") == "RUNNING", 120,
                         "the ring formed")
        time.sleep(2)  # some steps on three ranks
        c.kill_worker("w3")
        job = c.wait_phase("ddp-elastic", ["SUCCEEDED", "FAILED", "CANCELLED"], 240)
        assert job["status"]["phase"] == "SUCCEEDED", (json.dumps(job)[:2000], c.logs_tail())
        ranks = read(results)
        first = set(started())
    finally:
        c.stop()
    assert len(first) == 3, first  # no process was started again
    assert all(r["size"] == 2 and r["steps"] == steps and r["reforms"] >= 1 for r in ranks), ranks
    assert {"started-%d" % r["pid"] for r in ranks} <= first, (ranks, first)
    assert ranks[0]["checksum"] == ranks[1]["checksum"], ranks
