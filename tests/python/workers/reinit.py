"""init() after shutdown() in one process (notebooks, repeated runs): three
rounds, each forming the ring again (under kolorun, or alone) and all-reducing
on it. Prints 'OK <rounds>'."""
import sys

import torch

import kolo.torch as hvd

for round_ in range(3):
    hvd.init()
    size = hvd.size()
    total = hvd.allreduce(torch.full((3,), float(hvd.rank() + round_)), op=hvd.Sum)
    assert total.tolist() == [float(sum(range(size)) + size * round_)] * 3, (round_, total)
    hvd.shutdown()
    assert not hvd.is_initialized()
    try:
        hvd.allreduce(torch.ones(1))
    except hvd.NotInitializedError:
        pass
    else:
        raise AssertionError("an all-reduce after shutdown() was accepted")
print("OK 3")
sys.stdout.flush()
