"""All-reduces in a loop; prints READY after a few steps. When a peer dies the
survivor prints 'LOST <class> <rank> <unix time>' and '<message>' and exits 0."""
import sys
import time

import torch

import kolo.torch as hvd

hvd.init()
tensor = torch.ones(1000)
step = 0
try:
    while True:
        hvd.allreduce_(tensor, op=hvd.Average)
        step += 1
        if step == 20:
            print("READY", flush=True)
        time.sleep(0.005)
except hvd.KoloError as error:
    now = time.time()
    print("LOST %s %s %.3f" % (type(error).__name__, error.rank, now), flush=True)
    print("MESSAGE %s" % error, flush=True)
    # the communicator is failed: later calls fail at once, clearly
    try:
        hvd.allreduce(torch.ones(3))
    except hvd.KoloError as again:
        print("AGAIN %s" % type(again).__name__, flush=True)
    sys.exit(0)
