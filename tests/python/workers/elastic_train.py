"""An elastic kolo.torch job whose outcome is exact: each step trains a small
MLP on the rank's share of a fixed global batch and adds an all-reduced
(Average) per-step value, the same on every rank, to an accumulator. Whatever
the ring does, the final step count is STEPS and the accumulator is the serial
sum only if no step is lost or counted twice.

argv: STEPS COMMIT_EVERY DELAY_MS RESULT_DIR. Every process writes
RESULT_DIR/start-<worker>-<pid> when it starts and RESULT_DIR/init-<worker>-<pid> once
kolo.init() returned (its first ring formed); rank 0 of the final ring writes
RESULT_DIR/result.json; every survivor writes RESULT_DIR/end-<worker>-<pid>.
ELASTIC_TRAIN_INIT_DELAY_S (from the worker's environment) makes the process wait
that long before kolo.init(): a newcomer slower than the ring's timeout.
ELASTIC_TRAIN_PROCESS_SET=1 adds the process set of ranks 0 and 1, on which every step
also all-reduces its value (the set is made again at each re-form); result.json then
holds set_accumulator, exact only if the set's collectives ran right on every ring.
ELASTIC_TRAIN_GATE=<file>: before its last step the loop waits until that file exists,
committing every 20 ms meanwhile (so a ring change is taken up there): a test keeps the job
running until the ring it waits for has formed, however slowly a newcomer starts."""
import json
import os
import sys
import time

import torch

import kolo.torch as hvd

steps, commit_every, delay_ms, out = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
worker = os.environ.get("KOLO_WORKER_ID", "none")
open(os.path.join(out, "start-%s-%d" % (worker, os.getpid())), "w").close()
torch.manual_seed(0)
torch.set_num_threads(1)
time.sleep(float(os.environ.get("ELASTIC_TRAIN_INIT_DELAY_S", "0")))
hvd.init()
open(os.path.join(out, "init-%s-%d" % (worker, os.getpid())), "w").close()
pair = hvd.add_process_set([0, 1]) if os.environ.get("ELASTIC_TRAIN_PROCESS_SET") == "1" else None

GLOBAL_BATCH = 24
model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 2))
optimizer = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9),
                                     named_parameters=model.named_parameters())
sizes = []
executed = [0]  # steps this process ran, redone ones included (not part of the state)


def step_value(step):
    return float((step * 7) % 13)


def on_reset():
    sizes.append(hvd.size())


state = hvd.elastic.TorchState(model, optimizer, step=0, accumulator=0.0, set_accumulator=0.0)
state.register_reset_callbacks([on_reset])


gate = os.environ.get("ELASTIC_TRAIN_GATE")


@hvd.elastic.run
def train(state):
    while state.step < steps:
        if gate and state.step == steps - 1 and not os.path.exists(gate):
            time.sleep(0.02)
            state.commit()
            continue
        rank, size = hvd.rank(), hvd.size()
        generator = torch.Generator().manual_seed(state.step)
        x = torch.randn(GLOBAL_BATCH, 8, generator=generator)
        y = (x.sum(1) > 0).long()
        share = slice(rank * GLOBAL_BATCH // size, (rank + 1) * GLOBAL_BATCH // size)
        optimizer.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(x[share]), y[share])
        loss.backward()
        optimizer.step()
        value = hvd.allreduce(torch.tensor([step_value(state.step)], dtype=torch.float64), name="value")
        state.accumulator += value.item()
        if pair is not None:  # the set's members all-reduce; the others add the same value themselves
            on_set = torch.tensor([step_value(state.step) * (1 + hvd.rank())], dtype=torch.float64)
            state.set_accumulator += (hvd.allreduce(on_set, op=hvd.Sum, name="set_value", process_set=pair).item() / 3
                                      if pair.included() else step_value(state.step))
        state.step += 1
        executed[0] += 1
        if state.step % commit_every == 0 or state.step == steps:
            state.commit()
            hvd.report(step=state.step, total_steps=steps, loss=float(loss))
        time.sleep(delay_ms / 1000.0)


train(state)
expected = sum(step_value(s) for s in range(steps))
weights = torch.cat([p.detach().flatten() for p in model.parameters()])
digest = float(hvd.allreduce(weights, op=hvd.Max).sub(weights).abs().max())  # replicas identical: 0
if hvd.rank() == 0:
    with open(os.path.join(out, "result.json"), "w") as f:
        json.dump({"steps": state.step, "accumulator": state.accumulator, "expected": expected, "size": hvd.size(),
                   "resets": sizes, "reconfigurations": hvd.elastic.reconfigurations(), "replica_gap": digest, "executed": executed[0],
                   "set_accumulator": state.set_accumulator, "set_id": pair.process_set_id if pair else None,
                   "worker": worker, "pid": os.getpid()}, f)
open(os.path.join(out, "end-%s-%d" % (worker, os.getpid())), "w").close()
hvd.shutdown()
