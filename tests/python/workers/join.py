"""Uneven data with join(): rank r has r + 1 batches; a rank out of data joins
and contributes zeros to the others' all-reduces (Average still divides by the
full size) until every rank has joined; join() returns the last rank to join.
Prints 'OK <last rank>'."""
import torch

import kolo.torch as hvd

hvd.init()
rank, size = hvd.rank(), hvd.size()
for batch in range(rank + 1):
    got = hvd.allreduce(torch.ones(5), op=hvd.Sum, name="batch")
    # ranks with more batches than this one's index are still in
    want = float(sum(1 for r in range(size) if r >= batch))
    assert got.tolist() == [want] * 5, (rank, batch, got, want)
    avg = hvd.allreduce(torch.full((3,), 6.0), op=hvd.Average, name="avg")
    assert avg.tolist() == [6.0 * want / size] * 3, (rank, batch, avg)
last = hvd.join()
assert last == size - 1, last
print("OK %d" % last, flush=True)
