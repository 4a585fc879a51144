"""Process sets (hvd.ProcessSet, add_process_set, process_set=) checked against a
single-process reference: every rank's input is a function of its ring rank, so each
rank computes what a collective over a set's members must give. argv[1] names the
behaviour; prints 'OK <behaviour>' when every check held."""
import os
import sys

import torch

import kolo.torch as hvd

CASE = sys.argv[1]


def value(rank: int, shape=(5, 3), dtype=torch.float64) -> torch.Tensor:
    """What ring rank `rank` contributes: exact in every dtype used here."""
    n = 1
    for d in shape:
        n *= d
    return (torch.arange(n, dtype=torch.float64).reshape(shape) + 100 * (rank + 1)).to(dtype)


def expect(got, want, what):
    assert torch.equal(got, want), "%s: got %s want %s" % (what, got, want)


def evens_and_odds():
    size = int(os.environ["KOLO_SIZE"])  # kolorun's; static sets are given before init
    return [r for r in range(size) if r % 2 == 0], [r for r in range(size) if r % 2 == 1]


def collectives():
    """Every collective on two disjoint sets at once, each rank in one of them."""
    evens, odds = evens_and_odds()
    even_set, odd_set = hvd.ProcessSet(evens), hvd.ProcessSet(odds)
    hvd.init(process_sets=[even_set, odd_set])
    rank = hvd.rank()
    mine, my_set = (evens, even_set) if rank % 2 == 0 else (odds, odd_set)
    ps = hvd.add_process_set([r for r in range(hvd.size()) if r != 0]) if hvd.size() > 2 else None
    assert my_set.included() and my_set.size() == len(mine) and my_set.rank() == mine.index(rank)
    n = len(mine)
    x = value(rank)
    expect(hvd.allreduce(x, op=hvd.Sum, process_set=my_set), sum(value(r) for r in mine), "allreduce sum")
    expect(hvd.allreduce(x, process_set=my_set), sum(value(r) for r in mine) / n, "allreduce average")
    expect(hvd.allreduce(x, op=hvd.Sum, prescale_factor=2.0, postscale_factor=0.5, process_set=my_set),
           sum(value(r) * 2.0 for r in mine) * 0.5, "allreduce scaled")
    got = hvd.grouped_allreduce([x, x * 2], op=hvd.Sum, process_set=my_set)
    expect(got[1], sum(value(r) * 2 for r in mine), "grouped allreduce")
    # all-gather of rank-dependent row counts (global rank r gives r + 1 rows)
    rows = value(rank, (rank + 1, 2))
    expect(hvd.allgather(rows, process_set=my_set), torch.cat([value(r, (r + 1, 2)) for r in mine]), "allgather")
    # broadcast from the set's last member, named by its ring rank (Horovod's convention)
    expect(hvd.broadcast(x, root_rank=mine[-1], process_set=my_set), value(mine[-1]), "broadcast")
    y = x.clone()
    hvd.broadcast_(y, root_rank=mine[0], process_set=my_set)
    expect(y, value(mine[0]), "broadcast_")
    # reduce-scatter: rows split over the set's members (Horovod's split)
    big = value(rank, (7, 2))
    got = hvd.reducescatter(big, op=hvd.Sum, process_set=my_set)
    share = [7 // n + (1 if i < 7 % n else 0) for i in range(n)]
    start = sum(share[:mine.index(rank)])
    expect(got, sum(value(r, (7, 2)) for r in mine)[start:start + share[mine.index(rank)]], "reducescatter")
    # all-to-all with splits: member i sends i + j + 1 rows to member j
    me = mine.index(rank)
    splits = [me + j + 1 for j in range(n)]
    send = value(rank, (sum(splits), 2))
    out, received = hvd.alltoall(send, splits=torch.tensor(splits), process_set=my_set)
    want = []
    for i, r in enumerate(mine):
        theirs = value(r, (sum(i + j + 1 for j in range(n)), 2))
        offset = sum(i + j + 1 for j in range(me))
        want.append(theirs[offset:offset + i + me + 1])
    expect(out, torch.cat(want), "alltoall")
    assert received.tolist() == [i + me + 1 for i in range(n)], received
    hvd.barrier(process_set=my_set)
    assert hvd.broadcast_object({"from": rank}, root_rank=mine[-1], process_set=my_set) == {"from": mine[-1]}
    assert hvd.allgather_object(rank, process_set=my_set) == mine
    # the whole ring still works, and automatic names are counted per communicator
    expect(hvd.allreduce(x, op=hvd.Sum), sum(value(r) for r in range(hvd.size())), "global allreduce")
    if ps is not None and ps.included():
        expect(hvd.allreduce(x, op=hvd.Sum, process_set=ps), sum(value(r) for r in ps.ranks), "third set")
    handle = hvd.allreduce_async(x, op=hvd.Sum, process_set=my_set)
    expect(hvd.synchronize(handle), sum(value(r) for r in mine), "async allreduce")


def non_member():
    hvd.init()
    ps = hvd.add_process_set([0])
    if hvd.rank() == 0:
        expect(hvd.allreduce(value(0), process_set=ps), value(0), "member")
        return
    assert ps.included() is False and ps.size() == 1
    for call in (lambda: hvd.allreduce(value(1), process_set=ps),
                 lambda: hvd.allgather(value(1), process_set=ps),
                 lambda: hvd.broadcast(value(1), 0, process_set=ps),
                 lambda: hvd.barrier(process_set=ps),
                 lambda: ps.rank()):
        try:
            call()
        except ValueError as error:
            assert "not a member" in str(error) or "not part" in str(error), error
        else:
            raise AssertionError("a non-member's call did not raise")


def duplicate_and_bad_ranks():
    hvd.init()
    size = hvd.size()
    first = [size - 1, 0] if size > 2 else [1]
    ps = hvd.add_process_set(first)
    assert ps.ranks == sorted(first) and ps.process_set_id == 1
    for bad in (sorted(first), list(range(size)), [size], [-1, 0], [], [0, 0], ["a"]):
        try:
            hvd.add_process_set(bad)
        except ValueError as error:
            print("refused %s: %s" % (bad, error), flush=True)
        else:
            raise AssertionError("add_process_set(%s) did not raise" % (bad,))
    # nothing changed: the set still works and the next set gets the next id
    expect(hvd.allreduce(value(hvd.rank()), op=hvd.Sum, process_set=ps) if ps.included() else value(0),
           sum(value(r) for r in ps.ranks) if ps.included() else value(0), "after refusals")
    assert hvd.add_process_set([0]).process_set_id == 2


def remove():
    hvd.init()
    assert hvd.remove_process_set(hvd.global_process_set) is False
    assert hvd.global_process_set.process_set_id == 0 and hvd.global_process_set.size() == hvd.size()
    pair = [0, 1] if hvd.size() > 2 else [0]
    ps = hvd.add_process_set(pair)
    if ps.included():
        hvd.allreduce(value(0), process_set=ps)
    assert hvd.remove_process_set(ps) is True
    assert ps.process_set_id is None and ps.size() is None and ps.included() is None
    assert hvd.remove_process_set(ps) is False
    try:
        hvd.allreduce(value(0), process_set=ps)
    except ValueError as error:
        assert "not added" in str(error), error
    else:
        raise AssertionError("a removed set still ran a collective")
    # the id is free again and the ring works
    assert hvd.add_process_set(pair).process_set_id == 1
    expect(hvd.allreduce(value(hvd.rank()), op=hvd.Sum), sum(value(r) for r in range(hvd.size())), "global")


def queries():
    evens, odds = evens_and_odds()
    static = hvd.ProcessSet(evens)
    hvd.init(process_sets=[static])
    assert static.process_set_id == 1
    dynamic = hvd.add_process_set(odds)
    assert dynamic.process_set_id == 2
    rank = hvd.rank()
    assert hvd.global_process_set.ranks == list(range(hvd.size()))
    assert hvd.global_process_set.rank() == rank and hvd.global_process_set.included()
    assert static.included() == (rank in evens) and dynamic.included() == (rank in odds)
    assert static.size() == len(evens) and dynamic.size() == len(odds)
    member = static if rank in evens else dynamic
    assert member.rank() == member.ranks.index(rank)
    assert hvd.rank() == rank  # the ring's rank, not the set's, even right after a set collective
    hvd.allreduce(value(rank), process_set=member)
    assert hvd.rank() == rank and hvd.size() == len(evens) + len(odds)


def optimizer():
    """DistributedOptimizer, broadcast_parameters and broadcast_optimizer_state on the set
    of the last two ranks (the last one of 2): gradients averaged over them only, against one process
    training on their concatenated batches."""
    hvd.init()
    size = hvd.size()
    members = [size - 2, size - 1] if size > 2 else [1]
    ps = hvd.add_process_set(members)
    rank = hvd.rank()
    torch.manual_seed(rank)  # different initial weights: broadcast_parameters must fix them
    model = torch.nn.Linear(3, 1)
    if not ps.included():
        try:
            hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1), process_set=ps)
        except ValueError:
            return
        raise AssertionError("a non-member built a DistributedOptimizer on the set")
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    hvd.broadcast_parameters(model.state_dict(), root_rank=members[-1], process_set=ps)
    opt = hvd.DistributedOptimizer(opt, named_parameters=model.named_parameters(), process_set=ps)
    hvd.broadcast_optimizer_state(opt, root_rank=members[-1], process_set=ps)
    torch.manual_seed(members[-1])
    reference = torch.nn.Linear(3, 1)
    ref_opt = torch.optim.SGD(reference.parameters(), lr=0.1, momentum=0.9)
    expect(model.weight.data, reference.weight.data, "broadcast_parameters")
    for step in range(3):
        batches = {r: (torch.full((4, 3), float(r + step)), torch.full((4, 1), float(r))) for r in members}
        opt.zero_grad()
        x, y = batches[rank]
        torch.nn.functional.mse_loss(model(x), y).backward()
        opt.step()
        ref_opt.zero_grad()
        loss = sum(torch.nn.functional.mse_loss(reference(bx), by) for bx, by in batches.values()) / len(members)
        loss.backward()
        ref_opt.step()
        assert torch.allclose(model.weight.data, reference.weight.data, atol=1e-6), (step, model.weight,
                                                                                       reference.weight)


def join():
    """join on a set: ring rank r of the set has (its index + 1) batches; the set's
    all-reduces go on without a member that joined; join returns the last one (a ring rank)."""
    hvd.init()
    size = hvd.size()
    members = list(range(1, size)) if size > 2 else [1]
    ps = hvd.add_process_set(members)
    if not ps.included():
        return
    me = members.index(hvd.rank())
    for batch in range(me + 1):
        got = hvd.allreduce(torch.ones(4), op=hvd.Sum, name="batch", process_set=ps)
        assert got.tolist() == [float(sum(1 for i in range(len(members)) if i >= batch))] * 4, (batch, got)
    assert hvd.join(process_set=ps) == members[-1]


def gradients():
    """Backward through allgather and broadcast on a set: Horovod's gradients, over the set."""
    evens, odds = evens_and_odds()
    even_set, odd_set = hvd.ProcessSet(evens), hvd.ProcessSet(odds)
    hvd.init(process_sets=[even_set, odd_set])
    rank = hvd.rank()
    mine, ps = (evens, even_set) if rank % 2 == 0 else (odds, odd_set)
    x = value(rank, (2, 2)).requires_grad_()
    gathered = hvd.allgather(x, process_set=ps)
    # loss = sum(gathered * w) with w the same on every member: d/dx = average over members of w's slice
    w = torch.arange(gathered.numel(), dtype=torch.float64).reshape(gathered.shape)
    (gathered * w).sum().backward()
    i = mine.index(rank)
    expect(x.grad, w[2 * i:2 * i + 2], "allgather gradient")
    z = value(rank, (3,)).requires_grad_()
    out = hvd.broadcast(z, root_rank=mine[0], process_set=ps)
    (out * 3).sum().backward()
    want = torch.full((3,), 3.0, dtype=torch.float64) if rank == mine[0] else torch.zeros(3, dtype=torch.float64)
    expect(z.grad, want, "broadcast gradient")


def reform():
    """What kolo.elastic's re-form does to sets (kolo._runtime's "reform"/"reformed" events
    around kolo_elastic_reform; the ring itself is kept here): every set is made again with its
    id and ranks and runs exactly; a set with a rank the new ring lacks fails the re-form."""
    from kolo._runtime import RUNTIME
    from kolo.process_sets import ProcessSetLostError
    hvd.init()
    size, rank = hvd.size(), hvd.rank()
    low = hvd.add_process_set([0, 1] if size > 2 else [0])
    high = hvd.add_process_set([size - 1])
    RUNTIME._notify("reform")
    RUNTIME._notify("reformed")
    assert (low.process_set_id, high.process_set_id) == (1, 2)
    if low.included():
        expect(hvd.allreduce(value(rank), op=hvd.Sum, process_set=low), sum(value(r) for r in low.ranks), "low")
    if high.included():
        expect(hvd.allreduce(value(rank), op=hvd.Sum, process_set=high), value(size - 1), "high")
    RUNTIME.global_size = lambda: size - 1  # the next ring has one rank fewer
    RUNTIME._notify("reform")
    try:
        RUNTIME._notify("reformed")
    except ProcessSetLostError as error:
        assert "process set(s) 2 (ranks [%d])" % (size - 1) in str(error), error
    else:
        raise AssertionError("a set missing a rank survived the re-form")
    del RUNTIME.global_size
    assert low.process_set_id is None and high.process_set_id is None


{"reform": reform, "collectives": collectives, "non_member": non_member, "duplicate_and_bad_ranks": duplicate_and_bad_ranks,
 "remove": remove, "queries": queries, "optimizer": optimizer, "join": join, "gradients": gradients}[CASE]()
hvd.shutdown()
print("OK %s" % CASE, flush=True)
