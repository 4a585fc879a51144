"""kolo.torch.snapshot: the in-memory commit of kolo.torch.elastic.TorchState, cheap
enough to run after every step.

A Snapshot holds two slots, each a set of preallocated tensors shaped like the
model's state_dict() entries and the optimizer's per-parameter state (momentum,
Adam's moments, step counters). take() (write() then use()) copies the live
tensors into the slot that is NOT the last complete commit, with in-place copies
(Tensor.copy_, no deepcopy of a state dict, no allocation once the shapes are
known), and only when every copy is done makes that slot the current one (one
assignment). So:

- a commit never waits for the previous one and never overwrites it: a failure
  (an exception, a signal) part-way through a commit leaves the previous commit
  whole and current, and the half-written slot is never read;
- restore() (put_back) loads the current slot only: a whole commit, never a
  mix of two.

Slots grow when the optimizer creates its state lazily (after its first step)
or a tensor changes shape; that allocation happens once, then every commit is
copies only. Values that are not tensors (a param group's learning rate, an
int step counter) are copied as values (they are immutable numbers and tuples
in torch's optimizers; anything else is deep-copied).
"""
from __future__ import annotations

import copy
import queue
import threading
from typing import Any, Dict, List, Optional, Set, Tuple

import torch

_IMMUTABLE = (int, float, bool, str, bytes, type(None), complex)


def _value_copy(value: Any) -> Any:
    if isinstance(value, _IMMUTABLE):
        return value
    if isinstance(value, tuple) and all(isinstance(v, _IMMUTABLE) for v in value):
        return value
    return copy.deepcopy(value)


def _buffer_for(old: Optional[torch.Tensor], live: torch.Tensor) -> torch.Tensor:
    """old if it can hold a copy of live (same shape, dtype, device), else a new one."""
    if old is not None and old.shape == live.shape and old.dtype == live.dtype and old.device == live.device:
        return old
    return torch.empty_like(live, memory_format=torch.contiguous_format)


class _Slot:
    """One commit: the model's tensors by state_dict key, the optimizer's state
    per parameter (in param_groups order) and its groups' hyper-parameters."""

    def __init__(self) -> None:
        self.model: Dict[str, torch.Tensor] = {}
        self.optim_state: List[Optional[Dict[str, Any]]] = []
        self.optim_groups: List[Dict[str, Any]] = []
        self.serial = 0  # which commit this slot holds (0: none)


Pair = Tuple[torch.Tensor, torch.Tensor]  # (live tensor, its buffer in a slot)
# below this many bytes of parameters and optimizer state a commit copies on the training
# thread: handing a job to the thread and the GIL back costs more (~0.15 ms measured)
OVERLAP_MIN_BYTES = 1 << 20
# the model's state_dict() entries are found through a cached list of its modules'
# tables (state_dict() itself costs ~20 us per module), checked again this often
ENTRIES_CHECK_EVERY = 64


class _Job:
    """The copies of one commit; done is set when they are over."""

    def __init__(self, pairs: List[Pair]) -> None:
        self.pairs = pairs
        self.done = threading.Event()
        self.error: Optional[BaseException] = None

    def wait(self) -> None:
        """Returns once the copies are over; raises their error."""
        self.done.wait()
        if self.error is not None:
            raise RuntimeError("kolo: copying a commit failed: %s" % self.error) from self.error


class _Copier:
    """One daemon thread that runs the copies of commits, in order, while training
    goes on (torch's copy_ releases the GIL)."""

    def __init__(self) -> None:
        self._jobs: "queue.SimpleQueue[Optional[_Job]]" = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name="kolo-commit", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while True:
            job = self._jobs.get()
            if job is None:
                return
            try:
                with torch.no_grad():
                    for live, buffer in job.pairs:
                        buffer.copy_(live)
            except BaseException as error:  # noqa: BLE001 - raised by the job's wait()
                job.error = error
            job.done.set()

    def start(self, pairs: List[Pair]) -> _Job:
        job = _Job(pairs)
        self._jobs.put(job)
        return job

    def close(self) -> None:
        self._jobs.put(None)


class Snapshot:
    """Double-buffered in-place commits of a model and an optimizer (either may be
    None). take() commits, put_back() restores the last whole commit.

    With overlap, write() copies only the model's buffers that are not the
    optimizer's parameters (BatchNorm statistics: the next forward changes them)
    at once and hands the parameters and the optimizer's state, which only the
    optimizer's next step() changes, to a background thread; wait() (call it
    before anything changes them: TorchState wraps optimizer.step) returns once
    they are copied. The slot is whole only then. A state under overlap_min_bytes
    (default 1 MiB) is copied at once all the same."""

    def __init__(
        self, model: Optional[torch.nn.Module], optimizer: Optional[torch.optim.Optimizer], overlap: bool = False
    ) -> None:
        self.model = model
        self.optimizer = optimizer
        self._slots: Tuple[_Slot, _Slot] = (_Slot(), _Slot())
        self._current: Optional[int] = None  # index of the last whole commit
        self._serial = 0
        self._copier: Optional[_Copier] = _Copier() if overlap else None
        self.overlap_min_bytes = OVERLAP_MIN_BYTES
        self._entries: Optional[List[Tuple[str, Dict[str, Any], str]]] = None
        self._entries_age = 0
        self._in_flight: Optional[Tuple[int, _Job, int]] = None  # (slot, copy job, its serial)

    @property
    def serial(self) -> int:
        """How many commits completed (the current slot's number; 0: none)."""
        return 0 if self._current is None else self._slots[self._current].serial

    def _params(self) -> List[torch.Tensor]:
        assert self.optimizer is not None
        return [p for group in self.optimizer.param_groups for p in group["params"]]

    def _model_entries(self) -> Optional[List[Tuple[str, Dict[str, Any], str]]]:
        """(state_dict key, the module's _parameters or _buffers dict, name) for every
        entry of the model's state_dict(), or None when state_dict() holds anything
        else (extra state, hooks): then the commit calls state_dict() itself."""
        assert self.model is not None
        every = self.model.state_dict(keep_vars=True)
        entries = []
        for prefix, module in self.model.named_modules(remove_duplicate=True):
            prefix = prefix + "." if prefix else ""
            for name, tensor in module._parameters.items():
                if tensor is not None:
                    entries.append((prefix + name, module._parameters, name))
            for name, tensor in module._buffers.items():
                if tensor is not None and name not in module._non_persistent_buffers_set:
                    entries.append((prefix + name, module._buffers, name))
        if [key for key, _, _ in entries] != list(every) or any(
            every[key] is not table[name] for key, table, name in entries
        ):
            return None
        return entries

    def _live_model(self) -> Dict[str, torch.Tensor]:
        """The model's state_dict() tensors, through the cached entries (rebuilt and
        checked against state_dict() every ENTRIES_CHECK_EVERY commits)."""
        assert self.model is not None
        if self._entries_age <= 0:
            self._entries = self._model_entries()
            self._entries_age = ENTRIES_CHECK_EVERY
        self._entries_age -= 1
        if self._entries is None:
            return self.model.state_dict()
        return {key: table[name] for key, table, name in self._entries}

    def _plan_model(self, slot: _Slot, later: Set[int], now: List[Pair], deferred: List[Pair]) -> None:
        assert self.model is not None
        live = self._live_model()
        if live.keys() != slot.model.keys():
            slot.model = {key: slot.model.get(key) for key in live}  # type: ignore[misc]
        for key, tensor in live.items():
            buffer = _buffer_for(slot.model[key], tensor)
            slot.model[key] = buffer
            (deferred if tensor.data_ptr() in later else now).append((tensor, buffer))

    def _plan_optimizer(self, slot: _Slot, params: List[torch.Tensor], pairs: List[Pair]) -> None:
        assert self.optimizer is not None
        if len(slot.optim_state) != len(params):
            slot.optim_state = [None] * len(params)
        state = self.optimizer.state
        for index, param in enumerate(params):
            live = state.get(param)
            if not live:
                slot.optim_state[index] = None
                continue
            saved = slot.optim_state[index]
            if saved is None or saved.keys() != live.keys():
                saved = {key: (saved or {}).get(key) for key in live}
                slot.optim_state[index] = saved
            for key, value in live.items():
                if isinstance(value, torch.Tensor):
                    old = saved[key]
                    buffer = _buffer_for(old if isinstance(old, torch.Tensor) else None, value)
                    saved[key] = buffer
                    pairs.append((value, buffer))
                else:
                    saved[key] = _value_copy(value)
        slot.optim_groups = [
            {key: _value_copy(value) for key, value in group.items() if key != "params"}
            for group in self.optimizer.param_groups
        ]

    def write(self, keep: Optional[int] = None, overlap: bool = True) -> int:
        """Copies the live state into the slot that is not keep (default: the
        current commit) and returns its index; an exception part-way leaves slot
        keep as it was. With overlap (and a Snapshot made with overlap) part of
        the copy goes on in the background: the slot is whole once wait()
        returns. use(index) makes it current (or the caller keeps the index as
        its commit)."""
        self.wait()
        keep = self._current if keep is None else keep
        pending = 1 if keep == 0 else 0
        slot = self._slots[pending]
        slot.serial = 0  # half-written from here on: never read until it is whole
        params = self._params() if self.optimizer is not None else []
        background = self._copier is not None and overlap
        later = {p.data_ptr() for p in params} if background else set()
        now: List[Pair] = []
        deferred: List[Pair] = []
        if self.model is not None:
            self._plan_model(slot, later, now, deferred)
        if self.optimizer is not None:
            self._plan_optimizer(slot, params, deferred)
        if background and sum(t.numel() * t.element_size() for t, _ in deferred) < self.overlap_min_bytes:
            background = False  # small: copying here costs less than waking the thread
        if not background:
            now, deferred = now + deferred, []
        with torch.no_grad():
            for live, buffer in now:
                buffer.copy_(live)
        serial = self._serial + 1
        if deferred:
            assert self._copier is not None
            job = self._copier.start(deferred)
            self._in_flight = (pending, job, serial)  # whole once the job is done
        else:
            slot.serial = serial
        self._serial = serial
        return pending

    def wait(self) -> None:
        """Returns once a background copy is done (its slot then whole); raises
        its error (the slot then stays unused)."""
        flight = self._in_flight
        if flight is None:
            return
        index, job, serial = flight
        try:
            job.wait()
        except RuntimeError:  # the copy failed: the slot is never used
            self._in_flight = None
            raise
        # (interrupted before here: the next wait() finishes the job)
        self._slots[index].serial = serial
        self._in_flight = None

    def use(self, index: int) -> None:
        """Makes slot index (from write()) the current commit."""
        self.wait()
        if self._slots[index].serial == 0:
            raise ValueError("kolo: snapshot slot %d is not a whole commit" % index)
        self._current = index

    def take(self) -> None:
        """Commits: write(), then use() (one assignment makes it current)."""
        self.use(self.write())

    def put_back(self, index: Optional[int] = None) -> bool:
        """Loads commit index (default: the current one) into the model and the
        optimizer; False when there is none (nothing changes then)."""
        self.wait()
        index = self._current if index is None else index
        if index is None or self._slots[index].serial == 0:
            return False
        slot = self._slots[index]
        if self.model is not None:
            self.model.load_state_dict(slot.model)
        if self.optimizer is not None:
            self.optimizer.load_state_dict(self._optimizer_state_dict(slot))
        return True

    def close(self) -> None:
        """Ends the background thread (after the copy in flight)."""
        if self._copier is not None:
            try:
                self.wait()
            finally:
                self._copier.close()
                self._copier = None

    def _optimizer_state_dict(self, slot: _Slot) -> Dict[str, Any]:
        """The slot as an optimizer state_dict (load_state_dict copies it, so the
        slot stays intact for a second restore)."""
        assert self.optimizer is not None
        groups, index = [], 0
        for group, saved in zip(self.optimizer.param_groups, slot.optim_groups):
            count = len(group["params"])
            groups.append(dict(saved, params=list(range(index, index + count))))
            index += count
        state = {i: dict(s) for i, s in enumerate(slot.optim_state) if s is not None}
        return {"state": state, "param_groups": groups}

    def nbytes(self) -> int:
        """Bytes held by the two slots' tensors."""
        total = 0
        for slot in self._slots:
            total += sum(t.numel() * t.element_size() for t in slot.model.values())
            for saved in slot.optim_state:
                for value in (saved or {}).values():
                    if isinstance(value, torch.Tensor):
                        total += value.numel() * value.element_size()
        return total


__all__ = ["Snapshot"]
