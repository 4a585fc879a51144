"""One rank of test_torch_backend's exit cases (torchrun-style launch).

  callback: chains a Python callback that sleeps 0.5 s on an all-reduce's Future, waits
            for the all-reduce and exits at once: the callback still runs on one of the
            group's threads while the interpreter exits. Prints EXITING, then CALLBACK
            when the callback ends (the atexit hook waits for it).
  after:    shuts every kolo group down by hand (what the atexit hook does), then prints
            COUNT <groups shut down> and AFTER <error> for a collective issued after."""
import sys
import time

import torch
import torch.distributed as dist

import kolo.torch.distributed as kolo_dist

dist.init_process_group(backend="kolo")
mode = sys.argv[1]
if mode == "callback":
    work = dist.all_reduce(torch.ones(4), async_op=True)

    def late(future: torch.futures.Future) -> None:
        time.sleep(0.5)
        print("CALLBACK %s" % future.value()[0].tolist(), flush=True)

    chained = work.get_future().then(late)
    work.wait()
    print("EXITING", flush=True)
    sys.exit(0)
dist.barrier()
print("COUNT %d" % kolo_dist.extension().shutdown_all(), flush=True)
try:
    dist.all_reduce(torch.ones(3))
except RuntimeError as error:
    print("AFTER %s" % error, flush=True)
