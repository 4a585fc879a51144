"""Process sets, Horovod's (horovod.common.process_sets): collectives among some
ranks of the ring. Each set a rank belongs to is a communicator of its own, made
by libkolo's kolo_comm_split (include/kolo/process_set.h) over the whole ring:
every rank of the ring adds the same sets in the same order (the C side checks
that every rank agrees on the members and the id), and a member's collectives on
a set run on the set's own ring with the engine's negotiation, fusion and
failure handling. A rank that is not a member may hold the ProcessSet object and
ask its size(), but a collective on it raises ValueError.

`kolo.torch` runs a collective on a set by entering its scope (`entered`):
RUNTIME's rank(), size() and communicator are then the set's, so every
collective, helper and autograd function works on a set unchanged. Ranks in the
API (a broadcast's root_rank) stay ranks of the whole ring, as in Horovod.

Elastic jobs: a re-form destroys every set's communicator; each set whose ranks
all still exist in the new ring is made again (same id, same ranks) before the
training function runs again; a set with a rank the new ring no longer has
cannot survive, and the re-form raises ProcessSetLostError naming it (the
job fails with that reason instead of running a model-parallel split on
missing ranks)."""
from __future__ import annotations

import contextlib
import ctypes
import threading
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple, Union

from . import _abi, _lib
from ._runtime import RUNTIME, Runtime, current_scope, in_scope, raise_for
from .errors import KoloError

lib = _lib.lib


class ProcessSetLostError(KoloError):
    """A re-formed ring lacks a rank of a registered process set."""


def _split_function() -> Any:
    lib.load()
    if not lib.sets:
        raise KoloError(
            "kolo: this libkolo has no process sets (kolo_comm_split); rebuild kolo", "KOLO_ERR_UNSUPPORTED"
        )
    return lib.kolo_comm_split


class SetRuntime:
    """A member's process set communicator, shaped like Runtime for kolo._core (require,
    rank, size, check, own, inflight, generation), so a collective runs on it unchanged.
    Requests in flight are kept in the ring's table, so the ring's drain waits for them."""

    _serials = 0

    def __init__(self, parent: Runtime, comm: int, set_id: int, ranks: List[int]) -> None:
        SetRuntime._serials += 1
        self.parent = parent
        self.comm: Optional[int] = comm
        self.set_id = set_id
        self.ranks = ranks
        self.serial = SetRuntime._serials
        self.inflight = parent.inflight
        self.cuda_device: Optional[int] = None

    @property
    def generation(self) -> int:
        return self.parent.generation

    def names_key(self) -> Tuple[Any, ...]:
        return ("set", self.serial)

    def resolved(self) -> "SetRuntime":
        return self

    def own(self, what: str) -> None:
        self.parent.own(what)

    def require(self, what: str = "kolo") -> int:
        self.own(what)
        comm = self.comm
        if comm is None:
            raise ValueError(
                "kolo: process set %d was removed or lost its ring (a re-form); add it again" % self.set_id
            )
        return comm

    def rank(self) -> int:
        return lib.kolo_comm_rank(self.require())

    def size(self) -> int:
        return len(self.ranks)

    def check(self, code: int, what: str, message: str = "") -> None:
        """Raises for a failed operation on the set; the error's rank is a ring rank (libkolo
        names the set's rank), and its message says which set and which ring rank."""
        if code == _abi.KOLO_OK:
            return
        try:
            raise_for(
                code, "%s (process set %d)" % (what, self.set_id), self.comm, message, self.parent.stop_requested()
            )
        except KoloError as error:
            if error.rank is not None and 0 <= error.rank < len(self.ranks):
                error.rank = self.ranks[error.rank]
                error.args = (
                    "%s [rank %d of the set is rank %d of the ring]"
                    % (error.args[0], self.ranks.index(error.rank), error.rank),
                )
            raise

    def use_cuda(self, device: int) -> None:
        if self.cuda_device == device:
            return
        if self.cuda_device is not None:
            raise ValueError(
                "kolo: this rank already uses CUDA device %d, not %d (one GPU per rank)" % (self.cuda_device, device)
            )
        self.check(lib.kolo_comm_use_cuda(self.require("kolo: CUDA mode"), device), "kolo: CUDA mode")
        self.cuda_device = device

    def abort(self) -> None:
        if self.comm is not None:
            lib.kolo_comm_abort(self.comm)

    def destroy(self) -> None:
        comm, self.comm = self.comm, None
        if comm is not None:
            lib.kolo_comm_destroy(comm)


class ProcessSet:
    """A set of ranks of the ring that run collectives together (Horovod's ProcessSet).
    Give it to hvd.init(process_sets=[...]) or hvd.add_process_set(); then pass it as
    process_set= to any collective, DistributedOptimizer, broadcast_parameters, ..."""

    def __init__(self, ranks: Sequence[int]) -> None:
        try:
            ranks = sorted(ranks)
        except TypeError:
            raise ValueError("kolo: a ProcessSet needs a list of ranks (ints), not %r" % (ranks,)) from None
        if any(not isinstance(r, int) or isinstance(r, bool) for r in ranks):
            raise ValueError("kolo: a ProcessSet needs a list of ranks (ints), not %r" % (ranks,))
        self.ranks: Optional[List[int]] = ranks
        self.process_set_id: Optional[int] = None

    def _invalidate(self) -> None:
        self.process_set_id = None

    def size(self) -> Optional[int]:
        """The number of ranks in the set; None until it is added."""
        if self.process_set_id is None:
            return None
        return len(self.ranks) if self.process_set_id else RUNTIME.global_size()

    def rank(self) -> Optional[int]:
        """This process's rank within the set; None until it is added. ValueError on a non-member."""
        if self.process_set_id is None:
            return None
        if self.process_set_id == 0:
            return RUNTIME.global_rank()
        if not self.included():
            raise ValueError(
                "kolo: rank %d is not part of process set %d (ranks %s)"
                % (RUNTIME.global_rank(), self.process_set_id, self.ranks)
            )
        return self.ranks.index(RUNTIME.global_rank())

    def included(self) -> Optional[bool]:
        """Whether this process belongs to the set; None until it is added."""
        if self.process_set_id is None:
            return None
        return self.process_set_id == 0 or RUNTIME.global_rank() in self.ranks

    def __repr__(self) -> str:
        return "ProcessSet(process_set_id=%s, ranks=%s)" % (self.process_set_id, self.ranks)


global_process_set = ProcessSet([])
global_process_set.process_set_id = 0


class _Registry:
    """The sets added on this rank, by id (the same on every rank: ranks add and
    remove the same sets in the same order), with this rank's communicator of each."""

    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime
        self.lock = threading.RLock()
        self.sets: Dict[int, Tuple[ProcessSet, Optional[SetRuntime]]] = {}
        runtime.hooks.append(self._on_ring_event)

    def _split(self, set_id: int, ranks: List[int]) -> Optional[SetRuntime]:
        options = _lib.SplitOptions((ctypes.c_int * len(ranks))(*ranks), len(ranks), set_id, 0)
        comm = ctypes.c_void_p()
        code = _split_function()(
            self.runtime.require("kolo: add_process_set"), ctypes.byref(options), ctypes.byref(comm)
        )
        if code != 0:
            self.runtime.check(code, "kolo: add_process_set %s" % ranks)
        return SetRuntime(self.runtime, comm.value, set_id, ranks) if comm.value else None

    def add(self, process_set: ProcessSet) -> ProcessSet:
        if current_scope() is not None:
            raise ValueError("kolo: add_process_set is collective over the whole ring, not within a process set")
        ranks = process_set.ranks
        size = self.runtime.global_size()
        if not ranks or ranks[0] < 0 or ranks[-1] >= size or len(set(ranks)) != len(ranks):
            raise ValueError(
                "kolo: process set ranks %s must be distinct ranks of the ring (0..%d)" % (ranks, size - 1)
            )
        with self.lock:
            if process_set.process_set_id is not None:
                raise ValueError("kolo: %r was added already" % process_set)
            if ranks == list(range(size)) or any(ps.ranks == ranks for ps, _ in self.sets.values()):
                raise ValueError(
                    "kolo: attempted to add a duplicate process set: %s (a set with these ranks "
                    "exists%s)" % (ranks, ", the global one" if ranks == list(range(size)) else "")
                )
            set_id = next(i for i in range(1, len(self.sets) + 2) if i not in self.sets)
            member = self._split(set_id, ranks)
            self.sets[set_id] = (process_set, member)
            process_set.process_set_id = set_id
        return process_set

    def remove(self, process_set: ProcessSet) -> bool:
        set_id = process_set.process_set_id
        if set_id is None or set_id == 0:
            return False  # Horovod's answer: never removed (the global set), or not added
        with self.lock:
            entry = self.sets.pop(set_id, None)
        if entry is None:
            return False
        process_set._invalidate()
        member = entry[1]
        if member is not None:
            self.runtime.drain()
            member.destroy()
        return True

    def runtime_of(self, process_set: ProcessSet) -> Optional[SetRuntime]:
        """The scope a collective on process_set runs in (None: the whole ring)."""
        if process_set is global_process_set or process_set.process_set_id == 0:
            return None
        if not isinstance(process_set, ProcessSet):
            raise TypeError("kolo: process_set must be a kolo.torch.ProcessSet, not %s" % type(process_set).__name__)
        with self.lock:
            entry = self.sets.get(process_set.process_set_id) if process_set.process_set_id else None
        if entry is None:
            raise ValueError(
                "kolo: %r is not added (hvd.add_process_set or hvd.init(process_sets=...)) "
                "or was removed" % process_set
            )
        if entry[1] is None:
            raise ValueError(
                "kolo: rank %d is not a member of process set %d (ranks %s)"
                % (self.runtime.global_rank(), process_set.process_set_id, process_set.ranks)
            )
        return entry[1]

    def _on_ring_event(self, event: str) -> None:
        with self.lock:
            members = [m for _, m in self.sets.values() if m is not None]
            if event == "reform":
                if self.runtime.inflight:  # a failure: collectives on a set end at once, like the ring's
                    for member in members:
                        member.abort()
                return
            for member in members:
                member.destroy()
            if event == "shutdown":
                for process_set, _ in self.sets.values():
                    process_set._invalidate()
                self.sets = {}
            elif event == "reformed":
                self._recreate()

    def _recreate(self) -> None:
        size = self.runtime.global_size()
        lost = [(i, ps.ranks) for i, (ps, _) in sorted(self.sets.items()) if ps.ranks[-1] >= size]
        if lost:
            for process_set, _ in self.sets.values():
                process_set._invalidate()
            self.sets = {}
            raise ProcessSetLostError(
                "kolo.elastic: the ring re-formed with %d ranks, so process set(s) %s cannot survive (a "
                "model-parallel split needs every member); use process sets of ranks below the job's "
                "min_workers, or re-add them in the training function"
                % (size, ", ".join("%d (ranks %s)" % item for item in lost)),
                "KOLO_ERR_PEER_LOST",
            )
        for set_id, (process_set, _) in sorted(self.sets.items()):
            self.sets[set_id] = (process_set, self._split(set_id, process_set.ranks))


REGISTRY = _Registry(RUNTIME)


def add_process_set(process_set: Union[ProcessSet, Sequence[int]]) -> ProcessSet:
    """Adds a process set after init (collective: every rank of the ring calls it with the
    same ranks, in the same order of calls). ValueError for bad ranks or a duplicate set."""
    if not isinstance(process_set, ProcessSet):
        process_set = ProcessSet(process_set)
    return REGISTRY.add(process_set)


def remove_process_set(process_set: ProcessSet) -> bool:
    """Removes a set (every rank calls it); False for the global set or one not added."""
    return REGISTRY.remove(process_set)


def process_set_scope(process_set: Any) -> Optional[SetRuntime]:
    """The scope for process_set; None (or global_process_set): the caller's current one."""
    if process_set is None:
        return current_scope()
    return REGISTRY.runtime_of(process_set)


@contextlib.contextmanager
def entered(process_set: Any) -> Iterator[None]:
    """Runs the block's collectives on process_set (None: wherever the caller runs them)."""
    with in_scope(process_set_scope(process_set)):
        yield


def root_in_set(root_rank: Any) -> int:
    """A ring rank given as a broadcast's root, as the rank within the current set (Horovod's
    process sets take ring ranks); ValueError when it is not a member."""
    scope = current_scope()
    if scope is None:
        return root_rank
    if root_rank not in scope.ranks:
        raise ValueError(
            "kolo: root_rank %r is not a member of process set %d (ranks %s)" % (root_rank, scope.set_id, scope.ranks)
        )
    return scope.ranks.index(root_rank)


def init_process_sets(process_sets: Any) -> None:
    """hvd.init(process_sets=...): a list of ProcessSet (or rank lists) added in order, or
    "dynamic" (kolo always allows adding sets later)."""
    if process_sets is None or process_sets == "dynamic":
        return
    everyone = list(range(RUNTIME.global_size()))
    global_process_set.ranks = everyone
    for process_set in process_sets:
        if not isinstance(process_set, ProcessSet):
            process_set = ProcessSet(process_set)
        if process_set is global_process_set:
            continue
        if process_set.ranks == everyone:
            process_set.process_set_id = 0  # the whole ring is the global set (Horovod maps it to id 0 too)
            continue
        add_process_set(process_set)


__all__ = [
    "ProcessSet",
    "ProcessSetLostError",
    "global_process_set",
    "add_process_set",
    "remove_process_set",
    "entered",
    "root_in_set",
    "init_process_sets",
    "process_set_scope",
]
