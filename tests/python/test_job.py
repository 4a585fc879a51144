"""kolo.torch inside a kolo `exec` job: real etcd, kolo-server and kolo-workers;
the training processes get their ring from the agent (KOLO_AGENT_SOCKET), the job's
checkpoint_dir (KOLO_CHECKPOINT_DIR), where kolo.torch.Checkpointer writes rank 0's, and its
tensorboard_dir (KOLO_TENSORBOARD_DIR), where kolo.report writes rank 0's event file; and
`kolo get` of a job that reports no total shows "step N", not "N/0"."""
import json
import os
import subprocess

import cluster
import kolotest


def test_an_exec_job_of_two_workers_forms_one_ring_and_all_reduces():
    c = cluster.Cluster()
    try:
        c.start_worker("w1")
        c.start_worker("w2")
        results = os.path.join(c.dir, "results")
        os.makedirs(results)
        checkpoints = os.path.join(c.dir, "checkpoints")
        tensorboard = os.path.join(c.dir, "tensorboard")
        c.submit({"id": "pyjob", "name": "pyjob", "min_workers": 2, "max_workers": 2,
                  "checkpoint_dir": checkpoints, "tensorboard_dir": tensorboard,
                  "exec": {"argv": [kolotest.PYTHON, kolotest.worker("job_allreduce.py")],
                           "env": {"RESULT_DIR": results}}})
        job = c.wait_phase("pyjob", ["SUCCEEDED", "FAILED", "CANCELLED"], 120)
        assert job["status"]["phase"] == "SUCCEEDED", (json.dumps(job)[:2000], c.logs_tail())
        seen = [json.load(open(os.path.join(results, "rank%d.json" % r))) for r in range(2)]
        assert [s["rank"] for s in seen] == [0, 1]
        assert all(s["size"] == 2 and s["sum"] == 3.0 and s["agent"] for s in seen), seen
        assert [s["checkpoint_dir"] for s in seen] == [checkpoints, checkpoints]
        assert os.listdir(checkpoints) == ["checkpoint-000000000001.pt"]  # rank 0's alone
        import torch
        assert torch.load(os.path.join(checkpoints, "checkpoint-000000000001.pt"))["total"] == 3.0
        # the spec's tensorboard_dir: rank 0's report became one event file there
        events = os.listdir(tensorboard)
        assert len(events) == 1 and events[0].startswith("events.out.tfevents."), events
        # #29: kolo get says "step 870" for a job that reports no total (it said "870/0")
        script = "import kolo; kolo.init(); kolo.report(step=870, loss=0.25); kolo.shutdown()"
        c.submit({"id": "no-total", "name": "no-total", "min_workers": 1,
                  "exec": {"argv": [kolotest.PYTHON, "-c", script]}})
        job = c.wait_phase("no-total", ["SUCCEEDED", "FAILED", "CANCELLED"], 120)
        assert job["status"]["phase"] == "SUCCEEDED", (json.dumps(job)[:2000], c.logs_tail())
        out = subprocess.run([os.path.join(kolotest.BIN, "kolo"), "--server", c.grpc_target, "get", "no-total"],
                             capture_output=True, text=True, timeout=30)
        assert out.returncode == 0, out.stderr
        progress = [line for line in out.stdout.splitlines() if line.startswith("PROGRESS")]
        assert progress == ["PROGRESS   step 870, loss 0.25, 0.0 samples/s"], out.stdout
    finally:
        c.stop()
