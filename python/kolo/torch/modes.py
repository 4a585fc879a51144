"""kolo.torch's communication-efficient modes for any PyTorch model: ASYNC
(bounded-staleness background averaging), LOCAL_SGD and DILOCO (H inner steps
of the user's optimizer, then an outer Nesterov-SGD step on the averaged
pseudo-gradient), with optional fp16/int8 outer gradients and streaming
fragments. See docs/PYTHON.md for the guarantees.

A Rounds object hooks the user's optimizer: after each of its step()s it counts
the step and, when the round is over, syncs the model (or the next fragment of
it) with one weighted average over the ring (_reduce.Reduction). Blocking modes
wait for it at once; ASYNC and streaming fragments let it run in the background
and fold it in when it completes: params += result - params_at_submission,
keeping the local progress made meanwhile, with at most `outstanding` syncs of
a fragment in flight (the staleness bound; a rank blocks only there).

Overlapped rounds: LOCAL_SGD/DILOCO with max_staleness = k >= 1 start round
r's average and go on training; it is folded in at the end of round r + k,
just before that round's own average starts (never earlier, so the result
does not depend on when the transfer finished: the same run gives the same
bits), and a rank waits only if it has not arrived by then. The outer step is
then k rounds late (the delayed outer step of Streaming DiLoCo); the pseudo-
gradient of a round is exactly the local progress made in it.

Stragglers: with pace="fastest" (the default) a round ends after H steps or
once the rank has computed for H steps of the fastest rank (times 1 + slack),
whichever comes first; every average is weighted by the steps each rank did.
A half-speed rank then does about H/2 steps a round and the others never wait
for it (measured in docs/PERFORMANCE.md). pace="fixed" makes every round
exactly H steps (deterministic). A rank that has run out of data calls join()
(or optimizer.synchronize()): it keeps taking part, contributing nothing,
until every rank has joined, and all end with the same parameters."""
from __future__ import annotations

import time
from typing import Any, Dict, List, Optional

import torch

from .. import REPORT_EXTRAS, mode as _mode
from .._runtime import RUNTIME
from ._reduce import Reduction
from .ops import join as _ops_join

PACES = ("fastest", "fixed")
SLACK = 0.05  # pace="fastest": a round may last this much longer than the fastest rank's H steps
_NAME_CYCLE = 1 << 16  # sync names repeat after this many syncs of a fragment (never two in flight)
_ACTIVE: List["Rounds"] = []  # live Rounds objects: kolo.report() adds their statistics


def active_reports() -> Dict[str, Any]:
    """The REPORT keys of the live Rounds objects (the last one wins)."""
    out: Dict[str, Any] = {}
    for rounds in _ACTIVE:
        out.update(rounds.report())
    return out


if active_reports not in REPORT_EXTRAS:
    REPORT_EXTRAS.append(active_reports)


def _flat(params: List[torch.Tensor]) -> torch.Tensor:
    return torch.cat([p.detach().reshape(-1).to(torch.float32) for p in params])


def _write(params: List[torch.Tensor], flat: torch.Tensor) -> None:
    offset = 0
    with torch.no_grad():
        for p in params:
            n = p.numel()
            p.copy_(flat[offset : offset + n].view_as(p))
            offset += n


def _split(params: List[torch.Tensor], fragments: int) -> List[List[torch.Tensor]]:
    """params in `fragments` contiguous groups of about equal size (in order)."""
    if fragments > len(params):
        raise ValueError(
            "kolo: fragments (%d) must not exceed the number of parameter tensors (%d)" % (fragments, len(params))
        )
    total = sum(p.numel() for p in params)
    groups: List[List[torch.Tensor]] = [[]]
    seen = 0
    for i, p in enumerate(params):
        left_groups = fragments - len(groups)
        if (
            groups[-1]
            and left_groups > 0
            and (len(params) - i <= left_groups or seen >= total * len(groups) / fragments)
        ):
            groups.append([])
        groups[-1].append(p)
        seen += p.numel()
    return groups


class _Pending:
    def __init__(self, reduction: Reduction, snapshot: torch.Tensor, seq: int) -> None:
        self.reduction = reduction
        self.snapshot = snapshot
        self.seq = seq


class _Fragment:
    """One part of the model synced together: its round start and outer
    momentum (outer kind), its syncs in flight, its counters."""

    def __init__(self, index: int, params: List[torch.Tensor]) -> None:
        self.index = index
        self.params = params
        self.start: Optional[torch.Tensor] = None
        self.momentum: Optional[torch.Tensor] = None
        self.pending: List[_Pending] = []
        self.seq = 0  # syncs of this fragment begun (the same on every rank)
        self.steps_since = 0  # this rank's steps since its last sync


class Rounds:
    """A mode applied to an optimizer (see the module doc). Use the subclasses
    LocalSGD, DiLoCo, BoundedAsync, or Rounds.from_spec(kolo.mode.ModeSpec)."""

    def __init__(
        self,
        params: Any,
        optimizer: torch.optim.Optimizer,
        spec: _mode.ModeSpec,
        pace: str = "fastest",
        slack: float = SLACK,
    ) -> None:
        if spec.mode == "SYNC":
            raise ValueError("kolo: SYNC needs no Rounds: use kolo.torch.DistributedOptimizer")
        if pace not in PACES:
            raise ValueError("kolo: pace must be 'fastest' or 'fixed', not %r" % (pace,))
        if not slack >= 0:
            raise ValueError("kolo: slack must be >= 0")
        if not isinstance(optimizer, torch.optim.Optimizer):
            raise TypeError("kolo: expected a torch.optim.Optimizer, not %s" % type(optimizer).__name__)
        if isinstance(params, torch.nn.Module):
            params = list(params.parameters())
        elif params is None:
            params = [p for group in optimizer.param_groups for p in group["params"]]
        else:
            params = list(params)
        params = [p for p in params if p.dtype.is_floating_point]
        if not params:
            raise ValueError("kolo: the model has no floating-point parameters to average")
        RUNTIME.require()
        self.spec = spec
        self.optimizer = optimizer
        self.pace = pace
        self.slack = float(slack)
        self.params = params
        self.frags = [_Fragment(i, group) for i, group in enumerate(_split(params, spec.fragments))]
        # outer kind: the pseudo-gradient goes to an outer SGD; else the parameters are averaged
        self.outer = spec.mode == "DILOCO" or (
            spec.mode == "LOCAL_SGD" and (spec.compression != "none" or spec.fragments > 1)
        )
        # syncs of one fragment allowed in flight while this rank steps on
        if spec.mode == "ASYNC":
            self.outstanding = spec.max_staleness
        else:
            self.outstanding = max(spec.max_staleness, 1 if spec.fragments > 1 else 0)
        # overlapped rounds fold a sync in at a fixed step (their k-th next sync), never when it lands
        self.fold_late = spec.mode != "ASYNC" and spec.max_staleness > 0
        self.started = False
        self.round_steps = 0
        self.round_compute = 0.0
        self.next_frag = 0
        self.budget = 0.0  # pace="fastest": compute seconds a round may take (0 = not known yet)
        self.last_exit: Optional[float] = None
        self.joining = False
        self._last_done = 0  # ranks that had joined, as of the last sync folded
        self.stats = {"rounds": 0, "bytes_sent": 0, "staleness": 0, "blocked_seconds": 0.0, "steps": 0}
        self._patched = False
        optimizer._kolo_rounds = self  # kolo.torch.elastic.TorchState finds it there (rounds_of)
        _ACTIVE.append(self)

    @staticmethod
    def from_spec(params: Any, optimizer: torch.optim.Optimizer, spec: _mode.ModeSpec, **kw: Any) -> "Rounds":
        return Rounds(params, optimizer, spec, **kw)

    # ---- the explicit API: a context manager around the user's optimizer ----

    def __enter__(self) -> "Rounds":
        """Hooks optimizer.step(): every step is then counted and synced."""
        if not self._patched:
            inner = self.optimizer.step

            def step(*args: Any, **kwargs: Any) -> Any:
                self.before_step()
                result = inner(*args, **kwargs)
                self.after_step()
                return result

            self.optimizer.step = step  # type: ignore[assignment]
            self._patched = True
        _mode.acknowledge(self.spec.mode)
        return self

    def __exit__(self, kind: Any, value: Any, traceback: Any) -> None:
        """Unhooks the optimizer; on a normal exit joins (see join())."""
        if self._patched:
            del self.optimizer.step
            self._patched = False
        if kind is None:
            self.join()

    # ---- the step hook ----

    def before_step(self) -> None:
        """Takes the round's start parameters at the first step (after the
        user's broadcast of the initial model)."""
        if not self.started:
            for frag in self.frags:
                if self.outer:
                    frag.start = _flat(frag.params)
                    frag.momentum = torch.zeros_like(frag.start)
            self.started = True

    def after_step(self) -> None:
        """Counts one inner step; syncs what is due; folds in what completed."""
        now = time.monotonic()
        if self.last_exit is not None:
            self.round_compute += now - self.last_exit
        self.round_steps += 1
        self.stats["steps"] += 1
        for frag in self.frags:
            frag.steps_since += 1
        self._poll()
        progress = self.round_steps / self.spec.sync_every
        if self.pace == "fastest" and self.budget > 0:
            progress = max(progress, self.round_compute / self.budget)
        while self.next_frag < len(self.frags) and progress >= (self.next_frag + 1) / len(self.frags):
            self._sync(self.frags[self.next_frag])
            self.next_frag += 1
        if self.next_frag == len(self.frags):
            self.next_frag = 0
            self.round_steps = 0
            self.round_compute = 0.0
        self.last_exit = time.monotonic()

    # ---- syncing ----

    def _sync(self, frag: _Fragment) -> None:
        """Begins frag's next sync; waits first if that would exceed the bound,
        and waits for it at once in a blocking mode."""
        while frag.pending and len(frag.pending) >= max(self.outstanding, 1):
            self._fold(frag, block=True)
        current = _flat(frag.params)
        payload = frag.start - current if self.outer else current
        step_time = self.round_compute / self.round_steps if self.round_steps else 0.0
        name = "kolo.rounds.f%d.%d" % (frag.index, frag.seq % _NAME_CYCLE)
        reduction = Reduction(
            payload,
            frag.steps_since,
            step_time,
            self.joining,
            name,
            self.spec.compression,
            RUNTIME.size(),
            RUNTIME.rank(),
        )
        frag.pending.append(_Pending(reduction, current, frag.seq))
        frag.seq += 1
        frag.steps_since = 0
        if self.outstanding == 0:
            self._fold(frag, block=True)

    def _poll(self) -> None:
        """Moves every sync in flight on (int8's ring hops advance only here or
        in a wait); folds the completed ones in, except in overlapped rounds,
        which fold at a fixed step (_sync)."""
        for frag in self.frags:
            if self.fold_late:
                for pending in frag.pending:
                    if not pending.reduction.poll():
                        break
                continue
            while frag.pending and frag.pending[0].reduction.poll():
                self._fold(frag, block=False)

    def _fold(self, frag: _Fragment, block: bool) -> Reduction:
        """Applies frag's oldest sync: params += result - params_at_submission."""
        pending = frag.pending[0]
        if block:
            began = time.monotonic()
            pending.reduction.wait()
            self.stats["blocked_seconds"] += time.monotonic() - began
        reduction = pending.reduction
        frag.pending.pop(0)
        self.stats["bytes_sent"] += reduction.bytes_sent
        self._last_done = reduction.done_ranks
        if reduction.min_step_time != float("inf") and reduction.min_step_time > 0:
            self.budget = self.spec.sync_every * reduction.min_step_time * (1.0 + self.slack)
        staleness = frag.seq - pending.seq - (1 if frag.steps_since == 0 else 0)
        self.stats["staleness"] = max(self.stats["staleness"], staleness)
        if frag.index == len(self.frags) - 1:
            self.stats["rounds"] += 1
        if reduction.weight_sum <= 0:
            return reduction  # nobody contributed anything (every rank had joined already)
        result = reduction.wait()
        if self.outer:
            assert frag.start is not None and frag.momentum is not None
            mu = self.spec.outer_momentum
            if mu:
                frag.momentum.mul_(mu).add_(result)
                update = result + mu * frag.momentum if self.spec.nesterov else frag.momentum
            else:
                update = result
            frag.start.sub_(update, alpha=self.spec.outer_lr)
            new = frag.start
        else:
            new = result
        if frag.pending or frag.steps_since:  # new + the local progress made since submission
            _write(frag.params, new + (_flat(frag.params) - pending.snapshot))
        else:  # no step since the last submission: exactly new (the same bits on every rank)
            _write(frag.params, new)
        correction = new - pending.snapshot
        for later in frag.pending:  # they were taken before this correction
            later.snapshot += correction
        return reduction

    def join(self) -> None:
        """Ends training on this rank: waits for its syncs in flight, then keeps
        taking part in the others' syncs (contributing its last steps, then
        nothing) until every rank has joined; every rank then holds the same
        parameters. It is collective: every rank calls it, once it has no more
        data (horovod's join) or at the end of training; optimizer.synchronize()
        and leaving the `with` block call it."""
        self.before_step()
        self.round_steps = 0
        self.round_compute = 0.0
        for frag in self.frags:
            while frag.pending:
                self._fold(frag, block=True)
        self.joining = True
        outstanding, self.outstanding = self.outstanding, 0
        try:
            remaining = None
            while remaining != 0:
                frag = self.frags[self.next_frag]
                self._sync(frag)
                self.next_frag = (self.next_frag + 1) % len(self.frags)
                last = self._last_done
                if remaining is None and last == RUNTIME.size():
                    remaining = len(self.frags) - 1  # the other fragments once more, then stop
                elif remaining is not None:
                    remaining -= 1
        finally:
            self.outstanding = outstanding
            self.joining = False
        self.round_steps = 0
        self.round_compute = 0.0
        self.last_exit = None

    # ---- elastic state (kolo.torch.elastic.TorchState) ----

    def state_dict(self) -> Dict[str, Any]:
        """The round's start parameters, the outer momentum and the counters."""
        return {
            "started": self.started,
            "round_steps": self.round_steps,
            "next_frag": self.next_frag,
            "budget": self.budget,
            "stats": dict(self.stats),
            "seq": [f.seq for f in self.frags],
            "steps_since": [f.steps_since for f in self.frags],
            "start": [None if f.start is None else f.start.clone() for f in self.frags],
            "momentum": [None if f.momentum is None else f.momentum.clone() for f in self.frags],
        }

    def load_state_dict(self, state: Dict[str, Any]) -> None:
        self.abandon()
        self.started = state["started"]
        self.round_steps, self.next_frag, self.budget = state["round_steps"], state["next_frag"], state["budget"]
        self.stats = dict(state["stats"])
        for f, seq, since, start, momentum in zip(
            self.frags, state["seq"], state["steps_since"], state["start"], state["momentum"]
        ):
            f.seq, f.steps_since = seq, since
            f.start = None if start is None else start.clone()
            f.momentum = None if momentum is None else momentum.clone()
        self.round_compute = 0.0
        self.last_exit = None

    def broadcast(self, root_rank: int = 0) -> None:
        """Takes root_rank's state (after a ring change; a newcomer that has not
        stepped yet receives the round start and momentum too)."""
        from ..objects import broadcast_object
        from .ops import broadcast_

        self.abandon()
        state = self.state_dict()
        tensors = {"start": state.pop("start"), "momentum": state.pop("momentum")}
        state["present"] = {key: [v is not None for v in values] for key, values in tensors.items()}
        state = broadcast_object(state, root_rank, name="kolo.rounds.state")
        for key, values in tensors.items():
            for i, frag in enumerate(self.frags):
                if not state["present"][key][i]:
                    values[i] = None
                    continue
                if values[i] is None:
                    values[i] = torch.zeros(sum(p.numel() for p in frag.params), dtype=torch.float32)
                broadcast_(values[i], root_rank, name="kolo.rounds.%s.%d" % (key, i))
        del state["present"]
        state.update(tensors)
        self.load_state_dict(state)

    def abandon(self) -> None:
        """Forgets the syncs in flight (their ring failed or is being replaced)."""
        for frag in self.frags:
            frag.pending.clear()

    def report(self) -> Dict[str, Any]:
        """The REPORT keys of this mode (kolo.report adds them)."""
        return {
            "mode": self.spec.mode,
            "rounds": self.stats["rounds"],
            "bytes_sent": self.stats["bytes_sent"],
            "staleness": self.stats["staleness"],
            "blocked_seconds": round(self.stats["blocked_seconds"], 3),
        }

    def close(self) -> None:
        """Stops reporting this object's statistics."""
        if self in _ACTIVE:
            _ACTIVE.remove(self)


def _spec(mode: str, **params: Any) -> _mode.ModeSpec:
    return _mode.make(mode, **params)


class LocalSGD(Rounds):
    """Local SGD: sync_every (H) steps of optimizer on this rank's data, then
    the parameters are averaged (weighted by the steps each rank did).
    max_staleness=k >= 1 overlaps the average with the next k rounds (it is
    folded in k rounds late; see the module doc).

        with kolo.torch.LocalSGD(model, optimizer, sync_every=8):
            for data, target in loader:
                ...; optimizer.step()
    """

    def __init__(
        self,
        model: Any,
        optimizer: torch.optim.Optimizer,
        sync_every: Optional[int] = None,
        compression: Optional[str] = None,
        fragments: Optional[int] = None,
        pace: str = "fastest",
        slack: float = SLACK,
        max_staleness: Optional[int] = None,
    ) -> None:
        super().__init__(
            model,
            optimizer,
            _spec(
                "LOCAL_SGD",
                sync_every=sync_every,
                compression=compression,
                fragments=fragments,
                max_staleness=max_staleness,
            ),
            pace,
            slack,
        )


class DiLoCo(Rounds):
    """DiLoCo: H inner steps of optimizer, then the pseudo-gradient (round
    start minus the average) goes to an outer SGD with (Nesterov) momentum;
    optional fp16/int8 outer gradients, streaming fragments, and an average
    overlapped with the next max_staleness rounds (the outer step applied that
    many rounds late). Defaults are libkolo's (kolo_mode_spec_default)."""

    def __init__(
        self,
        model: Any,
        optimizer: torch.optim.Optimizer,
        sync_every: Optional[int] = None,
        outer_lr: Optional[float] = None,
        outer_momentum: Optional[float] = None,
        nesterov: Optional[bool] = None,
        compression: Optional[str] = None,
        fragments: Optional[int] = None,
        pace: str = "fastest",
        slack: float = SLACK,
        max_staleness: Optional[int] = None,
    ) -> None:
        super().__init__(
            model,
            optimizer,
            _spec(
                "DILOCO",
                sync_every=sync_every,
                outer_lr=outer_lr,
                outer_momentum=outer_momentum,
                nesterov=nesterov,
                compression=compression,
                fragments=fragments,
                max_staleness=max_staleness,
            ),
            pace,
            slack,
        )


class BoundedAsync(Rounds):
    """ASYNC: each rank steps on its own; every sync_every steps its parameters
    are averaged in the background and folded in when the average completes; a
    rank blocks only to keep at most max_staleness averages in flight."""

    def __init__(
        self,
        model: Any,
        optimizer: torch.optim.Optimizer,
        sync_every: Optional[int] = None,
        max_staleness: Optional[int] = None,
        pace: str = "fastest",
        slack: float = SLACK,
    ) -> None:
        super().__init__(
            model, optimizer, _spec("ASYNC", sync_every=sync_every, max_staleness=max_staleness), pace, slack
        )


__all__ = ["Rounds", "LocalSGD", "DiLoCo", "BoundedAsync", "PACES", "active_reports", "join", "rounds_of"]


def rounds_of(optimizer: Any) -> Optional["Rounds"]:
    """The Rounds driving optimizer (one DistributedOptimizer returned in a non-SYNC mode), or None."""
    return getattr(optimizer, "_kolo_rounds", None) if optimizer is not None else None


def join(device: int = -1, process_set: Any = None) -> int:
    """horovod's join (kolo.torch.ops.join: this rank has no more batches; it
    takes part with zeros in the others' all-reduces until every rank joined),
    which in a non-SYNC mode first ends the rounds (Rounds.join: the last
    steps averaged in, the same parameters on every rank). Returns the last
    rank to join."""
    for rounds in list(_ACTIVE):
        if rounds.started:
            rounds.join()
    return _ops_join(device, process_set)
