"""The examples in examples/pytorch/ run as a user runs them: under kolorun, and
(the elastic one) as a kolo exec job on real etcd, kolo-server and kolo-workers,
with a worker SIGKILLed mid-run."""
import json
import os
import re

import cluster
import kolotest

EXAMPLES = os.path.join(kolotest.SRC, "examples", "pytorch")


def example(name):
    return os.path.join(EXAMPLES, name)


def test_fashion_mnist_reaches_85_percent_with_two_ranks_as_the_readme_runs_it():
    # the README's command, defaults and all (only fewer progress lines)
    result = kolotest.kolorun(2, example("fashion_mnist.py"), "--log-interval", "400", timeout=600)
    accuracies = [float(a) for a in re.findall(r"Accuracy: ([\d.]+)%", result.stdout)]
    assert len(accuracies) == 3, result
    assert accuracies[-1] >= 85.0, result


def test_the_synthetic_benchmark_prints_img_per_sec_per_rank_and_in_total():
    result = kolotest.kolorun(2, example("synthetic_benchmark.py"), "--model", "resnet18", "--image-size", "32",
                              "--batch-size", "4", "--num-classes", "10", "--num-warmup-batches", "1",
                              "--num-batches-per-iter", "2", "--num-iters", "2", timeout=300)
    per_rank = re.search(r"Img/sec per CPU: ([\d.]+)", result.stdout)
    total = re.search(r"Total img/sec on 2 CPU\(s\): ([\d.]+)", result.stdout)
    assert per_rank and total, result
    assert float(per_rank.group(1)) > 0 and float(total.group(1)) > float(per_rank.group(1)), result


def test_the_elastic_example_survives_a_killed_worker_as_a_kolo_job():
    c = cluster.Cluster()
    try:
        for w in ("w1", "w2", "w3"):
            c.start_worker(w)
        c.submit({"id": "efmnist", "name": "efmnist", "min_workers": 2, "max_workers": 3,
                  "exec": {"argv": [kolotest.PYTHON, example("elastic_fashion_mnist.py"), "--epochs", "2",
                                    "--sleep-ms", "2"], "env": {"OMP_NUM_THREADS": "1"}}})
        cluster.wait_for(lambda: c.job("efmnist").get("status", {}).get("progress", {}).get("step", 0) >= 300, 300,
                         "300 batches")
        members = c.job("efmnist")["status"]["members"]
        c.kill_worker([m["worker_id"] for m in members if m["rank"] == 2][0])
        job = c.wait_phase("efmnist", ["SUCCEEDED", "FAILED", "CANCELLED"], 600)
        assert job["status"]["phase"] == "SUCCEEDED", (json.dumps(job)[:3000], c.logs_tail())
        assert job["status"]["reconfigurations"] >= 1, job["status"]
        assert job["status"]["progress"]["accuracy"] >= 0.84, job["status"]
    finally:
        c.stop()
