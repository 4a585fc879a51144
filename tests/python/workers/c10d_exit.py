"""One rank of test_torch_backend's exit cases (torchrun-style launch).

  callback: chains a Python callback on an all-reduce's Future that waits until the main
            thread is exiting, then sleeps 0.5 s: it still runs on one of the group's
            threads while the interpreter exits. Prints EXITING, then CALLBACK
            when the callback ends (the atexit hook waits for it). Rank 1 issues its
            all-reduce a second late, so rank 0's callback is always chained on a pending
            Future; rank 1's may find it complete (torch then runs it inline: INLINE).
  after:    shuts every kolo group down by hand (what the atexit hook does), then prints
            COUNT <groups shut down> and AFTER <error> for a collective issued after."""
import sys
import threading
import time

import torch
import torch.distributed as dist

import kolo.torch.distributed as kolo_dist

dist.init_process_group(backend="kolo")
mode = sys.argv[1]
if mode == "callback":
    exiting = threading.Event()
    if dist.get_rank() == 1:
        time.sleep(1.0)  # rank 0's all-reduce stays pending while it chains its callback
    work = dist.all_reduce(torch.ones(4), async_op=True)

    def late(future: torch.futures.Future) -> None:
        if threading.current_thread() is threading.main_thread():
            # the Future completed before then(): torch ran the callback at once
            print("INLINE", flush=True)
            return
        exiting.wait(30)  # runs on while the main thread exits
        time.sleep(0.5)
        print("CALLBACK %s" % future.value()[0].tolist(), flush=True)

    chained = work.get_future().then(late)
    work.wait()
    print("EXITING", flush=True)
    exiting.set()
    sys.exit(0)
dist.barrier()
print("COUNT %d" % kolo_dist.extension().shutdown_all(), flush=True)
try:
    dist.all_reduce(torch.ones(3))
except RuntimeError as error:
    print("AFTER %s" % error, flush=True)
