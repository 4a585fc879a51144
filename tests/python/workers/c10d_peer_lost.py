"""One rank of test_torch_backend's dead-peer case: after a barrier, the last rank
prints READY and sleeps (the test SIGKILLs it); the others start an all-reduce it will
never join and wait() on it. A survivor prints 'FAILED <unix time>' and 'MESSAGE <text>'
when the work fails, then 'AGAIN <text>' for a collective issued after the failure."""
import sys
import time

import torch
import torch.distributed as dist

import kolo.torch.distributed  # noqa: F401  (registers backend "kolo")

dist.init_process_group(backend="kolo")
rank, size = dist.get_rank(), dist.get_world_size()
dist.barrier()
if rank == size - 1:
    print("READY", flush=True)
    time.sleep(600)
    sys.exit(1)
work = dist.all_reduce(torch.ones(1 << 16), async_op=True)
future = work.get_future()
try:
    work.wait()
except RuntimeError as error:
    print("FAILED %.3f" % time.time(), flush=True)
    print("MESSAGE %s" % error, flush=True)
try:
    future.wait()
except RuntimeError as error:
    print("FUTURE %s" % str(error).splitlines()[0], flush=True)
try:
    dist.all_reduce(torch.ones(3))
except RuntimeError as error:
    print("AGAIN %s" % error, flush=True)
sys.exit(0)
