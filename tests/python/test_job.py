"""kolo.torch inside a kolo `exec` job: real etcd, kolo-server and kolo-workers;
the training processes get their ring from the agent (KOLO_AGENT_SOCKET)."""
import json
import os

import cluster
import kolotest


def test_an_exec_job_of_two_workers_forms_one_ring_and_all_reduces():
    c = cluster.Cluster()
    try:
        c.start_worker("w1")
        c.start_worker("w2")
        results = os.path.join(c.dir, "results")
        os.makedirs(results)
        c.submit({"id": "pyjob", "name": "pyjob", "min_workers": 2, "max_workers": 2,
                  "exec": {"argv": [kolotest.PYTHON, kolotest.worker("job_allreduce.py")],
                           "env": {"RESULT_DIR": results}}})
        job = c.wait_phase("pyjob", ["SUCCEEDED", "FAILED", "CANCELLED"], 120)
        assert job["status"]["phase"] == "SUCCEEDED", (json.dumps(job)[:2000], c.logs_tail())
        seen = [json.load(open(os.path.join(results, "rank%d.json" % r))) for r in range(2)]
        assert [s["rank"] for s in seen] == [0, 1]
        assert all(s["size"] == 2 and s["sum"] == 3.0 and s["agent"] for s in seen), seen
    finally:
        c.stop()
