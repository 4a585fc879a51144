"""The one process-wide kolo context behind kolo.init(): the elastic handle (or a
single-rank communicator when the process runs alone), the current
communicator, and every request still in flight on it.

A process forked after init() (a torch DataLoader worker, multiprocessing) shares
the parent's sockets but not its libkolo threads: it may ask rank()/size() (plain
reads of the parent's values), but every collective, init(), reform and report
raises ForkedProcessError, and shutdown() (also its atexit hook) does nothing, so a
child never sends on, closes or says goodbye to its parent's ring.

Which ring init() joins:
  * KOLO_AGENT_SOCKET set (an `exec` job started by kolo-worker): the agent's ring,
    through kolo_elastic_create; the ring may change later (kolo.elastic);
  * KOLO_SIZE set (kolorun, or a hand-made environment): the rendezvous ring,
    also through kolo_elastic_create (which falls back to the environment);
  * neither: a ring of one, so a script runs unchanged as `python3 train.py`.
"""
from __future__ import annotations

import atexit
import contextlib
import contextvars
import ctypes
import os
import threading
from typing import Any, Callable, Dict, Iterator, List, Optional, Tuple

from . import _abi, _lib
from .errors import ForkedProcessError, JobStoppedError, KoloError, NotInitializedError, PeerLostError, error_class

lib = _lib.lib


def raise_for(
    code: int, what: str, comm: Optional[int] = None, message: str = "", stop_requested: bool = False
) -> None:
    """Raises the KoloError subclass for a non-zero status, with the communicator's
    own reason (which names the lost rank) when there is one."""
    if code == _abi.KOLO_OK:
        return
    name = _lib.status_name(code)
    rank = None
    if comm:
        failed_code, failed_rank = _lib.comm_error(comm)
        if failed_code != 0:
            rank = failed_rank if failed_rank >= 0 else None
            if not message:
                message = _lib.comm_error_message(comm)
            if name == "KOLO_ERR_ABORTED" and failed_code != code:
                # an abort caused by a failure reports the failure
                name = _lib.status_name(failed_code)
                code = failed_code
    if stop_requested:
        raise JobStoppedError("%s: the kolo agent asked this process to stop" % what, "KOLO_ERR_ABORTED", code, rank)
    text = "%s failed: %s (%s)" % (what, message or _lib.strerror(code), name)
    if name == "KOLO_ERR_PEER_LOST" and rank is not None and "rank" not in text:
        text += "; lost rank %d" % rank
    raise error_class(name)(text, name, code, rank)


# The process set (kolo/process_sets.py) the current thread's collectives run on: a
# SetRuntime, or None for the whole ring. RUNTIME's rank(), size(), require(), check()
# and use_cuda() answer for it, so every collective runs on a set unchanged.
_SCOPE: "contextvars.ContextVar[Any]" = contextvars.ContextVar("kolo_process_set", default=None)


def current_scope() -> Any:
    """The SetRuntime collectives of this thread run on now (None: the whole ring)."""
    return _SCOPE.get()


@contextlib.contextmanager
def in_scope(scope: Any) -> Iterator[None]:
    """Runs the block's collectives on scope (a SetRuntime; None: the whole ring)."""
    token = _SCOPE.set(scope)
    try:
        yield
    finally:
        _SCOPE.reset(token)


class Runtime:
    """The process's ring membership. One instance lives in kolo._runtime.RUNTIME.
    Inside in_scope(set) its collective-facing queries answer for that process set."""

    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.elastic: Optional[int] = None
        self.comm: Optional[int] = None
        self.owned_comm = False
        self.generation = 0
        self.inflight: Dict[int, object] = {}
        self.cuda_device: Optional[int] = None
        self.exit_hook = False
        self.left_job = False  # shutdown() left a kolo job's ring: this process cannot join it again
        self.pid = 0  # the process that joined the ring (a forked child must not touch it)
        # told "shutdown" before the ring is left, "reform" before and "reformed" after a re-form
        # (kolo/process_sets.py destroys and re-creates the sets' communicators)
        self.hooks: List[Callable[[str], None]] = []

    def _notify(self, event: str) -> None:
        for hook in list(self.hooks):
            hook(event)

    def resolved(self) -> Any:
        """What collectives run on now: the scoped process set, or this ring."""
        scoped = _SCOPE.get()
        return scoped if scoped is not None else self

    def names_key(self) -> Tuple[Any, ...]:
        """Automatic names are counted per communicator (kolo/_core.py's Names)."""
        return ("ring",)

    # ---- life cycle ----

    def init(self) -> None:
        self.own("kolo.init")  # before the lock: a parent's thread may have held it at the fork
        with self.lock:
            if self.comm is not None:
                return
            if self.left_job and os.environ.get("KOLO_AGENT_SOCKET"):
                raise KoloError(
                    "kolo.init after shutdown() in a kolo job: this process left the job's ring when it "
                    "shut down (its neighbours and the kolo agent saw it go), and a job's process joins "
                    "its ring once; keep one init() ... shutdown() per process (kolorun and a process "
                    "alone may init() again)",
                    "KOLO_ERR_STATE",
                )
            if os.environ.get("KOLO_AGENT_SOCKET") or os.environ.get("KOLO_SIZE"):
                handle = ctypes.c_void_p()
                code = lib.kolo_elastic_create(ctypes.byref(handle))
                # kolorun hands rank 0 its rendezvous socket as an inherited fd, which
                # forming the ring consumes (closes): an init() after shutdown() listens
                # on KOLO_RENDEZVOUS itself instead of taking whatever that fd is now
                os.environ.pop("KOLO_RENDEZVOUS_FD", None)
                if code != 0:
                    raise_for(code, "kolo.init (joining the ring: see the log line above)")
                self.elastic = handle.value
                self.comm = lib.kolo_elastic_comm(self.elastic)
            else:
                spec = _lib.RingSpec(epoch=1, rank=0, size=1, local_rank=0, local_size=1)
                comm = ctypes.c_void_p()
                raise_for(
                    lib.kolo_comm_create(ctypes.byref(spec), None, ctypes.byref(comm)), "kolo.init (a ring of one)"
                )
                self.comm = comm.value
                self.owned_comm = True
            self.pid = os.getpid()
            self.generation += 1
            if not self.exit_hook:
                atexit.register(self.shutdown)  # leave the ring cleanly (a goodbye, not a failure)
                self.exit_hook = True

    def shutdown(self) -> None:
        if self.forked():
            return  # a forked child (a DataLoader worker) leaves its parent's ring alone
        with self.lock:
            if self.comm is None:
                return
            self.drain()
            self._notify("shutdown")
            if self.elastic is not None:
                lib.kolo_elastic_destroy(self.elastic)
                self.left_job = bool(os.environ.get("KOLO_AGENT_SOCKET"))
            elif self.owned_comm:
                lib.kolo_comm_destroy(self.comm)
            self.elastic = None
            self.comm = None
            self.pid = 0
            self.owned_comm = False
            self.cuda_device = None
            self.generation += 1

    def drain(self) -> None:
        """Waits out every request still in flight (they fail fast once the
        communicator is aborted), so none outlives its communicator."""
        for request in list(self.inflight.values()):
            request.settle()

    # ---- queries ----

    def forked(self) -> bool:
        """Whether this process is a fork of the one that joined the ring."""
        return self.pid != 0 and self.pid != os.getpid()

    def own(self, what: str) -> None:
        """Raises ForkedProcessError in a fork of the process that joined the ring."""
        if self.forked():
            raise ForkedProcessError(what)

    def require(self, what: str = "kolo") -> int:
        """The communicator, for an operation on the ring (or the scoped process set)."""
        scoped = _SCOPE.get()
        if scoped is not None:
            return scoped.require(what)
        self.own(what)
        comm = self.comm
        if comm is None:
            raise NotInitializedError()
        return comm

    def _query(self) -> int:
        """The communicator, for a plain read of its fields (also in a forked child:
        they take no lock and touch no socket)."""
        comm = self.comm
        if comm is None:
            raise NotInitializedError()
        return comm

    def is_initialized(self) -> bool:
        return self.comm is not None

    def rank(self) -> int:
        scoped = _SCOPE.get()
        return scoped.rank() if scoped is not None else lib.kolo_comm_rank(self._query())

    def size(self) -> int:
        scoped = _SCOPE.get()
        return scoped.size() if scoped is not None else lib.kolo_comm_size(self._query())

    def global_rank(self) -> int:
        """This process's rank in the whole ring, inside a process set's scope too."""
        return lib.kolo_comm_rank(self._query())

    def global_size(self) -> int:
        return lib.kolo_comm_size(self._query())

    def local_rank(self) -> int:
        return lib.kolo_comm_local_rank(self._query())

    def local_size(self) -> int:
        return lib.kolo_comm_local_size(self._query())

    def epoch(self) -> int:
        return lib.kolo_comm_epoch(self._query())

    def stop_requested(self) -> bool:
        if self.elastic is None or self.forked():
            return False  # (its mutex may have been held by a parent's thread at the fork)
        return bool(lib.kolo_elastic_should_stop(self.elastic))

    def failure(self) -> Tuple[int, int]:
        """(status, rank) of the current communicator's failure; (0, -1) if none."""
        comm = self.comm
        return _lib.comm_error(comm) if comm else (0, -1)

    def check(self, code: int, what: str, message: str = "") -> None:
        """Raises for a non-zero status of an operation on the current ring."""
        scoped = _SCOPE.get()
        if scoped is not None and code != 0:
            scoped.check(code, what, message)
        if code != 0:
            raise_for(code, what, self.comm, message, self.stop_requested())

    # ---- elastic ----

    def ring_changed(self) -> bool:
        """Whether the agent has announced a newer ring (kolo_elastic_commit's
        check; a planned re-form, a drained member leaving, shows up only here).
        Raises JobStoppedError when the agent asked this process to leave."""
        if self.elastic is None:
            return False
        self.own("kolo.elastic: commit")
        code = lib.kolo_elastic_commit(self.elastic)
        if code == _abi.KOLO_ERR_RING_CHANGED:
            return True
        if code != 0:
            raise_for(code, "kolo.elastic: commit", None, "", bool(lib.kolo_elastic_should_stop(self.elastic)))
        return False

    def reform(self) -> None:
        """Moves onto the agent's next ring (kolo_elastic_reform)."""
        self.own("kolo.elastic: re-forming the ring")
        with self.lock:
            elastic = self.elastic
            if elastic is None:
                raise PeerLostError(
                    "the ring failed and this process has no kolo agent to re-form it", "KOLO_ERR_UNSUPPORTED"
                )
            old = self.comm
            if old and self.inflight:
                # requests still in flight finish at once; a planned re-form (at a commit,
                # nothing in flight) leaves the old ring to close without a failure
                lib.kolo_comm_abort(old)
            self._notify("reform")
            self.drain()
            code = lib.kolo_elastic_reform(elastic)
            self.comm = lib.kolo_elastic_comm(elastic)
            self.generation += 1
            self.cuda_device = None
            if code != 0:
                raise_for(
                    code, "kolo.elastic: re-forming the ring", None, "", bool(lib.kolo_elastic_should_stop(elastic))
                )
            self._notify("reformed")

    def report(self, json_text: str) -> None:
        self.own("kolo.report")
        if self.elastic is not None:
            self.check(lib.kolo_elastic_report(self.elastic, json_text.encode()), "kolo.report")

    def reconfigurations(self) -> int:
        return lib.kolo_elastic_reconfigurations(self.elastic) if self.elastic else 0

    # ---- CUDA ----

    def use_cuda(self, device: int) -> None:
        """Puts the communicator in CUDA mode for device (once per ring)."""
        scoped = _SCOPE.get()
        if scoped is not None:
            return scoped.use_cuda(device)
        with self.lock:
            if self.cuda_device == device:
                return
            if self.cuda_device is not None:
                raise ValueError(
                    "kolo: this rank already uses CUDA device %d, not %d (one GPU per rank)"
                    % (self.cuda_device, device)
                )
            self.check(lib.kolo_comm_use_cuda(self.require("kolo: CUDA mode"), device), "kolo: CUDA mode")
            self.cuda_device = device


RUNTIME = Runtime()


def check_status(code: int, what: str) -> None:
    """Raises KoloError for a non-zero status of a call that names no communicator."""
    if code != 0:
        raise_for(code, what)


__all__ = ["RUNTIME", "Runtime", "raise_for", "check_status", "KoloError", "current_scope", "in_scope"]
