"""A real torch DataLoader with num_workers=2 (forked worker processes) on a
rank: the workers read rank()/size() (worker_init_fn seeds by rank, as Horovod
scripts do), a collective in a worker raises ForkedProcessError instead of
touching the parent's ring, and the parent all-reduces while its workers load.
Then a plain os.fork() child calls shutdown() and exits through sys.exit (which
runs kolo's atexit hook): the parent's ring still works after all of them are
gone. Prints 'OK <batches> <sum>'."""
import os
import sys

import torch

import kolo.torch as hvd

hvd.init()
rank, size = hvd.rank(), hvd.size()
torch.set_num_threads(1)


class Numbers(torch.utils.data.Dataset):
    def __len__(self):
        return 16

    def __getitem__(self, index):
        try:
            hvd.allreduce(torch.ones(1), name="in.a.worker")
            refused = 0
        except hvd.ForkedProcessError as error:
            refused = int(error.status == "KOLO_ERR_STATE" and "DataLoader worker" in str(error))
        seed = torch.initial_seed()
        return torch.tensor([index, hvd.rank(), hvd.size(), refused, os.getpid(), seed], dtype=torch.int64)


def seed_worker(worker_id):
    torch.manual_seed(1000 * hvd.rank() + worker_id)


batches, total = 0, 0.0
for epoch in range(2):
    loader = torch.utils.data.DataLoader(Numbers(), batch_size=4, num_workers=2, worker_init_fn=seed_worker)
    for batch in loader:
        assert (batch[:, 1] == rank).all() and (batch[:, 2] == size).all(), batch
        assert (batch[:, 3] == 1).all(), "a worker's collective was not refused: %s" % batch
        assert (batch[:, 4] != os.getpid()).all(), "the batch was not loaded by a forked worker"
        assert set(batch[:, 5].tolist()) <= {1000 * rank, 1000 * rank + 1}, batch  # seeded by rank
        # the parent's ring, used while its workers still run
        total += float(hvd.allreduce(batch[:, 0].double().sum(), op=hvd.Sum, name="batch.sum"))
        batches += 1
    del loader

child = os.fork()
if child == 0:
    code = 0
    try:
        assert hvd.is_initialized() and hvd.rank() == rank and hvd.size() == size
        try:
            hvd.barrier()
            code = 3
        except hvd.ForkedProcessError:
            pass
        hvd.shutdown()  # a no-op in a fork; so is the atexit hook sys.exit runs
    except BaseException as error:  # any failure is the exit status, never a traceback into the parent's output
        print("child failed: %r" % error, file=sys.stderr, flush=True)
        code = 4
    sys.exit(code)
_, status = os.waitpid(child, 0)
assert os.waitstatus_to_exitcode(status) == 0, "the forked child exited with %d" % os.waitstatus_to_exitcode(status)

hvd.barrier()
after = hvd.allreduce(torch.full((3,), float(rank + 1)), op=hvd.Sum, name="after.fork")
assert after.tolist() == [float(size * (size + 1) // 2)] * 3, after
print("OK %d %g" % (batches, total), flush=True)
hvd.shutdown()
