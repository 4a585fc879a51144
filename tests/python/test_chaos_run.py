"""The short seeded chaos run of issue 28 (bench/chaos/run.py, kolo only, no
undisturbed run): an elastic kolo.torch job on 4 kolo-workers of a real cluster
(etcd, kolo-server) trains the Fashion-MNIST MLP with a commit every step for 60 s
from its first step while seed 4's schedule SIGKILLs rank 0's kolo-worker, a
training process while the ring re-forms to take the first victim back, SIGSTOPs
a worker for 5 s, and SIGKILLs rank 0's kolo-worker again. Every failure may cost
at most one step redone, and every process that survived a failure must be the
same process at the end (no live worker taken for dead)."""
import json
import os
import subprocess

import kolotest

SEED, DURATION_S = 4, 60
# four Python processes importing torch on two loaded cores: minutes to the first step
START_S, END_S = 300, 300


def run_chaos():
    command = [kolotest.PYTHON, os.path.join(kolotest.SRC, "bench", "chaos", "run.py"), "--only", "kolo",
               "--chaos-only", "--seed", str(SEED), "--duration", str(DURATION_S), "--interval", "15",
               "--start-timeout", str(START_S), "--end-timeout", str(END_S),
               "--build", os.path.dirname(kolotest.BIN)] + (["--keep"] if os.environ.get("KOLO_KEEP_CLUSTER") else [])
    proc = subprocess.run(command, capture_output=True, text=True, env=kolotest.env(),
                          timeout=START_S + DURATION_S + END_S + 120)
    lines = proc.stdout.strip().splitlines()
    assert lines and lines[-1].startswith("{"), (proc.returncode, proc.stdout[-6000:], proc.stderr[-6000:])
    return proc, json.loads(lines[-1])


def test_every_failure_of_the_seeded_schedule_costs_at_most_one_step_and_no_survivor():
    proc, summary = run_chaos()
    report = "%s\n--- stderr\n%s" % (proc.stdout[-4000:], proc.stderr[-4000:])
    kolo = summary["results"][0]
    chaos = kolo["chaos"]
    assert chaos["phase"] == "SUCCEEDED", report
    kinds = [f["kind"] for f in kolo["faults"]]
    assert kinds == ["kill-agent", "kill-proc", "stop", "kill-agent"], report  # every fault hit a worker
    assert all(f["victims"] for f in kolo["faults"]), report
    assert chaos["reconfigurations"] >= 3, report  # the failures were seen and re-formed
    assert len(chaos["redone"]) == 4 and chaos["redone_max"] <= 1, report
    assert chaos["survivors"] >= 1 and chaos["same_processes"], report
    assert chaos["accuracy"] is not None and chaos["accuracy"] > 0.7, report
    assert proc.returncode == 0, report
