"""kolo.torch.elastic.TorchState's per-step commit (kolo.torch.snapshot) with real
PyTorch models and optimizers, in one process: a failure between two steps loses
nothing, one in the middle of a step loses that step only, one during a commit
(a signal raising at a random point of it, thousands of times) restores a whole
commit and never a mix of two, and a commit after the first allocates nothing.
A joiner's state after sync() equals the survivors' bit for bit (3 ranks under
kolorun). (The same commit across a real ring, a SIGKILLed worker and the re-form:
test_elastic.py, which commits every step.)"""
import os
import sys

import pytest
import torch

import kolotest

sys.path.insert(0, os.path.join(kolotest.SRC, "python"))
from kolo.torch.elastic import TorchState  # noqa: E402

STEPS = 12


class Failure(Exception):
    """An injected failure (what a lost peer's PeerLostError is to run())."""


def build(optimizer_kind="sgd"):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(6, 12), torch.nn.BatchNorm1d(12), torch.nn.ReLU(),
                                torch.nn.Linear(12, 3))
    if optimizer_kind == "sgd":
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    else:
        optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    return model, optimizer


def train_step(model, optimizer, step):
    generator = torch.Generator().manual_seed(1000 + step)
    x = torch.randn(16, 6, generator=generator)
    y = torch.randint(0, 3, (16,), generator=generator)
    optimizer.zero_grad()
    torch.nn.functional.cross_entropy(model(x), y).backward()
    optimizer.step()


def run(optimizer_kind, fail_at=None, where=None):
    """Trains STEPS steps committing after each; at step fail_at a Failure is raised
    `where` ("between": after the commit, "mid": after optimizer.step, before the
    commit), the state is restored as run() does and training goes on. Returns the
    final tensors and how many steps were executed (redone ones included)."""
    model, optimizer = build(optimizer_kind)
    state = TorchState(model, optimizer, step=0)
    executed, failed = 0, False
    while state.step < STEPS:
        try:
            while state.step < STEPS:
                train_step(model, optimizer, state.step)
                executed += 1
                if state.step == fail_at and where == "mid" and not failed:
                    failed = True
                    raise Failure()
                state.step += 1
                state.step_done()
                if state.step - 1 == fail_at and where == "between" and not failed:
                    failed = True
                    raise Failure()
        except Failure:
            state.restore()
    tensors = dict(model.state_dict())
    for index, per_param in optimizer.state_dict()["state"].items():
        for key, value in per_param.items():
            tensors["optim.%d.%s" % (index, key)] = value
    return tensors, executed


def assert_same(a, b):
    assert a.keys() == b.keys()
    for key in a:
        assert torch.equal(torch.as_tensor(a[key]), torch.as_tensor(b[key])), key


@pytest.mark.parametrize("optimizer_kind", ["sgd", "adam"])
def test_a_failure_between_two_steps_loses_nothing(optimizer_kind):
    reference, executed = run(optimizer_kind)
    assert executed == STEPS
    got, executed = run(optimizer_kind, fail_at=5, where="between")
    assert executed == STEPS, "a step was redone"
    assert_same(got, reference)


@pytest.mark.parametrize("optimizer_kind", ["sgd", "adam"])
def test_a_failure_in_the_middle_of_a_step_loses_that_step_only(optimizer_kind):
    reference, _ = run(optimizer_kind)
    got, executed = run(optimizer_kind, fail_at=5, where="mid")
    assert executed == STEPS + 1, "exactly the step in flight is redone"
    assert_same(got, reference)  # its half-applied update (weights, momentum, BN stats) rolled back


def test_commit_every_commits_at_every_nth_step_done():
    model, optimizer = build()
    state = TorchState(model, optimizer, commit_every=3, step=0)
    for _ in range(4):
        train_step(model, optimizer, state.step)
        state.step += 1
        state.step_done()
    state.restore()
    assert state.step == 3
    with pytest.raises(ValueError):
        TorchState(model, optimizer, commit_every=0)
    with pytest.raises(ValueError):
        TorchState(model, optimizer, commit=1)  # would shadow TorchState.commit


def test_a_commit_after_the_first_allocates_nothing():
    model, optimizer = build("adam")
    state = TorchState(model, optimizer, step=0)
    for _ in range(3):  # the optimizer creates its state at its first step
        train_step(model, optimizer, 0)
        state.commit()
    before = {id(t): t.data_ptr() for slot in state._snapshot._slots for t in slot.model.values()}
    for _ in range(4):
        train_step(model, optimizer, 0)
        state.commit()
    after = {id(t): t.data_ptr() for slot in state._snapshot._slots for t in slot.model.values()}
    assert before == after


class FillOptimizer(torch.optim.Optimizer):
    """step(value) sets every parameter and its momentum to value (a step whose
    result says which step it was)."""

    def __init__(self, params):
        super().__init__(params, {})
        for group in self.param_groups:
            for p in group["params"]:
                self.state[p]["momentum_buffer"] = torch.zeros_like(p)

    @torch.no_grad()
    def step(self, value=0.0):
        for group in self.param_groups:
            for p in group["params"]:
                p.fill_(value)
                self.state[p]["momentum_buffer"].fill_(value)


class LineFault:
    """Raises Failure at the n-th line executed in kolo.torch's elastic and snapshot
    modules on this thread (sys.settrace): a failure at any point of a commit."""

    FILES = ("elastic.py", "snapshot.py")

    def __init__(self, n):
        self.n, self.count = n, 0

    def __enter__(self):
        sys.settrace(self.call)
        return self

    def __exit__(self, *exc):
        sys.settrace(None)

    def call(self, frame, event, arg):
        if os.path.basename(frame.f_code.co_filename) in self.FILES and "kolo" in frame.f_code.co_filename:
            return self.line
        return None

    def line(self, frame, event, arg):
        if event == "line" and self.n != 0:
            self.count += 1
            if self.count == self.n:
                self.n = 0
                raise Failure()
        return self.line


@pytest.mark.parametrize("overlap", [False, True])
def test_a_failure_during_a_commit_never_mixes_two_commits(overlap):
    # every tensor of the model and of the optimizer holds the step number after each
    # step; a failure is raised at the n-th line of a commit (every n from the first
    # line to past the last); after each, restore() must give one whole commit: every
    # tensor and the step counter equal, the step either the one being committed or
    # the one before (never older)
    model = torch.nn.Sequential(*[torch.nn.Linear(16, 16) for _ in range(4)])
    optimizer = FillOptimizer(model.parameters())
    state = TorchState(model, optimizer, overlap=overlap, step=0)  # commits step 0
    state._snapshot.overlap_min_bytes = 0  # (a small model: copied in the background all the same)
    with LineFault(-1) as counter:  # how many lines one commit runs
        optimizer.step(1.0)
        state.step = 1
        state.commit()
    lines = counter.count
    assert lines > 20, lines
    step, outcomes = 1, {"committed": 0, "rolled back": 0}
    for n in range(1, lines + 3):
        step += 1
        optimizer.step(float(step))
        state.step = step
        try:
            with LineFault(n):
                state.commit()
        except Failure:
            pass
        state.restore()
        values = {float(p.detach().flatten()[0]) for p in model.parameters()}
        values |= {float(optimizer.state[p]["momentum_buffer"].flatten()[0]) for p in model.parameters()}
        for p in model.parameters():
            assert torch.all(p == p.detach().flatten()[0])
        assert values == {float(state.step)}, (n, values, state.step, step)
        assert state.step in (step - 1, step), (n, state.step, step)
        outcomes["committed" if state.step == step else "rolled back"] += 1
        step = state.step
    assert outcomes["committed"] >= 2 and outcomes["rolled back"] >= lines // 2, outcomes


@pytest.mark.parametrize("ranks,path", [(2, "sources"), (3, "sources"), (3, "root")])
def test_a_joiners_state_after_sync_equals_the_survivors_bit_for_bit(ranks, path):
    # survivors that trained three Adam steps and a newcomer with another model and no
    # optimizer state: after TorchState.sync() every tensor is rank 0's, byte for byte
    # (sources: with 3 ranks the newcomer's state comes from rank 1, the nearest survivor;
    # root: the whole state broadcast from rank 0, what one host takes by default)
    result = kolotest.kolorun(ranks, kolotest.worker("joiner_state.py"), timeout=240,
                              extra_env={"KOLO_STATE_SYNC": path})
    for rank in range(ranks):
        assert any(line.startswith("SAME ") and int(line.split()[1]) >= 20 for line in result.lines(rank)), result
