"""kolo.torch.modes on N real ranks (under kolorun), each check against a
single-process reference: every rank replays every rank's inner steps (the
data of rank r is seeded by r) and applies the mode's definition by hand.

argv: CHECK... (default: all). Prints 'OK <check>' per check passed, and
'STALENESS <max> <max_in_flight>' / 'STEPS <steps>' for the test to count."""
import copy
import sys
import time

import torch

import kolo.torch as hvd
from kolo.torch import modes

hvd.init()
torch.set_num_threads(1)
RANK, SIZE = hvd.rank(), hvd.size()
LR = 0.1


def model():
    torch.manual_seed(1234)
    return torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.Tanh(), torch.nn.Linear(8, 3))


def batch(rank, step):
    g = torch.Generator().manual_seed(1000 * rank + step)
    x = torch.randn(5, 6, generator=g)
    return x, (x[:, 0] > 0).long() + (x[:, 1] > 0).long()


def inner(net, opt, rank, step):
    x, y = batch(rank, step)
    opt.zero_grad()
    torch.nn.functional.cross_entropy(net(x), y).backward()
    opt.step()


def flat(net):
    return torch.cat([p.detach().reshape(-1) for p in net.parameters()])


def same_everywhere(vector, what):
    low = hvd.allreduce(vector, op=hvd.Min, name="check.min." + what)
    high = hvd.allreduce(vector, op=hvd.Max, name="check.max." + what)
    assert torch.equal(low, high), "%s: the ranks differ by %g" % (what, float((high - low).abs().max()))


def reference(steps, h, outer_lr, momentum, nesterov):
    """LOCAL_SGD/DILOCO replayed in this process for every rank (fixed pace)."""
    start = flat(model())
    buf = torch.zeros_like(start)
    nets = [model() for _ in range(SIZE)]
    opts = [torch.optim.SGD(n.parameters(), lr=LR) for n in nets]
    for step in range(steps):
        for r in range(SIZE):
            inner(nets[r], opts[r], r, step)
        if (step + 1) % h == 0:
            delta = sum(start - flat(n) for n in nets) / SIZE
            if momentum:
                buf = momentum * buf + delta
                update = delta + momentum * buf if nesterov else buf
            else:
                update = delta
            start = start - outer_lr * update
            for n in nets:
                modes._write(list(n.parameters()), start)
    return flat(nets[0])


def reference_overlapped(steps, h, outer_lr, momentum, nesterov):
    """LOCAL_SGD/DILOCO with max_staleness 1 replayed here: round r's average
    is folded in at the end of round r + 1 (the outer step one round late,
    each rank keeping the progress it made meanwhile), and the last one at
    the join."""
    start = flat(model())
    buf = torch.zeros_like(start)
    nets = [model() for _ in range(SIZE)]
    opts = [torch.optim.SGD(n.parameters(), lr=LR) for n in nets]
    pending, snaps = None, None

    def outer(start, buf, delta):
        if momentum:
            buf = momentum * buf + delta
            update = delta + momentum * buf if nesterov else buf
        else:
            update = delta
        return start - outer_lr * update, buf

    for step in range(steps):
        for r in range(SIZE):
            inner(nets[r], opts[r], r, step)
        if (step + 1) % h == 0:
            if pending is not None:
                start, buf = outer(start, buf, pending)
                for n, snap in zip(nets, snaps):
                    modes._write(list(n.parameters()), start + (flat(n) - snap))
            pending = sum(start - flat(n) for n in nets) / SIZE
            snaps = [flat(n) for n in nets]
    start, buf = outer(start, buf, pending)
    return start


def run(rounds_class, steps, **kw):
    net = model()
    opt = torch.optim.SGD(net.parameters(), lr=LR)
    with rounds_class(net, opt, pace="fixed", **kw) as rounds:
        for step in range(steps):
            inner(net, opt, RANK, step)
        stats = dict(rounds.stats)
    rounds.close()
    return flat(net), stats


def check_local_sgd_h1_is_sync():
    net = model()
    opt = hvd.DistributedOptimizer(torch.optim.SGD(net.parameters(), lr=LR), named_parameters=net.named_parameters())
    for step in range(6):
        inner(net, opt, RANK, step)
    synced = flat(net)
    local, _ = run(hvd.LocalSGD, 6, sync_every=1)
    assert torch.allclose(local, synced, atol=1e-6), float((local - synced).abs().max())
    assert not torch.equal(synced, flat(model()))


def check_diloco_lr1_momentum0_is_local_sgd():
    local, _ = run(hvd.LocalSGD, 9, sync_every=3)
    diloco, _ = run(hvd.DiLoCo, 9, sync_every=3, outer_lr=1.0, outer_momentum=0.0, nesterov=False)
    assert torch.allclose(local, diloco, atol=1e-6), float((local - diloco).abs().max())
    expected = reference(9, 3, 1.0, 0.0, False)
    assert torch.allclose(local, expected, atol=1e-5), float((local - expected).abs().max())


def check_diloco_matches_its_definition():
    got, stats = run(hvd.DiLoCo, 8, sync_every=2, outer_lr=0.7, outer_momentum=0.9, nesterov=True)
    expected = reference(8, 2, 0.7, 0.9, True)
    assert torch.allclose(got, expected, atol=1e-5), float((got - expected).abs().max())
    assert stats["rounds"] == 4, stats  # (counted before the join)
    plain = reference(8, 2, 0.7, 0.9, False)
    got, _ = run(hvd.DiLoCo, 8, sync_every=2, outer_lr=0.7, outer_momentum=0.9, nesterov=False)
    assert torch.allclose(got, plain, atol=1e-5), float((got - plain).abs().max())


def check_overlapped_rounds_fold_the_average_one_round_late():
    local, stats = run(hvd.LocalSGD, 9, sync_every=3, max_staleness=1)
    assert stats["staleness"] == 1, stats
    diloco, _ = run(hvd.DiLoCo, 9, sync_every=3, outer_lr=1.0, outer_momentum=0.0, nesterov=False,
                    max_staleness=1)
    assert torch.allclose(local, diloco, atol=1e-6), float((local - diloco).abs().max())
    expected = reference_overlapped(9, 3, 1.0, 0.0, False)
    assert torch.allclose(local, expected, atol=1e-5), float((local - expected).abs().max())
    blocking = reference(9, 3, 1.0, 0.0, False)
    assert not torch.allclose(local, blocking, atol=1e-4)  # late is not the same as at once
    got, _ = run(hvd.DiLoCo, 8, sync_every=2, outer_lr=0.7, outer_momentum=0.9, nesterov=True, max_staleness=1)
    expected = reference_overlapped(8, 2, 0.7, 0.9, True)
    assert torch.allclose(got, expected, atol=1e-5), float((got - expected).abs().max())
    same_everywhere(got, "overlapped")
    # int8's ring hops move on at every step (polled) while the next round computes
    got, _ = run(hvd.DiLoCo, 8, sync_every=2, outer_lr=0.7, outer_momentum=0.9, nesterov=True, max_staleness=1,
                 compression="int8")
    assert float((got - expected).abs().max()) < 2e-2, float((got - expected).abs().max())
    same_everywhere(got, "overlapped int8")


def check_compressed_outer_gradients_stay_close():
    expected = reference(8, 4, 0.7, 0.9, True)
    for compression, tolerance in (("fp16", 2e-3), ("int8", 2e-2)):
        got, stats = run(hvd.DiLoCo, 8, sync_every=4, outer_lr=0.7, outer_momentum=0.9, nesterov=True,
                         compression=compression)
        error = float((got - expected).abs().max())
        assert error < tolerance, (compression, error)
        same_everywhere(got, compression)
    sent = {}
    for compression in ("none", "fp16", "int8"):  # a model big enough for the int8 padding not to matter
        big = torch.nn.Linear(200, 200)
        opt = torch.optim.SGD(big.parameters(), lr=LR)
        with hvd.DiLoCo(big, opt, sync_every=2, compression=compression, pace="fixed") as rounds:
            for step in range(4):
                opt.zero_grad()
                big(torch.randn(3, 200)).square().mean().backward()
                opt.step()
        sent[compression] = rounds.stats["bytes_sent"]
        rounds.close()
    # two rounds and join's of 40200 floats: a ring all-reduce sends 2 (n-1)/n of the bytes
    assert sent["none"] == 3 * 2 * (SIZE - 1) * 4 * 40200 // SIZE, sent
    if SIZE > 1:
        assert 1.99 < sent["none"] / sent["fp16"] < 2.01 and 3.8 < sent["none"] / sent["int8"] < 4.0, sent


def check_streaming_fragments_end_identical():
    got, stats = run(hvd.DiLoCo, 12, sync_every=4, fragments=2)
    same_everywhere(got, "fragments")
    assert stats["rounds"] >= 2 and stats["staleness"] == 1, stats  # each fold one step late


def check_async_staleness_is_bounded_with_a_slow_rank():
    bound = 2
    net = model()
    opt = torch.optim.SGD(net.parameters(), lr=LR)
    in_flight = []
    with hvd.BoundedAsync(net, opt, sync_every=1, max_staleness=bound, pace="fixed") as rounds:
        for step in range(16):
            inner(net, opt, RANK, step)
            in_flight.append(len(rounds.frags[0].pending))
            if RANK == SIZE - 1:
                time.sleep(0.05)  # the slow rank
        stats = dict(rounds.stats)
    rounds.close()
    print("STALENESS %d %d" % (stats["staleness"], max(in_flight)), flush=True)
    assert max(in_flight) <= bound and stats["staleness"] <= bound, (in_flight, stats)
    same_everywhere(flat(net), "async")


def check_the_fastest_rank_sets_the_pace():
    # a rank four times slower: rounds end by the fastest rank's time, so it does fewer steps a round
    net = model()
    opt = torch.optim.SGD(net.parameters(), lr=LR)
    steps = 0
    with hvd.LocalSGD(net, opt, sync_every=6) as rounds:
        while rounds.stats["rounds"] < 6:
            inner(net, opt, RANK, steps)
            steps += 1
            time.sleep(0.004 if RANK != SIZE - 1 else 0.016)
    rounds.close()
    print("STEPS %d" % steps, flush=True)
    same_everywhere(flat(net), "pace")


def check_the_state_holds_the_round():
    net = model()
    opt = torch.optim.SGD(net.parameters(), lr=LR)
    rounds = hvd.DiLoCo(net, opt, sync_every=2, pace="fixed").__enter__()
    state = hvd.elastic.TorchState(net, opt, step=0)
    for step in range(5):
        inner(net, opt, RANK, step)
    state.commit()
    saved = (copy.deepcopy(rounds.frags[0].start), copy.deepcopy(rounds.frags[0].momentum), rounds.round_steps)
    assert saved[1].abs().sum() > 0 and saved[2] == 1
    for step in range(5, 8):
        inner(net, opt, RANK, step)
    assert not torch.equal(rounds.frags[0].momentum, saved[1])
    state.restore()
    assert torch.equal(rounds.frags[0].start, saved[0]) and torch.equal(rounds.frags[0].momentum, saved[1])
    assert rounds.round_steps == 1
    if RANK == 0:
        rounds.frags[0].momentum.add_(1.0)
    state.sync()  # rank 0's round: its (changed) momentum everywhere
    same_everywhere(rounds.frags[0].momentum, "momentum")
    rounds.__exit__(None, None, None)
    rounds.close()


CHECKS = {name[len("check_"):]: f for name, f in sorted(globals().items()) if name.startswith("check_")}
for name in sys.argv[1:] or list(CHECKS):
    CHECKS[name]()
    print("OK %s" % name, flush=True)
hvd.shutdown()
