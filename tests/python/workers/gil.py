"""Rank 0 waits in an all-reduce that rank 1 joins a second late, while a Python
thread of rank 0 counts; prints 'COUNT <n>' (large only if the GIL was released
while kolo waited)."""
import threading
import time

import torch

import kolo.torch as hvd

hvd.init()
hvd.barrier()
if hvd.rank() == 1:
    time.sleep(1.0)
    hvd.allreduce(torch.ones(4))
else:
    counter = [0]
    stop = threading.Event()

    def count():
        while not stop.is_set():
            counter[0] += 1

    thread = threading.Thread(target=count)
    started = time.monotonic()
    thread.start()
    hvd.allreduce(torch.ones(4))
    waited = time.monotonic() - started
    stop.set()
    thread.join()
    print("COUNT %d %.3f" % (counter[0], waited), flush=True)
hvd.shutdown()
