"""Ranks disagree on a tensor: argv[1] is the case. Prints 'ERROR <class> <message>'
on each rank, or 'NOERROR'."""
import sys

import torch

import kolo.torch as hvd

hvd.init()
rank = hvd.rank()
case = sys.argv[1]
try:
    if case == "allreduce-shape":
        hvd.allreduce(torch.ones(10 + rank), name="fc1.weight")
    elif case == "allreduce-dtype":
        hvd.allreduce(torch.ones(10, dtype=torch.float32 if rank == 0 else torch.float64), name="fc1.bias")
    elif case == "allreduce-op":
        hvd.allreduce(torch.ones(10), name="conv.weight", op=hvd.Sum if rank == 0 else hvd.Max)
    elif case == "allgather-shape":
        hvd.allgather(torch.ones(2, 3 + rank), name="features")
    elif case == "broadcast-root":
        hvd.broadcast(torch.ones(3), root_rank=rank, name="weights")
    print("NOERROR", flush=True)
except hvd.KoloError as error:
    print("ERROR %s %s" % (type(error).__name__, error), flush=True)
# the ring still works after a mismatch (the error is per request)
print("AFTER %s" % hvd.allreduce(torch.ones(2), op=hvd.Sum).tolist(), flush=True)
