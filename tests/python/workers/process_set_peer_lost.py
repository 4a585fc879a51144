"""Ring of 3, process set [0, 2]: ranks 0 and 2 all-reduce on the set in a loop, rank 2
prints READY after a few steps; rank 1 (not a member) waits in a barrier of the ring.
When rank 2 is killed, rank 0 prints 'LOST <class> <rank> <unix time>' and the message
(the rank must be the ring's, 2, not the set's, 1), rank 1 'RING <class>'; both exit 0."""
import sys
import time

import torch

import kolo.torch as hvd

hvd.init()
ps = hvd.add_process_set([0, 2])
if not ps.included():
    try:
        hvd.barrier()
    except hvd.KoloError as error:
        print("RING %s" % type(error).__name__, flush=True)
    sys.exit(0)
tensor = torch.ones(1000)
step = 0
try:
    while True:
        hvd.allreduce_(tensor, op=hvd.Average, process_set=ps)
        step += 1
        if step == 20:
            print("READY", flush=True)
        time.sleep(0.005)
except hvd.KoloError as error:
    print("LOST %s %s %.3f" % (type(error).__name__, error.rank, time.time()), flush=True)
    print("MESSAGE %s" % error, flush=True)
    sys.exit(0)
