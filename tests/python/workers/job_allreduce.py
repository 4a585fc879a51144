"""A minimal kolo.torch program for an `exec` job: joins the agent's ring,
all-reduces its rank + 1, checkpoints the sum with kolo.torch.Checkpointer (into the
job's checkpoint_dir, KOLO_CHECKPOINT_DIR) and writes what it saw to
$RESULT_DIR/rank<r>.json."""
import json
import os

import torch

import kolo.torch as hvd

hvd.init()
total = hvd.allreduce(torch.tensor([hvd.rank() + 1.0]), op=hvd.Sum).item()
hvd.report(step=1, total_steps=1)
checkpoints = hvd.Checkpointer(keep=1)
checkpoints.save(1, total=total)
checkpoints.close()
with open(os.path.join(os.environ["RESULT_DIR"], "rank%d.json" % hvd.rank()), "w") as f:
    json.dump({"rank": hvd.rank(), "size": hvd.size(), "local_rank": hvd.local_rank(),
               "local_size": hvd.local_size(), "sum": total, "agent": bool(os.environ.get("KOLO_AGENT_SOCKET")),
               "engine": hvd.engine_available(),
               "checkpoint_dir": os.environ.get("KOLO_CHECKPOINT_DIR")}, f)
hvd.shutdown()
