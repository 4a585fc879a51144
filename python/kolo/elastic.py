"""Elastic training in place (horovod.elastic's shape): a training function
wrapped in @kolo.elastic.run survives ring changes of a kolo job in the same
process. When a worker dies or joins, libkolo fails the running collective (or
State.commit() sees the newer ring), the state rolls back to its last commit,
the process moves onto the agent's next ring (kolo_elastic_reform), the user's
reset callbacks run, the state is broadcast from the new rank 0 (always a
survivor, so it holds committed state) and the function is called again.

    state = kolo.elastic.ObjectState(epoch=0, step=0)

    @kolo.elastic.run
    def train(state):
        while state.step < total:
            ...one step with kolo collectives...
            state.step += 1
            if state.step % 10 == 0:
                state.commit()

A process the agent tells to leave (its worker is drained: it stops at its next
commit, and the others go on without redoing a step) or to stop (the job was
cancelled) exits with status 0 from run(). Outside a kolo job (no
KOLO_AGENT_SOCKET) a failure is raised as usual."""
from __future__ import annotations

import copy
import functools
import os
from typing import Any, Callable, Dict, List

from . import objects
from ._runtime import RUNTIME
from .errors import AbortedError, JobStoppedError, KoloError, KoloTimeoutError, PeerLostError, RingChangedError

# statuses after which the job goes on with a re-formed ring
RECOVERABLE = (PeerLostError, AbortedError, KoloTimeoutError, RingChangedError)
RECOVERABLE_STATUS = {
    "KOLO_ERR_PEER_LOST",
    "KOLO_ERR_ABORTED",
    "KOLO_ERR_TIMEOUT",
    "KOLO_ERR_RING_CHANGED",
    "KOLO_ERR_CONNECT",
    "KOLO_ERR_PROTOCOL",
    "KOLO_ERR_STALE_EPOCH",
}


class RingChangedInterrupt(Exception):
    """Raised by State.commit() when the agent has announced a newer ring (a worker
    joined or left): the committed state is current, nothing is rolled back."""


def recoverable(error: BaseException) -> bool:
    """Whether run() re-forms the ring after this error (and not re-raises it)."""
    if isinstance(error, JobStoppedError) or not isinstance(error, KoloError):
        return False
    return isinstance(error, RECOVERABLE) or error.status in RECOVERABLE_STATUS


def has_agent() -> bool:
    """Whether this process runs in a kolo job (its ring can be re-formed)."""
    return bool(os.environ.get("KOLO_AGENT_SOCKET"))


class State:
    """What survives a ring change. Subclasses implement save (take a copy),
    restore (go back to the copy) and sync (take rank 0's values, then save)."""

    def __init__(self) -> None:
        self._reset_callbacks: List[Callable[[], None]] = []

    def register_reset_callbacks(self, callbacks: List[Callable[[], None]]) -> None:
        """Functions called (no arguments) after every ring change, before the
        state is synchronised, e.g. to rescale the learning rate to kolo.size()."""
        self._reset_callbacks.extend(callbacks)

    def on_reset(self) -> None:
        for callback in self._reset_callbacks:
            callback()

    def commit(self) -> None:
        """Saves the state as the point to roll back to; raises RingChangedInterrupt
        when the ring is about to change (run() then re-forms it). Does not
        communicate."""
        self.save()
        self.check_host_updates()

    def check_host_updates(self) -> None:
        """Raises RingChangedInterrupt if the agent has announced a newer ring."""
        if RUNTIME.ring_changed():
            raise RingChangedInterrupt()

    def save(self) -> None:
        raise NotImplementedError

    def restore(self) -> None:
        raise NotImplementedError

    def sync(self) -> None:
        raise NotImplementedError


class ObjectState(State):
    """State made of picklable attributes given as keyword arguments
    (ObjectState(epoch=0, batch=0)); read and write them as attributes."""

    def __init__(self, **values: Any) -> None:
        super().__init__()
        self._known = sorted(values)
        for key, value in values.items():
            setattr(self, key, value)
        self._saved: Dict[str, Any] = {}
        self.save()

    def _values(self) -> Dict[str, Any]:
        return {key: getattr(self, key) for key in self._known}

    def save(self) -> None:
        self._saved = copy.deepcopy(self._values())

    def restore(self) -> None:
        for key, value in copy.deepcopy(self._saved).items():
            setattr(self, key, value)

    def sync(self) -> None:
        if self._known:
            for key, value in objects.broadcast_object(self._values(), 0, name="elastic.state").items():
                setattr(self, key, value)
        self.save()


def run(func: Callable[..., Any]) -> Callable[..., Any]:
    """Decorator: calls func(state, *args, **kwargs) until it returns, recovering
    from ring changes (see the module doc). Exceptions that are not ring
    failures, a job stop, or a failure outside a kolo job are raised."""

    @functools.wraps(func)
    def wrapper(state: State, *args: Any, **kwargs: Any) -> Any:
        if not isinstance(state, State):
            raise TypeError(
                "kolo.elastic.run: the first argument must be a kolo.elastic State, not %s" % type(state).__name__
            )
        RUNTIME.require()
        try:
            while True:
                try:
                    state.sync()
                    return func(state, *args, **kwargs)
                except RingChangedInterrupt:
                    pass
                except KoloError as error:
                    if isinstance(error, JobStoppedError) or not recoverable(error) or not has_agent():
                        raise
                    state.restore()
                reform()  # a failure here (no next ring in time) is raised
                state.on_reset()
        except JobStoppedError:
            if not has_agent():
                raise
            # the agent asked this process to stop (job over or cancelled) or to leave
            # (its worker is drained): nothing of the job is left for it to do
            RUNTIME.shutdown()
            raise SystemExit(0)

    return wrapper


def reform() -> None:
    """Moves this process onto the agent's next ring (blocks up to KOLO_TIMEOUT)."""
    RUNTIME.reform()


def reconfigurations() -> int:
    """How many times this process's ring has been re-formed."""
    return RUNTIME.reconfigurations()
